// Socket helpers shared by bring-up, the control channel and the TCP
// transport: an owning fd, tuning, and deadline-bounded I/O on
// non-blocking sockets. No allocation on the success path.
#pragma once

#include <cstddef>
#include <cstdint>

#include <sys/types.h>
#include <sys/uio.h>

#include "common/error.hpp"

namespace ds4tp::net {

// Owns a file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  Fd(Fd &&o) noexcept : fd_(o.release()) {}
  Fd &operator=(Fd &&o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// TCP_NODELAY, no SIGPIPE (os::no_sigpipe), large buffers, non-blocking.
void tune_data_socket(int fd);
void tune_control_socket(int fd);
void set_nonblocking(int fd);

// How a wait behaves: spin (busy-poll) this long after the last progress
// before blocking in poll(); fail after `idle_ns` without progress.
struct Wait {
  uint64_t spin_ns = 0;
  uint64_t idle_ns = 0;
};

// Writes/reads exactly `len` bytes before `deadline_ns` (CLOCK_MONOTONIC).
// Return DS4TP_OK, ETIMEDOUT, EPEERCLOSED (EOF, reset, broken pipe) or EIO;
// `what` names the operation in the message.
int write_all(int fd, const void *buf, size_t len, uint64_t deadline_ns,
              const char *what, Error &err);
int read_exact(int fd, void *buf, size_t len, uint64_t deadline_ns,
               const char *what, Error &err);

// Sends p[done..len) until done or the socket would block, retrying
// EINTR: 0 with `done` advanced (done < len: wait for POLLOUT and call
// again), or the errno of a failed send. Never blocks.
int send_until_blocked(int fd, const uint8_t *p, size_t len, size_t &done);

// A message sent as a fixed-size header then a body is one byte stream:
// the iovecs (at most 2) of its bytes [from, to). Used by the tcp gate
// and the group's tcp steps to resume a partial send or receive.
inline int stream_iov(const uint8_t *head, size_t head_len, const uint8_t *body, uint64_t from,
                      uint64_t to, iovec *iov) {
  int n = 0;
  if (from < head_len) {
    const uint64_t hend = to < head_len ? to : head_len;
    iov[n++] = {const_cast<uint8_t *>(head) + from, size_t(hend - from)};
    if (to > hend) iov[n++] = {const_cast<uint8_t *>(body), size_t(to - hend)};
  } else {
    iov[n++] = {const_cast<uint8_t *>(body) + (from - head_len), size_t(to - from)};
  }
  return n;
}

// Sends what the socket takes of such a stream's bytes [sent, limit),
// without SIGPIPE and without blocking: the send result (-1 with errno,
// EAGAIN when the socket is full). When the header sits right before the
// body (header room) the stream is one buffer and goes with a plain send;
// a two-piece sendmsg costs more per call.
ssize_t send_stream(int fd, const uint8_t *head, size_t head_len, const uint8_t *body,
                    uint64_t sent, uint64_t limit);

// Reads what `fd` holds of such a stream's bytes [got, total), without
// blocking: the recv/recvmsg result (0 at EOF, -1 with errno, EAGAIN when
// nothing is there). One plain recv when the head sits right before the body.
ssize_t recv_stream(int fd, uint8_t *head, size_t head_len, uint8_t *body, uint64_t got,
                    uint64_t total);

// True when the peer has closed or reset `fd` (non-blocking peek).
bool peer_gone(int fd);

}  // namespace ds4tp::net
