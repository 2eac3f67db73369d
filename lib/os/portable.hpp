// Portable POSIX versions of the OS seam's primitives (os.hpp), for the
// places a platform lacks the Linux one: the whole of a
// -DDS4TP_PLATFORM=posix build (posix.cpp), and Darwin where it has no
// better call (darwin.cpp). Only lib/os/*.cpp include this header.
//
// The contracts are those of the os.hpp function of the same name; the
// comments here say only how the portable version differs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <sys/types.h>
#include <sys/uio.h>

#include "os/os.hpp"

namespace ds4tp::os::portable {

// ---- cross-process wait/wake without a futex --------------------------
//
// A waiter sleeps in poll() on a FIFO that belongs to the shared mapping
// holding its word; wake_word() writes one byte into it. The FIFO is
// named after the mapping's key (shared_mapping_added), so both processes
// find it without passing descriptors. Every process that registers the
// mapping holds both ends open, so a write never meets a FIFO without a
// reader (no EPIPE, no SIGPIPE) and a read end never sees a hang-up.
//
// Words outside any registered mapping share one pipe per process: they
// are woken from this process (or a child forked after the first wait or
// wake), not from an unrelated one, whose wake is lost and whose waiter
// sleeps until its timeout.
//
// Why a FIFO and not spin-then-sleep backoff (measured on this project's
// Linux CI host, 2 loaded cores, ping-pong between two processes that
// both block at once, 2000 rounds):
//   futex (reference)          round trip p50   5 us, p99   16 us, idle CPU 0.01 %
//   FIFO poke (this)           round trip p50  11 us, p99   33 us, idle CPU 0.9 % (2 ms slices)
//   backoff sleep 1 us..1 ms   round trip p50  75 us, p99 3800 us, idle CPU 1.6 %
//   fixed 50 us sleeps         round trip p50 111 us, p99  240 us, idle CPU 3.9 %
// A poke costs one write() only when the peer really sleeps, and wakes it
// within about twice the futex latency; backoff is either slow to wake or
// burns CPU while a rank idles between requests.
//
// Limit: one waiting process per mapping (the shm transport's case: each
// rank sleeps only on the word in its own segment). Two processes
// sleeping on words of the same mapping may take each other's pokes and
// then wake only at their timeouts.
void shared_mapping_added(const void *base, size_t bytes, const std::string &key);
void shared_mapping_removed(const void *base);
void wait_on_word(uint32_t *word, uint32_t expected, uint64_t timeout_ns);
void wake_word(uint32_t *word);
// The FIFO path a mapping key uses (for tests and messages).
std::string poke_path(const std::string &key);

// ---- the rest --------------------------------------------------------------

// getentropy() in 256-byte pieces.
bool random_bytes(void *p, size_t n);

// Host name, gethostid(), and the boot time estimated as CLOCK_REALTIME
// minus CLOCK_MONOTONIC, rounded to a minute (no /proc): two processes of
// one boot agree unless the clock is stepped between their calls or they
// straddle a rounding edge; a false "other host" costs only shared
// memory (the pair then uses TCP), never correctness.
std::string host_seed();

// kill(pid, 0), plus waitid(WNOWAIT) to see a child that is a zombie. No
// start time is readable portably: process_start_time() is 1 for any
// process that exists here, so a reused pid (or, across pid namespaces,
// an unrelated process with the peer's pid) is taken for the peer.
uint64_t process_start_time(pid_t pid);
bool process_alive(pid_t pid, uint64_t start_time);

// shm_open() without O_CLOEXEC in the open flags (Darwin refuses unknown
// flags); close-on-exec is set with fcntl() instead.
int shm_open_cloexec(const char *name, int oflag, mode_t mode);

// socket() then fcntl() for close-on-exec and non-blocking (no
// SOCK_CLOEXEC/SOCK_NONBLOCK type flags).
int open_socket(int family, int type, int protocol);

// send()/sendmsg() with MSG_DONTWAIT but no MSG_NOSIGNAL: SIGPIPE is
// blocked in the calling thread around the call, and one raised by it is
// consumed (sigtimedwait) before the mask is restored. Two extra
// sigprocmask calls per send; only for platforms with neither
// MSG_NOSIGNAL nor SO_NOSIGPIPE (Linux in posix mode stands in for them).
ssize_t send_masked(int fd, const void *buf, size_t len);
ssize_t sendv_masked(int fd, const iovec *iov, int iovcnt);

// SO_KEEPALIVE and whichever of TCP_KEEPIDLE/TCP_KEEPALIVE, TCP_KEEPINTVL
// and TCP_KEEPCNT the headers define; nothing bounds unacknowledged data.
void tune_keepalive(int fd, int idle_s, int intvl_s, int count);

// poll() without POLLRDHUP: a readable fd is peeked (MSG_PEEK); 0 bytes is
// a close, ECONNRESET a reset. An fd with unread bytes queued cannot show
// its FIN this way; it is left out of the rest of the wait.
int wait_hangup(const int *fds, int nfds, uint64_t timeout_ns, Hangup &how);

// A pipe instead of an eventfd.
bool wake_open(int fds[2]);
void wake_signal(const int fds[2]);
void wake_close(int fds[2]);

// sysconf(_SC_NPROCESSORS_ONLN): any online CPU.
bool cpu_allowed(int cpu, int &allowed);

// Whichever pthread_setname_np the platform has (Darwin: the calling
// thread only; Linux: any thread, 15 characters kept); a no-op elsewhere.
void name_this_thread(const char *name);

// FNV-1a, 64 bits: names derived from longer names.
uint64_t hash64(const std::string &s);

}  // namespace ds4tp::os::portable
