// The helpers every mode of ds4tp_soak uses (soak.hpp): output lines,
// resource samples, child processes, the watchdog, the driver's buffers
// and the payload words.
#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "soak.hpp"

namespace soak {

// ---- output -------------------------------------------------------------

void emit(int fd, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (size_t(n) > sizeof buf - 2) n = int(sizeof buf - 2);
  buf[n++] = '\n';
  (void)!write(fd, buf, size_t(n));
}

std::string one_line(const char *s) {
  std::string o = s ? s : "";
  for (char &c : o)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    else if (c == '"') c = '\'';
  if (o.size() > 300) o.resize(300);
  return o;
}

bool named_code(int rc) {
  return rc == DS4TP_ETIMEDOUT || rc == DS4TP_EPEERCLOSED || rc == DS4TP_EFAILED ||
         rc == DS4TP_EIO;
}

const char *code_name(int rc) {
  return rc == kWrongBits ? "wrong-bits" : rc == kUnnoticed ? "unnoticed" : rc == 0 ? "-"
                                                                            : ds4tp_err_name(rc);
}

// ---- resources --------------------------------------------------------

namespace {

// Returns the heap's free memory to the system before a sample, so the
// RSS read after it is what is in use, not what the allocator kept.
void trim_heap() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

}  // namespace

Usage usage() {
  Usage u;
  if (FILE *f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
      if (std::strncmp(line, "VmRSS:", 6) == 0) u.rss_kb = std::atol(line + 6);
      if (std::strncmp(line, "Threads:", 8) == 0) u.threads = std::atol(line + 8);
    }
    std::fclose(f);
  }
  if (DIR *d = opendir("/proc/self/fd")) {
    long n = 0;
    while (dirent *e = readdir(d))
      if (e->d_name[0] != '.') n++;
    closedir(d);
    u.fds = n - 1;  // the directory's own fd
  }
  return u;
}

void print_sample(const char *tag, const char *role, long n, uint64_t t0) {
  trim_heap();
  Usage u = usage();
  emit(1, "sample tag=%s role=%s n=%ld t=%.1f fds=%ld rss_kb=%ld threads=%ld", tag, role, n,
       double(now_ns() - t0) / 1e9, u.fds, u.rss_kb, u.threads);
}

// ---- child processes ----------------------------------------------------

// The child dies with this process (PR_SET_PDEATHSIG), so a supervisor
// killed by soak.sh leaves nothing behind. It runs in a process group of
// its own, whose parent (this process) is outside it: a group that holds
// a stopped process and is orphaned gets SIGHUP from the kernel, which
// would otherwise kill a SIGSTOPped child whenever the shell that started
// the soak exits.
pid_t spawn(const std::vector<std::string> &args, int keep_fd, int keep_fd2) {
  std::vector<char *> argv;
  static char self[] = "/proc/self/exe";
  argv.push_back(self);
  for (const auto &a : args) argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(kExitSetup);
  setpgid(0, 0);
  for (int fd : {keep_fd, keep_fd2})
    if (fd >= 0) fcntl(fd, F_SETFD, 0);
  execv(self, argv.data());
  _exit(127);
}

namespace {

// Waits for `pid` up to ms; -1 in *status when it is still running.
bool wait_exit(pid_t pid, int ms, int *status) {
  const uint64_t end = now_ns() + uint64_t(ms) * 1000000ull;
  for (;;) {
    int st = 0;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) {
      *status = st;
      return true;
    }
    if (r < 0 || now_ns() >= end) {
      *status = -1;
      return r < 0;
    }
    usleep(2000);
  }
}

}  // namespace

std::string reap(pid_t pid, int ms, int *status) {
  if (!wait_exit(pid, ms, status)) {
    kill(pid, SIGCONT);
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    *status = -1;
    return "hung";
  }
  if (WIFSIGNALED(*status)) return std::string("signal") + std::to_string(WTERMSIG(*status));
  return std::string("exit") + std::to_string(WEXITSTATUS(*status));
}

bool exited_with(int st, int code) { return st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == code; }
bool killed(int st) { return st >= 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL; }

bool read_line(int fd, int ms, std::string &line) {
  line.clear();
  const uint64_t end = now_ns() + uint64_t(ms) * 1000000ull;
  for (;;) {
    int left = int((end - std::min(end, now_ns())) / 1000000ull);
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) <= 0) return false;
    char c;
    ssize_t r = read(fd, &c, 1);
    if (r <= 0) return false;
    if (c == '\n') return true;
    line += c;
  }
}

// ---- the watchdog -----------------------------------------------------

Watchdog g_dog;

void Watchdog::run() {
  std::thread([this] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      uint64_t s = since.load();
      if (s != 0 && now_ns() - s > uint64_t(kCycleHangS) * 1000000000ull) {
        emit(1, "fail tag=%s n=%ld what=hang stage=%s", tag.c_str(), cycle.load(), stage.load());
        _exit(4);
      }
    }
  }).detach();
}

// ---- buffers and payload words ------------------------------------------

Buffers &bufs() {
  static Buffers b;
  return b;
}

uint32_t word_base(uint64_t seed, int rank, uint64_t what) {
  return uint32_t(mix(seed ^ (uint64_t(rank) << 60) ^ mix(what)));
}
void fill_words(void *p, uint64_t bytes, uint32_t base) {
  auto *b = static_cast<uint8_t *>(p);
  for (uint64_t i = 0; i < bytes / 4; i++) {
    uint32_t w = base + uint32_t(i) * 0x9e3779b1u;
    std::memcpy(b + i * 4, &w, 4);
  }
  for (uint64_t i = bytes & ~uint64_t(3); i < bytes; i++) b[i] = uint8_t(base >> (i % 4 * 8));
}
bool check_words(const void *p, uint64_t bytes, uint32_t base) {
  const auto *b = static_cast<const uint8_t *>(p);
  for (uint64_t i = 0; i < bytes / 4; i++) {
    uint32_t w = base + uint32_t(i) * 0x9e3779b1u, got;
    std::memcpy(&got, b + i * 4, 4);
    if (got != w) return false;
  }
  for (uint64_t i = bytes & ~uint64_t(3); i < bytes; i++)
    if (b[i] != uint8_t(base >> (i % 4 * 8))) return false;
  return true;
}

}  // namespace soak
