// Network namespaces for tests: commands run with a time limit, inside a
// process's namespace, a veth pair between two namespaces, and namespace
// holders (children that sit in a namespace of their own, for rank
// processes to enter). Everything made here vanishes with the processes
// in it. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), `ip` and `nsenter`;
// callers skip with "ds4tp-skip:" where a step fails.
#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

#include "support/procs.hpp"

namespace ds4tp::test {

// Runs a command (output discarded) within timeout_ms; its exit status, or -1.
int run_cmd(const std::vector<std::string> &argv, int timeout_ms = 5000);
// `cmd` inside process `pid`'s network namespace (nsenter).
std::vector<std::string> in_ns(pid_t pid, std::vector<std::string> cmd);
// Joins the namespaces of processes a (address addr_a/24 on device da)
// and b (addr_b/24 on db) with a veth pair; both ends and lo up.
bool veth_between(pid_t a, const std::string &da, const std::string &addr_a, pid_t b,
                  const std::string &db, const std::string &addr_b);
// Waits (10 s at most) for the go byte 'g' on `go_fd`.
bool await_go(int go_fd);

// A child in a network namespace of its own until it is killed: a host
// of the link model. ok() is false where the namespace was refused.
class NetnsHolder {
 public:
  NetnsHolder();
  bool ok() const { return ok_; }
  pid_t pid() const { return child_.pid(); }
  // In a forked child: moves this process into the holder's namespace.
  bool enter() const;
  ~NetnsHolder();

 private:
  Child child_;
  bool ok_ = false;
};

}  // namespace ds4tp::test
