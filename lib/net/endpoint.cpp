#include "net/endpoint.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/clock.hpp"
#include "os/os.hpp"

namespace ds4tp::net {

int listen_tcp(const std::string &host, int port, Fd &out, int &bound, Error &err) {
  Fd fd(os::open_socket(AF_INET, SOCK_STREAM, 0));
  if (!fd.valid()) return err.set(DS4TP_EIO, "socket: {}", std::strerror(errno));
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  if (host.empty() || host == "0.0.0.0") {
    a.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr)
      return err.set(DS4TP_EINVAL, "cannot resolve rendezvous host '{}'", host);
    a.sin_addr = reinterpret_cast<sockaddr_in *>(res->ai_addr)->sin_addr;
    freeaddrinfo(res);
  }
  if (bind(fd.get(), reinterpret_cast<sockaddr *>(&a), sizeof a) != 0)
    return err.set(DS4TP_EIO, "bind {}:{}: {}", host, port, std::strerror(errno));
  // A deep backlog: strangers queued behind the real ranks are drained
  // at once by the intake, not one at a time.
  if (::listen(fd.get(), 256) != 0) return err.set(DS4TP_EIO, "listen: {}", std::strerror(errno));
  socklen_t len = sizeof a;
  getsockname(fd.get(), reinterpret_cast<sockaddr *>(&a), &len);
  bound = ntohs(a.sin_port);
  set_nonblocking(fd.get());
  out = std::move(fd);
  return DS4TP_OK;
}

int dial_tcp(const std::string &host, int port, uint64_t deadline, Fd &out, Error &err) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  std::string ps = std::to_string(port);
  if (getaddrinfo(host.c_str(), ps.c_str(), &hints, &res) != 0 || res == nullptr)
    return err.set(DS4TP_EINVAL, "cannot resolve '{}'", host);
  int last = 0;
  for (;;) {
    Fd fd(os::open_socket(AF_INET, SOCK_STREAM, 0));  // non-blocking
    bool ok = fd.valid() && ::connect(fd.get(), res->ai_addr, res->ai_addrlen) == 0;
    if (!ok && fd.valid() && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      uint64_t now = now_ns();
      int ms = now < deadline ? int(std::min<uint64_t>((deadline - now) / 1'000'000 + 1, 1000)) : 0;
      if (poll(&p, 1, ms) == 1) {
        int e = 0;
        socklen_t el = sizeof e;
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &e, &el);
        ok = e == 0;
        errno = e;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (ok) {
      freeaddrinfo(res);
      tune_data_socket(fd.get());
      out = std::move(fd);
      return DS4TP_OK;
    }
    last = errno;
    if (now_ns() >= deadline) break;
    os::sleep_ns(20'000'000);
  }
  freeaddrinfo(res);
  return err.set(DS4TP_ETIMEDOUT, "could not connect to {}:{} before the deadline: {}", host,
                 port, std::strerror(last));
}

int accept_tcp(int lfd, Fd &out, std::string &host, int &port, Error &err) {
  for (;;) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    const int fd = ::accept(lfd, reinterpret_cast<sockaddr *>(&a), &len);
    if (fd >= 0) {
      out = Fd(fd);
      tune_data_socket(fd);
      char buf[INET_ADDRSTRLEN] = {0};
      inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
      host = buf;
      port = ntohs(a.sin_port);
      return DS4TP_OK;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;  // a reset before we took it
    if (errno == EAGAIN || errno == EWOULDBLOCK) return DS4TP_OK;
    const int e = errno;
    err.set(DS4TP_EIO, "accept: {}", std::strerror(e));
    errno = e;  // the caller tells a full fd table (EMFILE) from the rest
    return err.code;
  }
}

}  // namespace ds4tp::net
