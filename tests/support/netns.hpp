// Network namespaces for tests: commands run with a time limit, inside a
// process's namespace, a veth pair between two namespaces, and namespace
// holders (children that sit in a namespace of their own, for rank
// processes to enter). Everything made here vanishes with the processes
// in it. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), `ip` and `nsenter`;
// callers skip with "ds4tp-skip:" where a step fails.
#pragma once

#include <functional>
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

// A leader and a worker process, each of which first unshares a network
// namespace of its own: `body(report_fd, go_fd, role)` runs in each, reports
// READY(0) once unshared (RESULT with rc 77 when refused), then waits for
// the go byte (await_go) before pairing. The constructor waits for both
// READYs; skipped() says why the namespaces are not there. The test then
// joins them (veth_between), calls go(), and reads the ranks' reports.
// The destructor kills and reaps both.
class NsRanks {
 public:
  using Body = std::function<int(int report_fd, int go_fd, int role)>;
  explicit NsRanks(const Body &body);
  ~NsRanks();
  NsRanks(const NsRanks &) = delete;
  NsRanks &operator=(const NsRanks &) = delete;
  const std::string &skipped() const { return skipped_; }
  void skip(const std::string &why) { skipped_ = why; }
  // False, after printing "ds4tp-skip: <why>" (ctest's skip mark), when
  // the namespaces or links could not be made.
  bool runnable() const;
  // Writes the go byte to both (again for a second phase).
  void go();
  // "leader: ...\nworker: ..." of both ranks' last reports and failed checks.
  std::string describe(const Report &leader_report, const Report &worker_report);
  Child leader, worker;

 private:
  int go_l_[2] = {-1, -1}, go_w_[2] = {-1, -1};
  std::string skipped_;
};

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
