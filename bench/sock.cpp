#include "sock.hpp"

#include <cerrno>
#include <cstring>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace bench {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

namespace {

std::string errstr(const char *what) { return std::string(what) + ": " + std::strerror(errno); }

Status resolve(const std::string &host, int port, bool passive, addrinfo **res) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  std::string p = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), p.c_str(), &hints, res);
  if (rc != 0)
    return Status::fail("cannot resolve " + host + ":" + p + ": " + gai_strerror(rc));
  return {};
}

int local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &len) != 0) return -1;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in *>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_port);
  return -1;
}

}  // namespace

Status tcp_listen(const std::string &host, int port, Fd &out, int &bound) {
  addrinfo *res = nullptr;
  Status s = resolve(host, port, true, &res);
  if (!s.ok) return s;
  std::string last = "no address for " + host;
  for (addrinfo *a = res; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last = errstr("socket");
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), 8) != 0) {
      last = errstr(("bind/listen " + host + ":" + std::to_string(port)).c_str());
      continue;
    }
    bound = local_port(fd.get());
    out = std::move(fd);
    freeaddrinfo(res);
    return {};
  }
  freeaddrinfo(res);
  return Status::fail(last);
}

Status tcp_accept(const Fd &listener, int timeout_ms, Fd &out) {
  uint64_t deadline = now_ns() + uint64_t(timeout_ms) * 1000000ull;
  for (;;) {
    uint64_t t = now_ns();
    if (t >= deadline)
      return Status::fail("no peer connected within " + std::to_string(timeout_ms) + " ms");
    pollfd p{listener.get(), POLLIN, 0};
    int r = ::poll(&p, 1, int((deadline - t) / 1000000ull) + 1);
    if (r < 0 && errno != EINTR) return Status::fail(errstr("poll"));
    if (r <= 0) continue;
    int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      return Status::fail(errstr("accept"));
    }
    out = Fd(fd);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return {};
  }
}

Status tcp_dial(const std::string &host, int port, int timeout_ms, Fd &out) {
  uint64_t deadline = now_ns() + uint64_t(timeout_ms) * 1000000ull;
  std::string last;
  while (now_ns() < deadline) {
    addrinfo *res = nullptr;
    Status s = resolve(host, port, false, &res);
    if (!s.ok) return s;
    for (addrinfo *a = res; a; a = a->ai_next) {
      Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!fd.valid()) continue;
      if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) {
        freeaddrinfo(res);
        int one = 1;
        setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        out = std::move(fd);
        return {};
      }
      last = errstr("connect");
    }
    freeaddrinfo(res);
    usleep(20000);
  }
  return Status::fail("cannot reach " + host + ":" + std::to_string(port) + " within " +
                      std::to_string(timeout_ms) + " ms (" + last + ")");
}

Status Lines::send(const Msg &m) {
  std::string line = m.encode() + "\n";
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::send(fd_.get(), line.data() + done, line.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::fail(errstr("coordination channel send"));
    done += size_t(n);
  }
  return {};
}

Status Lines::recv(Msg &m, int timeout_ms, const char *expect) {
  uint64_t deadline = now_ns() + uint64_t(timeout_ms) * 1000000ull;
  for (;;) {
    size_t nl = buf_.find('\n');
    if (nl != std::string::npos) {
      m = Msg::decode(buf_.substr(0, nl));
      buf_.erase(0, nl + 1);
      if (expect && m.verb != expect) {
        if (m.verb == "ERROR")
          return Status::fail("peer failed: " + m.get("why"));
        return Status::fail(std::string("coordination: expected ") + expect + ", got '" +
                            m.encode() + "'");
      }
      return {};
    }
    uint64_t t = now_ns();
    if (t >= deadline)
      return Status::fail(std::string("coordination: no ") + (expect ? expect : "message") +
                          " from the peer within " + std::to_string(timeout_ms) + " ms");
    pollfd p{fd_.get(), POLLIN, 0};
    int r = ::poll(&p, 1, int((deadline - t) / 1000000ull) + 1);
    if (r < 0 && errno != EINTR) return Status::fail(errstr("poll"));
    if (r <= 0) continue;
    char tmp[4096];
    ssize_t n = ::recv(fd_.get(), tmp, sizeof tmp, 0);
    if (n == 0)
      return Status::fail(std::string("coordination: the peer closed the channel while we "
                                      "waited for ") + (expect ? expect : "a message"));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::fail(errstr("coordination channel recv"));
    }
    buf_.append(tmp, size_t(n));
  }
}

}  // namespace bench
