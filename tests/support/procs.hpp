// Forked rank processes that report back through a pipe. Unlike run_pair
// (leader in the test process), both ranks here are children and the test
// process only coordinates: it can kill, stop or proxy either rank and
// time the survivor against the moment of the fault.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <sys/types.h>

#include "ds4tp/ds4tp.h"
#include "support/expect.hpp"

namespace ds4tp::test {

enum ReportKind : int32_t {
  kReportPort = 1,    // value: the leader's listening port
  kReportReady = 2,   // value: the phase the rank just entered
  kReportResult = 3,  // rc: the first failing call's status (0 = all ok)
};

// Fixed-size, written with one write() (atomic on a pipe).
struct Report {
  int32_t kind = 0;
  int32_t rc = 0;
  int64_t value = 0;
  int32_t failed = 0;  // ds4tp_failed() after the call
  uint64_t t_ns = 0;   // CLOCK_MONOTONIC when the call returned
  char msg[400] = {};
};

uint64_t mono_ns();

// Writes a report; `tp` (may be NULL) supplies failed() and the message.
void send_report(int fd, int32_t kind, int64_t value, int32_t rc = 0,
                 const ds4tp_pair *tp = nullptr);

class Child {
 public:
  // Forks; the child runs body(report_fd) in a process group of its own
  // (procs.cpp says why) and _exits with its return value.
  // Its failed CHILD_EXPECT checks name it `label` and come back in
  // failures() once it is reaped.
  static Child spawn(const std::function<int(int)> &body, const char *label = "child");
  Child() = default;
  Child(Child &&o) noexcept;
  Child &operator=(Child &&o) noexcept;
  ~Child();

  // Next report within timeout_ms; false on timeout or when the child is gone.
  bool next(Report &r, int timeout_ms);
  // Next report of `kind`, skipping others.
  bool next_of(int32_t kind, Report &r, int timeout_ms);
  void signal(int sig);
  // Waits for exit; SIGKILLs after timeout_ms (then *hung = true). Returns
  // the wait status.
  int reap(int timeout_ms, bool *hung = nullptr);
  pid_t pid() const { return pid_; }
  // What the child's failed checks said (complete after reap()).
  const std::string &failures() const { return failures_; }
  // The wait status in words plus failures(), for INFO().
  std::string describe(int status) const;

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  int fail_fd_ = -1;
  std::string failures_;
  bool reaped_ = false;
};

// Options with the test defaults (loopback, short deadlines, quiet logs).
ds4tp_options rank_options(int role, int port = 0);

}  // namespace ds4tp::test
