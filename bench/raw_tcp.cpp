#include "raw_tcp.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "net/socket.hpp"

namespace bench {

RawTcp::RawTcp(Fd fd) : fd_(std::move(fd)) {
  // The very same tuning the library applies to its data connection.
  ds4tp::net::tune_data_socket(fd_.get());
  // ... but blocking, so the Block policy can sleep inside recv(); sends
  // and busy receives pass MSG_DONTWAIT instead.
  int fl = fcntl(fd_.get(), F_GETFL, 0);
  if (fl >= 0) fcntl(fd_.get(), F_SETFL, fl & ~O_NONBLOCK);
  // A blocking receive must still end if the peer stalls.
  timeval tv{1, 0};
  setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

Status RawTcp::exchange(const void *outp, void *inp, size_t n, Wait wait, int idle_ms) {
  return exchange(outp, inp, n, n, wait, idle_ms);
}

Status RawTcp::exchange(const void *outp, void *inp, size_t n_out, size_t n_in, Wait wait,
                        int idle_ms) {
  const auto *out = static_cast<const uint8_t *>(outp);
  auto *in = static_cast<uint8_t *>(inp);
  const int fd = fd_.get();
  const bool busy = wait == Wait::Busy;
  const uint64_t idle_ns = uint64_t(idle_ms) * 1000000ull;
  size_t sent = 0, got = 0;
  uint64_t last = 0;  // set on the first stall only: no clock read when all goes well
  while (sent < n_out || got < n_in) {
    bool progress = false;
    if (sent < n_out) {
      ssize_t r = ::send(fd, out + sent, n_out - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (r > 0) {
        sent += size_t(r);
        progress = true;
      } else if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return Status::fail(std::string("raw tcp send: ") + std::strerror(errno));
      }
    }
    if (got < n_in) {
      int flags = (!busy && sent == n_out) ? MSG_WAITALL : MSG_DONTWAIT;
      ssize_t r = ::recv(fd, in + got, n_in - got, flags);
      if (r > 0) {
        got += size_t(r);
        progress = true;
      } else if (r == 0) {
        return Status::fail("raw tcp: the peer closed the connection");
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return Status::fail(std::string("raw tcp recv: ") + std::strerror(errno));
      }
    }
    if (progress) {
      last = 0;
      continue;
    }
    uint64_t t = now_ns();
    if (last == 0) last = t;
    if (t - last > idle_ns)
      return Status::fail("raw tcp: no progress for " + std::to_string(idle_ms) +
                          " ms (sent " + std::to_string(sent) + " of " + std::to_string(n_out) +
                          ", received " + std::to_string(got) + " of " + std::to_string(n_in) +
                          " bytes)");
    if (!busy && sent < n_out) {
      pollfd p{fd, short(POLLOUT | (got < n_in ? POLLIN : 0)), 0};
      ::poll(&p, 1, 100);
    }
  }
  return {};
}

Status RawTcp::send_all(const void *outp, size_t n, int idle_ms) {
  return exchange(outp, nullptr, n, 0, Wait::Block, idle_ms);
}

Status RawTcp::recv_all(void *inp, size_t n, Wait wait, int idle_ms) {
  return exchange(nullptr, inp, 0, n, wait, idle_ms);
}

Status RawTcp::alternate(const void *outp, void *inp, size_t n, size_t round, bool first,
                         int idle_ms) {
  const auto *out = static_cast<const uint8_t *>(outp);
  auto *in = static_cast<uint8_t *>(inp);
  for (size_t off = 0; off < n; off += round) {
    size_t len = n - off < round ? n - off : round;
    Status st = first ? send_all(out + off, len, idle_ms)
                      : recv_all(in + off, len, Wait::Block, idle_ms);
    if (st.ok) st = first ? recv_all(in + off, len, Wait::Block, idle_ms)
                          : send_all(out + off, len, idle_ms);
    if (!st.ok) return st;
  }
  return {};
}

}  // namespace bench
