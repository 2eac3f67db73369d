// The OS seam on Darwin (macOS): os_sync_wait_on_address where the OS has
// it, sysctl for host and process identity, SO_NOSIGPIPE, kqueue for
// hang-ups, 31-character shm_open names, Apple's librdma. What Darwin
// lacks comes from portable.cpp.
//
// Verified here: compiles warning-free for aarch64-macos and x86_64-macos
// (scripts/cross-macos.sh); its portable half runs in the posix-mode test
// suite on Linux. Not run on Mac hardware.
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/event.h>
#include <sys/socket.h>
#include <sys/sysctl.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "os/os.hpp"
#include "os/portable.hpp"

namespace ds4tp::os {

const char *platform_name() { return "darwin"; }

// ---- wait/wake ----------------------------------------------------------------
//
// macOS 14.4 added os_sync_wait_on_address_with_timeout and
// os_sync_wake_by_address_all, which with the SHARED flags key waiters by
// the physical page, like a futex without FUTEX_PRIVATE. They are looked
// up with dlsym rather than declared weak: the library then loads on
// older systems and builds with SDKs (and cross toolchains) whose headers
// predate <os/os_sync_wait_on_address.h>. Without them the portable FIFO
// pokes are used (portable.hpp has the measurements behind that choice).

namespace {

// From <os/os_sync_wait_on_address.h> and <os/clock.h> (macOS 14.4 SDK).
constexpr uint32_t kOsSyncWaitShared = 0x1;  // OS_SYNC_WAIT_ON_ADDRESS_SHARED
constexpr uint32_t kOsSyncWakeShared = 0x1;  // OS_SYNC_WAKE_BY_ADDRESS_SHARED
constexpr uint32_t kOsClockMachAbsolute = 32;  // OS_CLOCK_MACH_ABSOLUTE_TIME
using WaitFn = int (*)(void *addr, uint64_t value, size_t size, uint32_t flags,
                       uint32_t clockid, uint64_t timeout_ns);
using WakeFn = int (*)(void *addr, size_t size, uint32_t flags);

struct OsSync {
  WaitFn wait = nullptr;
  WakeFn wake = nullptr;
};

const OsSync &os_sync() {
  static const OsSync s = [] {
    OsSync o;
    void *w = dlsym(RTLD_DEFAULT, "os_sync_wait_on_address_with_timeout");
    void *k = dlsym(RTLD_DEFAULT, "os_sync_wake_by_address_all");
    if (w != nullptr && k != nullptr) {
      o.wait = reinterpret_cast<WaitFn>(w);
      o.wake = reinterpret_cast<WakeFn>(k);
    }
    return o;
  }();
  return s;
}

}  // namespace

void shared_mapping_added(const void *base, size_t bytes, const std::string &key) {
  if (os_sync().wait == nullptr) portable::shared_mapping_added(base, bytes, key);
}
void shared_mapping_removed(const void *base) {
  if (os_sync().wait == nullptr) portable::shared_mapping_removed(base);
}

void wait_on_word(uint32_t *word, uint32_t expected, uint64_t timeout_ns) {
  const OsSync &s = os_sync();
  if (s.wait == nullptr) return portable::wait_on_word(word, expected, timeout_ns);
  if (timeout_ns == 0) return;
  // -1 with ETIMEDOUT, EINTR or EFAULT: the caller re-checks either way.
  s.wait(word, expected, sizeof *word, kOsSyncWaitShared, kOsClockMachAbsolute, timeout_ns);
}

void wake_word(uint32_t *word) {
  const OsSync &s = os_sync();
  if (s.wake == nullptr) return portable::wake_word(word);
  s.wake(word, sizeof *word, kOsSyncWakeShared);  // ENOENT: nobody slept
}

// ---- randomness, host, processes ---------------------------------------------

bool random_bytes(void *p, size_t n) {
  arc4random_buf(p, n);  // never fails
  return true;
}

namespace {

std::string sysctl_string(const char *name) {
  char buf[256] = {};
  size_t len = sizeof buf - 1;
  if (sysctlbyname(name, buf, &len, nullptr, 0) != 0) return {};
  return std::string(buf, strnlen(buf, len));
}

}  // namespace

// kern.bootsessionuuid is new at every boot; kern.boottime pins the boot
// too where the former is missing (old systems). macOS has no containers
// with their own shm namespace, so nothing like Linux's /dev/shm device.
std::string host_seed() {
  std::string seed = "darwin/" + sysctl_string("kern.bootsessionuuid");
  timeval bt{};
  size_t len = sizeof bt;
  int mib[2] = {CTL_KERN, KERN_BOOTTIME};
  if (sysctl(mib, 2, &bt, &len, nullptr, 0) == 0)
    seed += "/" + std::to_string(long(bt.tv_sec)) + "." + std::to_string(long(bt.tv_usec));
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  seed += '/';
  seed += host;
  return seed;
}

namespace {

// The kernel's record of `pid`; false with gone set when there is none.
bool proc_info(pid_t pid, kinfo_proc &kp, bool &gone) {
  gone = false;
  int mib[4] = {CTL_KERN, KERN_PROC, KERN_PROC_PID, int(pid)};
  size_t len = sizeof kp;
  std::memset(&kp, 0, sizeof kp);
  if (sysctl(mib, 4, &kp, &len, nullptr, 0) != 0) return false;
  if (len == 0) {  // no such process
    gone = true;
    return false;
  }
  return true;
}

uint64_t start_of(const kinfo_proc &kp) {
  const timeval &t = kp.kp_proc.p_starttime;
  return uint64_t(t.tv_sec) * 1000000u + uint64_t(t.tv_usec);
}

}  // namespace

// Microseconds since the epoch at which the process started.
uint64_t process_start_time(pid_t pid) {
  kinfo_proc kp;
  bool gone;
  return proc_info(pid, kp, gone) ? start_of(kp) : 0;
}

bool process_alive(pid_t pid, uint64_t start_time) {
  kinfo_proc kp;
  bool gone;
  if (!proc_info(pid, kp, gone)) return !gone;
  if (kp.kp_proc.p_stat == SZOMB) return false;
  return start_of(kp) == start_time;
}

bool sees_stopped_processes() { return true; }

bool process_stopped(pid_t pid) {
  kinfo_proc kp;
  bool gone;
  return proc_info(pid, kp, gone) && kp.kp_proc.p_stat == SSTOP;
}

// ---- shared memory ---------------------------------------------------------------

// Segments live in the kernel, not in a directory; names are at most
// PSHMNAMLEN (31) characters; an object can be sized only once (ftruncate)
// and cannot be reserved ahead; fstat reports its size rounded up to
// whole pages.
const char *shm_dir() { return nullptr; }
size_t shm_name_max() { return kShmNameMaxDarwin; }
int shm_open_cloexec(const char *name, int oflag, mode_t mode) {
  return portable::shm_open_cloexec(name, oflag, mode);
}
uint64_t shm_object_bytes(uint64_t bytes) {
  const uint64_t page = uint64_t(getpagesize());
  return (bytes + page - 1) / page * page;
}
int reserve_file(int, uint64_t) { return 0; }

// ---- sockets -------------------------------------------------------------------

int open_socket(int family, int type, int protocol) {
  int fd = portable::open_socket(family, type, protocol);
  if (fd >= 0) no_sigpipe(fd);
  return fd;
}

void no_sigpipe(int fd) {
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
}

// SO_NOSIGPIPE (no_sigpipe) is on every socket libds4tp writes.
ssize_t send_nosignal(int fd, const void *buf, size_t len) {
  return ::send(fd, buf, len, MSG_DONTWAIT);
}

ssize_t sendv_nosignal(int fd, const iovec *iov, int iovcnt) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec *>(iov);
  msg.msg_iovlen = iovcnt;
  return ::sendmsg(fd, &msg, MSG_DONTWAIT);
}

// No TCP_USER_TIMEOUT: TCP_RXT_CONNDROPTIME drops a connection whose
// retransmissions go unanswered this many seconds.
void tune_keepalive(int fd, int idle_s, int intvl_s, int count, int dead_peer_ms) {
  portable::tune_keepalive(fd, idle_s, intvl_s, count);
#if defined(TCP_RXT_CONNDROPTIME)
  int secs = (dead_peer_ms + 999) / 1000;
  setsockopt(fd, IPPROTO_TCP, TCP_RXT_CONNDROPTIME, &secs, sizeof secs);
#else
  (void)dead_peer_ms;
#endif
}

// kqueue reports a FIN (EV_EOF) even with unread bytes queued; a low-water
// mark no read can reach keeps plain data from triggering the filter.
int wait_hangup(const int *fds, int nfds, uint64_t timeout_ns, Hangup &how) {
  how = Hangup::kNone;
  int kq = kqueue();
  if (kq < 0) return portable::wait_hangup(fds, nfds, timeout_ns, how);
  struct kevent ch[4];
  int n = 0;
  for (int i = 0; i < nfds && n < 4; i++)
    if (fds[i] >= 0)
      EV_SET(&ch[n++], uintptr_t(fds[i]), EVFILT_READ, EV_ADD, NOTE_LOWAT, INT_MAX,
             reinterpret_cast<void *>(intptr_t(i)));
  struct kevent ev[4];
  timespec ts{time_t(timeout_ns / 1000000000ull), long(timeout_ns % 1000000000ull)};
  int r = kevent(kq, ch, n, ev, 4, &ts);
  ::close(kq);
  for (int k = 0; k < r; k++) {
    if (ev[k].flags & EV_ERROR) continue;  // not a socket, say
    if (ev[k].flags & EV_EOF) {
      how = ev[k].fflags == ECONNRESET ? Hangup::kReset : Hangup::kClosed;
      return int(reinterpret_cast<intptr_t>(ev[k].udata));
    }
  }
  return -1;
}

// The kqueue look above sees a FIN behind unread bytes, but the watcher
// keeps libuv's watch here, the path the posix build runs in CI, until a
// Mac has measured both.
bool hangup_look_suffices() { return false; }

// ---- RDMA verbs ------------------------------------------------------------------
// (wake_*, cpu_allowed, pin_thread, current_cpu and rdma_gid_type:
// portable_entries.cpp.)

// Apple's RDMA over Thunderbolt (macOS 26.2+). /usr/lib libraries live in
// the dyld shared cache: dlopen finds them although no file is on disk.
const char *const *verbs_library_names() {
  static const char *const names[] = {"/usr/lib/librdma.dylib", "librdma.dylib", nullptr};
  return names;
}

}  // namespace ds4tp::os
