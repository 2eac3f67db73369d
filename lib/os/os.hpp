// The OS seam: every operating-system-specific call libds4tp makes, and
// nothing else. One implementation file per platform (linux.cpp,
// darwin.cpp, posix.cpp for -DDS4TP_PLATFORM=posix; the fallbacks the
// last two share are in portable.cpp), chosen in lib/CMakeLists.txt. No
// platform header or type leaks from here.
//
// Everything here is safe to call from any thread. Functions marked "gate
// path" are called inside gates and never allocate, log or lock; the
// others run at set-up or on failure paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <sys/types.h>
#include <sys/uio.h>

namespace ds4tp::os {

// "linux", "darwin", "linux-posix" (or "posix" on another OS): which
// implementation this build uses.
const char *platform_name();

// ---- spinning ----------------------------------------------------------

// Pauses the CPU briefly inside a spin loop (gate path). Depends on the
// CPU, not the OS, so it lives here inline.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  asm volatile("yield");
#endif
}

// Gives the CPU to another runnable thread (gate path).
void yield_thread();

// Sleeps `ns` (gate path, slow phase).
void sleep_ns(uint64_t ns);

// ---- CPUs ------------------------------------------------------------------

// True when this process may run on CPU `cpu`; `allowed` is how many CPUs
// it may run on (0 when the OS does not say).
bool cpu_allowed(int cpu, int &allowed);
// Binds the calling thread to CPU `cpu` (best effort).
void pin_thread(int cpu);
// The CPU the calling thread runs on now, or -1 when the OS does not say
// (gate path: Linux reads it from the thread's rseq area, a few ns).
int current_cpu();

// ---- threads -----------------------------------------------------------

// Names the calling thread for debuggers, top and crash reports (best
// effort). Darwin can name only the calling thread, so every platform
// does just that. Linux keeps 15 characters: longer names are cut.
void name_this_thread(const char *name);
// Longest name Linux keeps (TASK_COMM_LEN less the NUL); short names such
// as "ds4tp-svc" fit everywhere.
constexpr size_t kThreadNameMaxLinux = 15;

// ---- cross-process wait/wake on a shared word -------------------------

// Sleeps while the u32 at `word` (in a MAP_SHARED mapping another process
// also maps) holds `expected`, at most `timeout_ns`; may return early or
// spuriously (gate path). The caller re-checks its condition.
void wait_on_word(uint32_t *word, uint32_t expected, uint64_t timeout_ns);
// Wakes every process sleeping in wait_on_word() on `word` (gate path).
void wake_word(uint32_t *word);

// ---- randomness ----------------------------------------------------------

// Fills `p` with `n` bytes from the kernel's generator; false when it
// cannot (the caller then falls back to something weaker but unique).
bool random_bytes(void *p, size_t n);

// ---- host and processes -------------------------------------------------

// Text that is equal for two processes exactly when they run on the same
// booted host and see the same shared-memory namespace (Linux: boot id,
// host name, and the device and inode of the shm directory). Hashed into
// the hello's host id; never sent as is.
std::string host_seed();

// Start time of process `pid`, in the OS's units, 0 when it cannot be
// read. With the pid it names one process for good: a reused pid has
// another start time.
uint64_t process_start_time(pid_t pid);
// False once process `pid` that started at `start_time` has exited (gone,
// a zombie, or the pid now names another process). Unreadable for another
// reason: true (the caller's deadline still bounds its wait).
bool process_alive(pid_t pid, uint64_t start_time);
// True while process `pid` is stopped (SIGSTOP, a debugger's stop). False
// when it runs, is gone, or the platform cannot tell (portable POSIX).
bool process_stopped(pid_t pid);
// Whether process_stopped can tell at all: a wait that lets a live rank be
// late needs to tell a stopped one from a busy one.
bool sees_stopped_processes();

// ---- shared memory --------------------------------------------------------

// The directory shm_open() names live in, for free-space checks and
// messages; nullptr when the OS keeps no such directory.
const char *shm_dir();
// Longest name shm_open() accepts, the leading '/' included.
size_t shm_name_max();
// Darwin's PSHMNAMLEN; posix mode uses it too.
constexpr size_t kShmNameMaxDarwin = 31;
// shm_open() with close-on-exec (Darwin takes no O_CLOEXEC there).
int shm_open_cloexec(const char *name, int oflag, mode_t mode);
// The size fstat() reports for a segment sized to `bytes` (Darwin rounds
// it up to whole pages).
uint64_t shm_object_bytes(uint64_t bytes);
// Tells wait_on_word()/wake_word() that [base, base + bytes) maps the
// shared-memory object `key` (a name both processes know), where the OS
// cannot wait on an address itself (posix mode, macOS before 14.4;
// no-ops elsewhere). Set-up time; removed before the mapping goes away.
void shared_mapping_added(const void *base, size_t bytes, const std::string &key);
void shared_mapping_removed(const void *base);
// Reserves the first `bytes` of the file `fd` so that running out of room
// fails here rather than with SIGBUS on first touch. 0 on success or
// when the OS cannot reserve ahead, else an errno value.
int reserve_file(int fd, uint64_t bytes);

// ---- sockets ------------------------------------------------------------

// Creates a socket that is close-on-exec and non-blocking; -1 with errno.
int open_socket(int family, int type, int protocol);
// Applies whatever the OS needs so writes to a closed socket return EPIPE
// instead of raising SIGPIPE, where that is a socket option (a no-op
// where send flags do it). Called once on every socket libds4tp writes.
void no_sigpipe(int fd);
// send()/sendmsg() that never block and never raise SIGPIPE (gate path).
// Return and errno as the POSIX calls.
ssize_t send_nosignal(int fd, const void *buf, size_t len);
ssize_t sendv_nosignal(int fd, const iovec *iov, int iovcnt);
// Keepalive probing after `idle_s` seconds of silence, every `intvl_s`,
// `count` probes; and a bound of `dead_peer_ms` on unacknowledged data,
// where the OS has one. Best effort: options the OS lacks are skipped.
void tune_keepalive(int fd, int idle_s, int intvl_s, int count, int dead_peer_ms);

enum class Hangup { kNone, kClosed, kReset };
// Waits at most `timeout_ns` (0: only looks) for one of `fds` to report
// that the peer closed (or reset) it; never consumes data. Returns the
// index of the first such fd with `how`, or -1 (how = kNone) when none
// did. Negative fds are skipped.
int wait_hangup(const int *fds, int nfds, uint64_t timeout_ns, Hangup &how);
// True where the liveness watcher learns of a hang-up by looking
// (wait_hangup every few ms) rather than by watching the socket in an
// event set, which wakes the set for every frame that arrives. A look
// must see a FIN behind unread bytes for that: Linux's POLLRDHUP does,
// portable POSIX poll() does not.
bool hangup_look_suffices();

// A wake-up handle for poll(): fds[0] becomes readable, for good, once
// wake_signal() ran. false with errno when it cannot be made (fds -1).
bool wake_open(int fds[2]);
void wake_signal(const int fds[2]);
void wake_close(int fds[2]);

// ---- RDMA verbs --------------------------------------------------------

// Library names tried, in order, when neither the caller nor
// $DS4TP_VERBS_LIB names one; nullptr-terminated.
const char *const *verbs_library_names();
// The RoCE type of GID `index` on `device` port `port` as the OS reports
// it outside verbs ("RoCE v2", "IB/RoCE v1"); false when it does not.
bool rdma_gid_type(const char *device, int port, int index, std::string &type);

}  // namespace ds4tp::os
