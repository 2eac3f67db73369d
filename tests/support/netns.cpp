#include "support/netns.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

namespace ds4tp::test {

int run_cmd(const std::vector<std::string> &argv, int timeout_ms) {
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    std::vector<char *> a;
    for (auto &s : argv) a.push_back(const_cast<char *>(s.c_str()));
    a.push_back(nullptr);
    execvp(a[0], a.data());
    _exit(127);
  }
  int status = 0;
  for (int waited = 0;; waited += 5) {
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    if (waited >= timeout_ms) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    usleep(5000);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<std::string> in_ns(pid_t pid, std::vector<std::string> cmd) {
  std::vector<std::string> a = {"nsenter", "-t", std::to_string(pid), "-n"};
  a.insert(a.end(), cmd.begin(), cmd.end());
  return a;
}

bool veth_between(pid_t a, const std::string &da, const std::string &addr_a, pid_t b,
                  const std::string &db, const std::string &addr_b) {
  return run_cmd({"ip", "link", "add", da, "netns", std::to_string(a), "type", "veth", "peer",
                  "name", db, "netns", std::to_string(b)}) == 0 &&
         run_cmd(in_ns(a, {"ip", "addr", "add", addr_a + "/24", "dev", da})) == 0 &&
         run_cmd(in_ns(b, {"ip", "addr", "add", addr_b + "/24", "dev", db})) == 0 &&
         run_cmd(in_ns(a, {"ip", "link", "set", da, "up"})) == 0 &&
         run_cmd(in_ns(b, {"ip", "link", "set", db, "up"})) == 0 &&
         run_cmd(in_ns(a, {"ip", "link", "set", "lo", "up"})) == 0 &&
         run_cmd(in_ns(b, {"ip", "link", "set", "lo", "up"})) == 0;
}

NsRanks::NsRanks(const Body &body) {
  if (pipe(go_l_) != 0 || pipe(go_w_) != 0) {
    skipped_ = "pipe() failed";
    return;
  }
  leader = Child::spawn([&](int fd) { return body(fd, go_l_[0], DS4TP_ROLE_LEADER); }, "leader");
  worker = Child::spawn([&](int fd) { return body(fd, go_w_[0], DS4TP_ROLE_WORKER); }, "worker");
  close(go_l_[0]);
  close(go_w_[0]);
  Report rl, rw;
  if (!(leader.next(rl, 5000) && worker.next(rw, 5000) && rl.kind == kReportReady &&
        rw.kind == kReportReady))
    skipped_ = "cannot create network namespaces here (unshare(CLONE_NEWNET) refused)";
}

NsRanks::~NsRanks() {
  leader.signal(SIGKILL);
  worker.signal(SIGKILL);
  leader.reap(2000);
  worker.reap(2000);
  if (go_l_[1] >= 0) close(go_l_[1]);
  if (go_w_[1] >= 0) close(go_w_[1]);
}

bool NsRanks::runnable() const {
  if (skipped_.empty()) return true;
  std::printf("ds4tp-skip: %s\n", skipped_.c_str());
  return false;
}

void NsRanks::go() {
  (void)!write(go_l_[1], "g", 1);
  (void)!write(go_w_[1], "g", 1);
}

std::string NsRanks::describe(const Report &l, const Report &w) {
  return std::string("leader: ") + l.msg + "\n" + leader.failures() + "worker: " + w.msg +
         "\n" + worker.failures();
}

bool await_go(int go_fd) {
  char b;
  pollfd p{go_fd, POLLIN, 0};
  return poll(&p, 1, 10000) > 0 && read(go_fd, &b, 1) == 1 && b == 'g';
}

NetnsHolder::NetnsHolder() {
  child_ = Child::spawn(
      [](int fd) {
        if (unshare(CLONE_NEWNET) != 0) {
          send_report(fd, kReportResult, 0, 77);
          return 0;
        }
        send_report(fd, kReportReady, 0);
        for (;;) pause();  // until killed
      },
      "netns holder");
  Report r;
  ok_ = child_.next(r, 5000) && r.kind == kReportReady;
}

bool NetnsHolder::enter() const {
  const int fd = open(("/proc/" + std::to_string(pid()) + "/ns/net").c_str(), O_RDONLY);
  if (fd < 0) return false;
  const bool in = setns(fd, CLONE_NEWNET) == 0;
  close(fd);
  return in;
}

NetnsHolder::~NetnsHolder() {
  child_.signal(SIGKILL);
  child_.reap(2000);
}

}  // namespace ds4tp::test
