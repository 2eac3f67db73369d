#include "support/procs.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ds4tp::test {

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

void send_report(int fd, int32_t kind, int64_t value, int32_t rc, const ds4tp_pair *tp) {
  Report r;
  r.kind = kind;
  r.value = value;
  r.rc = rc;
  r.t_ns = mono_ns();
  if (tp != nullptr) {
    r.failed = ds4tp_failed(tp);
    std::snprintf(r.msg, sizeof r.msg, "%s", ds4tp_errmsg(tp));
  } else if (rc != 0) {
    std::snprintf(r.msg, sizeof r.msg, "%s", ds4tp_last_error());
  }
  (void)!write(fd, &r, sizeof r);
}

Child Child::spawn(const std::function<int(int)> &body, const char *label) {
  int p[2], f[2];
  if (pipe2(p, O_CLOEXEC) != 0) return Child();
  if (pipe2(f, O_CLOEXEC) != 0) {
    close(p[0]);
    close(p[1]);
    return Child();
  }
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    // A process group of its own, whose parent (the test) is outside it:
    // when the shell that started the test exits, the test's group is
    // orphaned, and the kernel sends SIGHUP and SIGCONT to an orphaned
    // group that holds a stopped process. A rank a test has SIGSTOPped
    // would then run on (under nohup) or die, and the test would judge
    // the wrong fault.
    setpgid(0, 0);
    close(p[0]);
    close(f[0]);
    set_failure_label(label);
    set_failure_sink(f[1]);
    int code = body(p[1]);
    _exit(code & 0xff);
  }
  close(p[1]);
  close(f[1]);
  Child c;
  c.pid_ = pid;
  c.fd_ = p[0];
  c.fail_fd_ = f[0];
  return c;
}

std::string Child::describe(int status) const {
  std::string s = "child pid " + std::to_string(pid_);
  if (WIFEXITED(status))
    s += " exited " + std::to_string(WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    s += " killed by signal " + std::to_string(WTERMSIG(status));
  return s + "\n" + failures_;
}

Child::Child(Child &&o) noexcept { *this = std::move(o); }

Child &Child::operator=(Child &&o) noexcept {
  std::swap(pid_, o.pid_);
  std::swap(fd_, o.fd_);
  std::swap(reaped_, o.reaped_);
  std::swap(fail_fd_, o.fail_fd_);
  std::swap(failures_, o.failures_);
  return *this;
}

Child::~Child() {
  if (pid_ > 0 && !reaped_) reap(0);
  if (fd_ >= 0) close(fd_);
  if (fail_fd_ >= 0) close(fail_fd_);
}

bool Child::next(Report &r, int timeout_ms) {
  if (fd_ < 0) return false;
  uint64_t deadline = mono_ns() + uint64_t(timeout_ms) * 1000000ull;
  size_t have = 0;
  auto *p = reinterpret_cast<char *>(&r);
  while (have < sizeof r) {
    uint64_t now = mono_ns();
    if (now >= deadline) return false;
    pollfd pfd{fd_, POLLIN, 0};
    int n = poll(&pfd, 1, int((deadline - now) / 1000000ull) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    ssize_t got = read(fd_, p + have, sizeof r - have);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    have += size_t(got);
  }
  return true;
}

bool Child::next_of(int32_t kind, Report &r, int timeout_ms) {
  uint64_t deadline = mono_ns() + uint64_t(timeout_ms) * 1000000ull;
  for (;;) {
    uint64_t now = mono_ns();
    if (now >= deadline) return false;
    if (!next(r, int((deadline - now) / 1000000ull) + 1)) return false;
    if (r.kind == kind) return true;
  }
}

void Child::signal(int sig) {
  if (pid_ > 0 && !reaped_) kill(pid_, sig);
}

int Child::reap(int timeout_ms, bool *hung) {
  if (pid_ <= 0 || reaped_) return 0;
  int status = 0;
  uint64_t deadline = mono_ns() + uint64_t(timeout_ms) * 1000000ull;
  for (;;) {
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) break;
    if (mono_ns() >= deadline) {
      if (hung) *hung = true;
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    usleep(2000);
  }
  reaped_ = true;
  failures_ += drain_failures(fail_fd_);
  return status;
}

ds4tp_options rank_options(int role, int port) {
  ds4tp_options o;
  ds4tp_options_init(&o);
  o.role = role;
  o.transport = DS4TP_TRANSPORT_TCP;
  if (role == DS4TP_ROLE_LEADER)
    o.listen_port = port;
  else
    o.leader_port = port;
  o.connect_timeout_ms = 3000;
  o.hello_timeout_ms = 1000;
  o.gate_timeout_ms = 1000;
  o.big_gate_timeout_ms = 2000;
  // These suites time a peer that is not at a gate by the gate timeouts
  // (the arrival wait's floors); test_liveness uses the long default.
  o.peer_arrival_timeout_ms = 1;
  o.spin_us = 50;
  o.log_level = DS4TP_LOG_ERROR;
  return o;
}

}  // namespace ds4tp::test
