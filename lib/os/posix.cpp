// The OS seam in portable-POSIX mode (-DDS4TP_PLATFORM=posix): the
// fallbacks Darwin uses where it has no Linux primitive, on any POSIX
// host, so that a Linux CI machine runs the code paths a Mac takes: no
// futex (FIFO pokes, portable.hpp), no MSG_NOSIGNAL (SIGPIPE masked per
// send), shm_open names of at most 31 characters and no shm directory, no
// /proc (host identity from the host name and boot time; no process
// start times).
#include <climits>

#include "os/os.hpp"
#include "os/portable.hpp"

namespace ds4tp::os {

// "linux-posix" on Linux, "posix" elsewhere.
const char *platform_name() {
#if defined(__linux__)
  return "linux-posix";
#else
  return "posix";
#endif
}

void shared_mapping_added(const void *base, size_t bytes, const std::string &key) {
  portable::shared_mapping_added(base, bytes, key);
}
void shared_mapping_removed(const void *base) { portable::shared_mapping_removed(base); }
void wait_on_word(uint32_t *word, uint32_t expected, uint64_t timeout_ns) {
  portable::wait_on_word(word, expected, timeout_ns);
}
void wake_word(uint32_t *word) { portable::wake_word(word); }

bool random_bytes(void *p, size_t n) { return portable::random_bytes(p, n); }

std::string host_seed() { return portable::host_seed(); }

uint64_t process_start_time(pid_t pid) { return portable::process_start_time(pid); }
bool process_alive(pid_t pid, uint64_t start_time) {
  return portable::process_alive(pid, start_time);
}

// No portable way to see another process's run state: a stopped rank is
// left to the caller's deadline.
bool process_stopped(pid_t) { return false; }
bool sees_stopped_processes() { return false; }

// Darwin's limits, whatever this host allows.
const char *shm_dir() { return nullptr; }
size_t shm_name_max() { return kShmNameMaxDarwin; }
int shm_open_cloexec(const char *name, int oflag, mode_t mode) {
  return portable::shm_open_cloexec(name, oflag, mode);
}
uint64_t shm_object_bytes(uint64_t bytes) { return bytes; }
int reserve_file(int, uint64_t) { return 0; }  // Darwin cannot reserve a shm object ahead

int open_socket(int family, int type, int protocol) {
  return portable::open_socket(family, type, protocol);
}
void no_sigpipe(int) {}  // every send masks SIGPIPE instead
ssize_t send_nosignal(int fd, const void *buf, size_t len) {
  return portable::send_masked(fd, buf, len);
}
ssize_t sendv_nosignal(int fd, const iovec *iov, int iovcnt) {
  return portable::sendv_masked(fd, iov, iovcnt);
}
void tune_keepalive(int fd, int idle_s, int intvl_s, int count, int) {
  portable::tune_keepalive(fd, idle_s, intvl_s, count);
}
int wait_hangup(const int *fds, int nfds, uint64_t timeout_ns, Hangup &how) {
  return portable::wait_hangup(fds, nfds, timeout_ns, how);
}

// Unread bytes hide a FIN from poll(): the watcher keeps libuv's watch.
bool hangup_look_suffices() { return false; }

// (wake_*, cpu_allowed, pin_thread, current_cpu and rdma_gid_type:
// portable_entries.cpp.)

const char *const *verbs_library_names() {
  static const char *const names[] = {"libibverbs.so.1", nullptr};
  return names;
}

}  // namespace ds4tp::os
