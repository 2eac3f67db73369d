// Portable POSIX primitives behind the OS seam (portable.hpp says when
// each is used and how it differs from the Linux call).
#include "os/portable.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <new>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__APPLE__)
#include <sys/random.h>  // getentropy
#endif

namespace ds4tp::os::portable {

uint64_t hash64(const std::string &s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// ---- wait/wake ------------------------------------------------------------

namespace {

// Registered mappings. The gate path (wait_on_word, wake_word) only reads
// them, without a lock: a slot is filled before its base is published and
// emptied only when its mapping goes away, when no gate can use it.
struct Mapping {
  std::atomic<uintptr_t> base{0};
  size_t bytes = 0;
  int rfd = -1;  // read end: waiters poll it
  int wfd = -1;  // write end: wakers poke it
  std::string path;
};
constexpr int kMaxMappings = 32;
Mapping g_maps[kMaxMappings];
std::mutex g_maps_mu;  // registration only

const Mapping *find_mapping(const void *p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  for (const Mapping &m : g_maps) {
    uintptr_t b = m.base.load(std::memory_order_acquire);
    if (b != 0 && a >= b && a - b < m.bytes) return &m;
  }
  return nullptr;
}

void set_cloexec_nonblock(int fd) {
  fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void sleep_for(uint64_t ns) {
  timespec ts{time_t(ns / 1000000000ull), long(ns % 1000000000ull)};
  nanosleep(&ts, nullptr);
}

// Words outside every registered mapping share one pipe of this process:
// threads of this process (and children forked after it was made) wake
// each other through it; another process cannot, and its waiter sleeps
// until its timeout.
const Mapping &local_pipe() {
  // Built in static storage, never destroyed (a gate may use it during
  // exit) and never on the heap: the first wait that blocks may come in
  // the middle of a hot path, which must not allocate.
  alignas(Mapping) static unsigned char storage[sizeof(Mapping)];
  static Mapping *m = [] {
    auto *p = new (storage) Mapping;
    int fds[2];
    if (::pipe(fds) == 0) {
      set_cloexec_nonblock(fds[0]);
      set_cloexec_nonblock(fds[1]);
      p->rfd = fds[0];
      p->wfd = fds[1];
    }
    return p;
  }();
  return *m;
}

const Mapping *mapping_or_local(const void *word) {
  const Mapping *m = find_mapping(word);
  return m != nullptr ? m : &local_pipe();
}

}  // namespace

std::string poke_path(const std::string &key) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "/tmp/ds4tp-w%u-%016llx", unsigned(geteuid()),
                static_cast<unsigned long long>(hash64(key)));
  return buf;
}

void shared_mapping_added(const void *base, size_t bytes, const std::string &key) {
  std::lock_guard<std::mutex> lock(g_maps_mu);
  Mapping *slot = nullptr;
  for (Mapping &m : g_maps)
    if (m.base.load(std::memory_order_relaxed) == 0) {
      slot = &m;
      break;
    }
  if (slot == nullptr) return;  // words there fall back to short sleeps
  const std::string path = poke_path(key);
  // Both ranks create it; the second finds it there. Ours only: a FIFO of
  // another user (or anything else) under that name is not used.
  if (mkfifo(path.c_str(), 0600) != 0 && errno != EEXIST) return;
  int rfd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW);
  if (rfd < 0) return;
  struct stat st {};
  if (fstat(rfd, &st) != 0 || !S_ISFIFO(st.st_mode) || st.st_uid != geteuid()) {
    ::close(rfd);
    return;
  }
  // We are a reader now, so a non-blocking open for writing succeeds.
  int wfd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOFOLLOW);
  if (wfd < 0) {
    ::close(rfd);
    return;
  }
  set_cloexec_nonblock(rfd);
  set_cloexec_nonblock(wfd);
  slot->bytes = bytes;
  slot->rfd = rfd;
  slot->wfd = wfd;
  slot->path = path;
  slot->base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
}

void shared_mapping_removed(const void *base) {
  std::lock_guard<std::mutex> lock(g_maps_mu);
  for (Mapping &m : g_maps) {
    if (m.base.load(std::memory_order_relaxed) != reinterpret_cast<uintptr_t>(base) ||
        base == nullptr)
      continue;
    m.base.store(0, std::memory_order_release);
    ::close(m.rfd);
    ::close(m.wfd);
    ::unlink(m.path.c_str());  // the peer may have removed it first
    m.rfd = m.wfd = -1;
    m.bytes = 0;
    m.path.clear();
  }
}

void wait_on_word(uint32_t *word, uint32_t expected, uint64_t timeout_ns) {
  // __atomic builtins, not std::atomic_ref: older libc++ (Apple's before
  // LLVM 19, Zig 0.11's) lacks the latter.
  if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != expected) return;
  const Mapping *m = mapping_or_local(word);
  if (m->rfd < 0) {  // no pipe could be made: a short nap, the caller loops
    sleep_for(std::min<uint64_t>(timeout_ns, 100000));
    return;
  }
  // A waker changes the word before it pokes, and the poke stays in the
  // FIFO until read: checking the word after draining old pokes and
  // before poll() loses no wake.
  char buf[64];
  while (::read(m->rfd, buf, sizeof buf) > 0) {
  }
  if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != expected) return;
  pollfd p{m->rfd, POLLIN, 0};
  const uint64_t ms = (timeout_ns + 999999) / 1000000;
  ::poll(&p, 1, int(std::min<uint64_t>(ms, 1u << 30)));
  while (::read(m->rfd, buf, sizeof buf) > 0) {
  }
}

void wake_word(uint32_t *word) {
  const Mapping *m = mapping_or_local(word);
  if (m->wfd < 0) return;
  const char c = 1;
  // EAGAIN: the FIFO is full of pokes nobody drained yet; one is enough.
  (void)!::write(m->wfd, &c, 1);
}

// ---- randomness, host, processes ---------------------------------------------

bool random_bytes(void *p, size_t n) {
  auto *b = static_cast<uint8_t *>(p);
  while (n > 0) {
    size_t k = std::min<size_t>(n, 256);
    if (getentropy(b, k) != 0) return false;
    b += k;
    n -= k;
  }
  return true;
}

std::string host_seed() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  timespec rt{}, mono{};
  clock_gettime(CLOCK_REALTIME, &rt);
  clock_gettime(CLOCK_MONOTONIC, &mono);
  const int64_t boot = int64_t(rt.tv_sec) - int64_t(mono.tv_sec);
  const int64_t minute = (boot + 30) / 60;
  return std::string("posix/") + host + "/" + std::to_string(long(gethostid())) + "/boot~" +
         std::to_string(minute);
}

// No start time is readable portably: 1 stands for "exists here".
uint64_t process_start_time(pid_t pid) {
  return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM) ? 1 : 0;
}

bool process_alive(pid_t pid, uint64_t) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A zombie still answers kill(); when it is our child, waitid() sees
  // its exit without reaping it (WNOWAIT).
  siginfo_t info{};
  if (waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid)
    return false;
  return true;
}

int shm_open_cloexec(const char *name, int oflag, mode_t mode) {
  int fd = ::shm_open(name, oflag, mode);
  if (fd >= 0) fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
  return fd;
}

bool cpu_allowed(int cpu, int &allowed) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  allowed = n > 0 ? int(n) : 0;
  return cpu >= 0 && (allowed == 0 || cpu < allowed);
}

void name_this_thread(const char *name) {
#if defined(__APPLE__)
  pthread_setname_np(name);  // self only; Darwin keeps 63 characters
#elif defined(__linux__)
  char cut[kThreadNameMaxLinux + 1]{};
  std::memcpy(cut, name, strnlen(name, kThreadNameMaxLinux));
  pthread_setname_np(pthread_self(), cut);
#else
  (void)name;  // no portable call: threads stay unnamed
#endif
}

// ---- sockets -------------------------------------------------------------------

int open_socket(int family, int type, int protocol) {
  int fd = ::socket(family, type, protocol);
  if (fd >= 0) set_cloexec_nonblock(fd);
  return fd;
}

namespace {

// Runs `send` with SIGPIPE blocked in this thread; a SIGPIPE it raised
// is taken off the thread's pending set before the old mask returns.
// When the caller already blocks SIGPIPE, it is left to the caller.
template <class Send>
ssize_t with_sigpipe_blocked(Send &&send) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  ssize_t n = send();
  const int e = errno;
  if (!sigismember(&old, SIGPIPE)) {
    if (n < 0 && e == EPIPE) {
#if defined(__APPLE__)
      // No sigtimedwait(); Darwin uses SO_NOSIGPIPE and never gets here.
      int sig = 0;
      sigset_t pending;
      if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) sigwait(&pipe_set, &sig);
#else
      timespec zero{0, 0};
      while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
      }
#endif
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  errno = e;
  return n;
}

}  // namespace

ssize_t send_masked(int fd, const void *buf, size_t len) {
  return with_sigpipe_blocked([&] { return ::send(fd, buf, len, MSG_DONTWAIT); });
}

ssize_t sendv_masked(int fd, const iovec *iov, int iovcnt) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec *>(iov);
  msg.msg_iovlen = decltype(msg.msg_iovlen)(iovcnt);
  return with_sigpipe_blocked([&] { return ::sendmsg(fd, &msg, MSG_DONTWAIT); });
}

void tune_keepalive(int fd, int idle_s, int intvl_s, int count) {
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
#if defined(TCP_KEEPIDLE)
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
#elif defined(TCP_KEEPALIVE)
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPALIVE, &idle_s, sizeof idle_s);
#endif
#if defined(TCP_KEEPINTVL)
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl_s, sizeof intvl_s);
#endif
#if defined(TCP_KEEPCNT)
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
#endif
  (void)idle_s;
  (void)intvl_s;
  (void)count;
}

int wait_hangup(const int *fds, int nfds, uint64_t timeout_ns, Hangup &how) {
  how = Hangup::kNone;
  pollfd p[4];
  int map[4];
  int n = 0;
  for (int i = 0; i < nfds && n < 4; i++)
    if (fds[i] >= 0) {
      p[n] = {fds[i], POLLIN, 0};
      map[n++] = i;
    }
  struct timespec t0 {};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const uint64_t start = uint64_t(t0.tv_sec) * 1000000000ull + uint64_t(t0.tv_nsec);
  for (;;) {
    timespec t1{};
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const uint64_t now = uint64_t(t1.tv_sec) * 1000000000ull + uint64_t(t1.tv_nsec);
    const uint64_t left = now - start >= timeout_ns ? 0 : timeout_ns - (now - start);
    if (n == 0) {
      sleep_for(left);
      return -1;
    }
    int r = ::poll(p, nfds_t(n), int((left + 999999) / 1000000));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    for (int k = 0; k < n; k++) {
      if (p[k].revents == 0) continue;
      if (p[k].revents & POLLERR) {
        how = Hangup::kReset;
        return map[k];
      }
      char c;
      ssize_t got = ::recv(p[k].fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (got == 0 || (p[k].revents & POLLHUP)) {
        how = Hangup::kClosed;
        return map[k];
      }
      if (got < 0 && (errno == ECONNRESET || errno == EPIPE)) {
        how = Hangup::kReset;
        return map[k];
      }
      // Unread bytes hide the FIN: leave this fd out from now on.
      p[k] = p[n - 1];
      map[k] = map[n - 1];
      n--;
      k--;
    }
    if (left == 0) return -1;
  }
}

bool wake_open(int fds[2]) {
  int p[2];
  if (::pipe(p) != 0) {
    fds[0] = fds[1] = -1;
    return false;
  }
  set_cloexec_nonblock(p[0]);
  set_cloexec_nonblock(p[1]);
  fds[0] = p[0];
  fds[1] = p[1];
  return true;
}

void wake_signal(const int fds[2]) {
  if (fds[1] < 0) return;
  const char c = 1;
  (void)!::write(fds[1], &c, 1);  // readable for good: nobody reads it
}

void wake_close(int fds[2]) {
  if (fds[0] >= 0) ::close(fds[0]);
  if (fds[1] >= 0 && fds[1] != fds[0]) ::close(fds[1]);
  fds[0] = fds[1] = -1;
}

}  // namespace ds4tp::os::portable

