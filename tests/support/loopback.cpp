#include "support/loopback.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "wire/codec.hpp"

namespace ds4tp::test {

int bind_loopback(sockaddr_in &addr) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len);
  return fd;
}

TcpPair::TcpPair() {
  sockaddr_in addr;
  int l = bind_loopback(addr);
  listen(l, 1);
  a = socket(AF_INET, SOCK_STREAM, 0);
  connect(a, reinterpret_cast<sockaddr *>(&addr), sizeof addr);
  b = accept(l, nullptr, nullptr);
  close(l);
  int one = 1;
  for (int fd : {a, b}) {
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
}

TcpPair::~TcpPair() {
  if (a >= 0) close(a);
  if (b >= 0) close(b);
}

void raw_write(int fd, const std::vector<uint8_t> &v) {
  size_t done = 0;
  while (done < v.size()) {
    ssize_t n = ::send(fd, v.data() + done, v.size() - done, MSG_NOSIGNAL);
    if (n > 0) done += size_t(n);
    else if (errno != EAGAIN && errno != EINTR) return;
  }
}

std::vector<uint8_t> frame_header(uint16_t type, uint32_t bytes, uint32_t counter,
                                  uint32_t magic) {
  std::vector<uint8_t> h(wire::kFrameHeaderBytes);
  wire::put_u32(h.data(), magic);
  wire::put_u16(h.data() + 4, type);
  wire::put_u16(h.data() + 6, 0);
  wire::put_u32(h.data() + 8, bytes);
  wire::put_u32(h.data() + 12, counter);
  return h;
}

std::vector<uint8_t> frame_bytes(uint16_t type, uint32_t counter,
                                 const std::vector<uint8_t> &payload) {
  auto f = frame_header(type, uint32_t(payload.size()), counter);
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

}  // namespace ds4tp::test
