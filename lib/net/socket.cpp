#include "net/socket.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.hpp"
#include "os/os.hpp"

namespace ds4tp::net {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

void set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  if (fl >= 0 && !(fl & O_NONBLOCK)) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void tune_control_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  os::no_sigpipe(fd);
  set_nonblocking(fd);
}

void tune_data_socket(int fd) {
  int one = 1;
  int buf = 4 << 20;  // a whole gate (and a big-gate round) fits in flight
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  os::no_sigpipe(fd);
  set_nonblocking(fd);
}

namespace {

int io_error(int e, const char *what, Error &err) {
  if (e == EPIPE || e == ECONNRESET || e == ENOTCONN)
    return err.set(DS4TP_EPEERCLOSED, "{}: the peer closed the connection ({})",
                   what, std::strerror(e));
  return err.set(DS4TP_EIO, "{}: {}", what, std::strerror(e));
}

int wait_fd(int fd, short events, uint64_t deadline_ns, size_t done, size_t len,
            const char *what, Error &err) {
  int left = ms_left(deadline_ns);
  if (left <= 0)
    return err.set(DS4TP_ETIMEDOUT, "{}: timed out after {} of {} bytes", what,
                   done, len);
  pollfd p{fd, events, 0};
  int r = ::poll(&p, 1, left);
  if (r < 0 && errno != EINTR) return io_error(errno, what, err);
  return DS4TP_OK;
}

}  // namespace

ssize_t send_stream(int fd, const uint8_t *head, size_t head_len, const uint8_t *body,
                    uint64_t sent, uint64_t limit) {
  if (head + head_len == body) return os::send_nosignal(fd, head + sent, size_t(limit - sent));
  iovec iov[2];
  const int n = stream_iov(head, head_len, body, sent, limit, iov);
  return os::sendv_nosignal(fd, iov, n);
}

ssize_t recv_stream(int fd, uint8_t *head, size_t head_len, uint8_t *body, uint64_t got,
                    uint64_t total) {
  if (head + head_len == body) return ::recv(fd, head + got, size_t(total - got), MSG_DONTWAIT);
  iovec iov[2];
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = size_t(stream_iov(head, head_len, body, got, total, iov));
  return ::recvmsg(fd, &msg, MSG_DONTWAIT);
}

int send_until_blocked(int fd, const uint8_t *p, size_t len, size_t &done) {
  while (done < len) {
    ssize_t n = os::send_nosignal(fd, p + done, len - done);
    if (n > 0) {
      done += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    break;
  }
  return 0;
}

int write_all(int fd, const void *buf, size_t len, uint64_t deadline_ns,
              const char *what, Error &err) {
  const uint8_t *p = static_cast<const uint8_t *>(buf);
  size_t done = 0;
  while (true) {
    if (int e = send_until_blocked(fd, p, len, done)) return io_error(e, what, err);
    if (done == len) return DS4TP_OK;
    int rc = wait_fd(fd, POLLOUT, deadline_ns, done, len, what, err);
    if (rc) return rc;
  }
}

int read_exact(int fd, void *buf, size_t len, uint64_t deadline_ns,
               const char *what, Error &err) {
  uint8_t *p = static_cast<uint8_t *>(buf);
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::recv(fd, p + done, len - done, MSG_DONTWAIT);
    if (n > 0) {
      done += size_t(n);
      continue;
    }
    if (n == 0)
      return err.set(DS4TP_EPEERCLOSED,
                     "{}: the peer closed the connection after {} of {} bytes",
                     what, done, len);
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return io_error(errno, what, err);
    int rc = wait_fd(fd, POLLIN, deadline_ns, done, len, what, err);
    if (rc) return rc;
  }
  return DS4TP_OK;
}

bool peer_gone(int fd) {
  char c;
  ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
    return true;
  return false;
}

}  // namespace ds4tp::net
