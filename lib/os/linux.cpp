// The OS seam on Linux (os.hpp): futexes, /proc, MSG_NOSIGNAL, /dev/shm.
#include "os/os.hpp"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fcntl.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace ds4tp::os {

const char *platform_name() { return "linux"; }

bool cpu_allowed(int cpu, int &allowed) {
  cpu_set_t set;
  CPU_ZERO(&set);
  bool ok = cpu < CPU_SETSIZE && sched_getaffinity(0, sizeof set, &set) == 0 &&
            CPU_ISSET(cpu, &set);
  allowed = CPU_COUNT(&set);
  return ok;
}

void pin_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

int current_cpu() { return sched_getcpu(); }

void name_this_thread(const char *name) {
  char cut[kThreadNameMaxLinux + 1]{};
  std::memcpy(cut, name, strnlen(name, kThreadNameMaxLinux));  // a longer one is ERANGE
  pthread_setname_np(pthread_self(), cut);
}

// Not FUTEX_PRIVATE: the word lives in a mapping two processes share.
void wait_on_word(uint32_t *word, uint32_t expected, uint64_t timeout_ns) {
  timespec ts{time_t(timeout_ns / 1000000000ull), long(timeout_ns % 1000000000ull)};
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void wake_word(uint32_t *word) {
  syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

bool random_bytes(void *p, size_t n) {
  return getrandom(p, n, GRND_NONBLOCK) == ssize_t(n);
}

std::string host_seed() {
  std::string seed;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, seed);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  seed += '/';
  seed += host;
  // The shm directory's device and inode: ranks in containers that share
  // a kernel but not /dev/shm cannot share memory, so they differ here.
  struct stat st {};
  if (stat("/dev/shm", &st) == 0)
    seed += "/" + std::to_string(uint64_t(st.st_dev)) + ":" + std::to_string(uint64_t(st.st_ino));
  return seed;
}

namespace {

// Fields of /proc/PID/stat after the command name: state, then field 22
// (start time, clock ticks since boot) 20 fields later. The name may hold
// spaces and ')'. `gone` is set only when the process certainly does not
// exist.
bool read_stat(pid_t pid, char &state, uint64_t &start, bool &gone) {
  gone = false;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    gone = errno == ENOENT || errno == ESRCH;
    return false;
  }
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  char *p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return false;
  p += 2;
  state = *p;
  for (int field = 3; field < 22; field++) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return false;
    p++;
  }
  char *end = nullptr;
  start = std::strtoull(p, &end, 10);
  return end != p;
}

}  // namespace

uint64_t process_start_time(pid_t pid) {
  char state = 0;
  uint64_t start = 0;
  bool gone = false;
  return read_stat(pid, state, start, gone) ? start : 0;
}

bool process_alive(pid_t pid, uint64_t start_time) {
  char state = 0;
  uint64_t start = 0;
  bool gone = false;
  if (!read_stat(pid, state, start, gone)) return !gone;
  if (state == 'Z' || state == 'X') return false;  // exited, not yet reaped
  return start == start_time;
}

bool sees_stopped_processes() { return true; }

bool process_stopped(pid_t pid) {
  char state = 0;
  uint64_t start = 0;
  bool gone = false;
  return read_stat(pid, state, start, gone) && (state == 'T' || state == 't');
}

const char *shm_dir() { return "/dev/shm"; }

size_t shm_name_max() { return NAME_MAX; }

int shm_open_cloexec(const char *name, int oflag, mode_t mode) {
  return shm_open(name, oflag | O_CLOEXEC, mode);
}

uint64_t shm_object_bytes(uint64_t bytes) { return bytes; }

// Futexes key on the page itself: nothing to record.
void shared_mapping_added(const void *, size_t, const std::string &) {}
void shared_mapping_removed(const void *) {}

int reserve_file(int fd, uint64_t bytes) {
  int e = posix_fallocate(fd, 0, off_t(bytes));
  return e == EOPNOTSUPP || e == EINVAL ? 0 : e;  // a file system that cannot: not an error
}

int open_socket(int family, int type, int protocol) {
  return ::socket(family, type | SOCK_CLOEXEC | SOCK_NONBLOCK, protocol);
}

void no_sigpipe(int) {}  // MSG_NOSIGNAL on every send instead

ssize_t send_nosignal(int fd, const void *buf, size_t len) {
  return ::send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
}

ssize_t sendv_nosignal(int fd, const iovec *iov, int iovcnt) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec *>(iov);
  msg.msg_iovlen = size_t(iovcnt);
  return ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void tune_keepalive(int fd, int idle_s, int intvl_s, int count, int dead_peer_ms) {
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl_s, sizeof intvl_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  unsigned timeout = unsigned(dead_peer_ms);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, sizeof timeout);
}

// POLLRDHUP reports the peer's FIN even while unread bytes are queued,
// without reading them.
int wait_hangup(const int *fds, int nfds, uint64_t timeout_ns, Hangup &how) {
  how = Hangup::kNone;
  pollfd p[4];
  if (nfds > 4) nfds = 4;
  for (int i = 0; i < nfds; i++) p[i] = {fds[i], POLLRDHUP, 0};
  timespec ts{time_t(timeout_ns / 1000000000ull), long(timeout_ns % 1000000000ull)};
  int r = ::ppoll(p, nfds_t(nfds), &ts, nullptr);
  if (r <= 0) return -1;
  for (int i = 0; i < nfds; i++) {
    if (p[i].revents & POLLERR) {
      how = Hangup::kReset;
      return i;
    }
    if (p[i].revents & (POLLRDHUP | POLLHUP)) {
      how = Hangup::kClosed;
      return i;
    }
  }
  return -1;
}

bool hangup_look_suffices() { return true; }

// One eventfd serves as both ends.
bool wake_open(int fds[2]) {
  fds[0] = fds[1] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  return fds[0] >= 0;
}

void wake_signal(const int fds[2]) {
  if (fds[1] < 0) return;
  uint64_t one = 1;
  (void)!::write(fds[1], &one, sizeof one);
}

void wake_close(int fds[2]) {
  if (fds[0] >= 0) ::close(fds[0]);
  if (fds[1] >= 0 && fds[1] != fds[0]) ::close(fds[1]);
  fds[0] = fds[1] = -1;
}

const char *const *verbs_library_names() {
  static const char *const names[] = {"libibverbs.so.1", nullptr};
  return names;
}

// sysfs, for libraries without ibv_query_gid_ex.
bool rdma_gid_type(const char *device, int port, int index, std::string &type) {
  std::ifstream f("/sys/class/infiniband/" + std::string(device) + "/ports/" +
                  std::to_string(port) + "/gid_attrs/types/" + std::to_string(index));
  return bool(std::getline(f, type));
}

}  // namespace ds4tp::os
