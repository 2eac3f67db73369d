// Plain TCP plumbing for the bench's own connections (the coordination
// channel and the raw baseline): listen, accept and dial with deadlines,
// and a line channel. Nothing here is on a measured path except what
// raw_tcp.cpp does with the connected socket.
#pragma once

#include <string>

#include "util.hpp"

namespace bench {

// Owns a file descriptor.
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

// Binds and listens on host:port (port 0 = any free one); `bound` gets
// the port actually bound.
Status tcp_listen(const std::string &host, int port, Fd &out, int &bound);
// Accepts one connection within `timeout_ms`.
Status tcp_accept(const Fd &listener, int timeout_ms, Fd &out);
// Dials host:port, retrying refused connections until `timeout_ms`.
Status tcp_dial(const std::string &host, int port, int timeout_ms, Fd &out);

// Newline-delimited messages over a connected socket. Every read has a
// deadline; a closed peer is an error naming what was awaited.
class Lines {
 public:
  Lines() = default;
  explicit Lines(Fd fd) : fd_(std::move(fd)) {}
  bool valid() const { return fd_.valid(); }
  Status send(const Msg &m);
  // Waits up to timeout_ms for the next message. `expect` (a verb) turns
  // any other verb into an error.
  Status recv(Msg &m, int timeout_ms, const char *expect = nullptr);

 private:
  Fd fd_;
  std::string buf_;
};

}  // namespace bench
