#include "raw_mesh.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "engine_core.h"

namespace engine {
namespace {

constexpr uint64_t kIdleNs = 10'000'000'000;  // nothing moved this long: a peer is stuck

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

bool full(int fd, void *p, size_t n, bool out) {
  auto *c = static_cast<char *>(p);
  while (n > 0) {
    const ssize_t k = out ? ::send(fd, c, n, MSG_NOSIGNAL) : ::recv(fd, c, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= size_t(k);
  }
  return true;
}

}  // namespace

std::vector<int> RawMesh::listen_all(int ranks, std::vector<int> &ports) {
  std::vector<int> fds;
  for (int r = 0; r < ranks; r++) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(0);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 ||
        ::listen(fd, 64) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) != 0) {
      std::perror("raw mesh: listen");
      std::exit(1);
    }
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  return fds;
}

bool RawMesh::connect(int rank, int ranks, const std::vector<int> &listeners,
                      const std::vector<int> &ports, std::string &err) {
  rank_ = rank;
  n_ = ranks;
  fds_.assign(size_t(ranks), -1);
  for (int r = 0; r < ranks; r++)
    if (r != rank) ::close(listeners[size_t(r)]);
  for (int r = 0; r < rank; r++) {  // listeners exist already: the dial lands in the backlog
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(ports[size_t(r)]);
    int32_t me = rank;
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 ||
        !full(fd, &me, sizeof me, true)) {
      err = std::string("raw mesh: dial rank ") + std::to_string(r) + ": " + std::strerror(errno);
      return false;
    }
    fds_[size_t(r)] = fd;
  }
  for (int k = rank + 1; k < ranks; k++) {
    const int fd = ::accept(listeners[size_t(rank)], nullptr, nullptr);
    int32_t who = -1;
    if (fd < 0 || !full(fd, &who, sizeof who, false) || who <= rank || who >= ranks) {
      err = "raw mesh: accept: " + std::string(std::strerror(errno));
      return false;
    }
    fds_[size_t(who)] = fd;
  }
  ::close(listeners[size_t(rank)]);
  for (int fd : fds_) {
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  return true;
}

RawMesh::~RawMesh() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

bool RawMesh::exchange(const char *const *out, size_t out_bytes, char *const *in,
                       size_t in_bytes, char *err, size_t cap) {
  size_t sent[ENGINE_MAX_RANKS] = {}, got[ENGINE_MAX_RANKS] = {};
  int pending = 2 * (n_ - 1);
  uint64_t last = 0;
  for (uint32_t spins = 0; pending > 0; spins++) {
    bool moved = false;
    bool readable[ENGINE_MAX_RANKS];
    if (spin_ == Spin::Poll) {  // which sockets hold bytes, without taking their locks
      pollfd pf[ENGINE_MAX_RANKS];
      int np = 0, who[ENGINE_MAX_RANKS];
      for (int r = 0; r < n_; r++) {
        readable[r] = false;
        if (r != rank_ && got[r] < in_bytes) {
          who[np] = r;
          pf[np++] = {fds_[size_t(r)], POLLIN, 0};
        }
      }
      if (np > 0 && ::poll(pf, nfds_t(np), 0) > 0)
        for (int i = 0; i < np; i++) readable[who[i]] = pf[i].revents != 0;
    }
    for (int r = 0; r < n_; r++) {
      if (r == rank_) continue;
      const int fd = fds_[size_t(r)];
      if (sent[r] < out_bytes) {
        const ssize_t k = ::send(fd, out[r] + sent[r], out_bytes - sent[r], MSG_NOSIGNAL);
        if (k > 0) {
          sent[r] += size_t(k);
          moved = true;
          if (sent[r] == out_bytes) pending--;
        } else if (k < 0 && errno != EAGAIN && errno != EINTR) {
          std::snprintf(err, cap, "raw mesh: send to rank %d: %s", r, std::strerror(errno));
          return false;
        }
      }
      if (got[r] < in_bytes && (spin_ == Spin::Recv || readable[r])) {
        const ssize_t k = ::recv(fd, in[r] + got[r], in_bytes - got[r], MSG_DONTWAIT);
        if (k > 0) {
          got[r] += size_t(k);
          moved = true;
          if (got[r] == in_bytes) pending--;
        } else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
          std::snprintf(err, cap, "raw mesh: rank %d left", r);
          return false;
        }
      }
    }
    if (moved) {
      last = 0;
    } else if ((spins & 4095) == 0) {  // a clock read now and then: a stuck peer ends the run
      const uint64_t now = engine_now_ns();
      if (last == 0) last = now;
      if (now - last > kIdleNs) {
        std::snprintf(err, cap, "raw mesh: nothing moved for 10 s");
        return false;
      }
    }
  }
  return true;
}

int RawMesh::collective(int coll, float *buf, const float *in, float *out, size_t bytes,
                        char *err, size_t cap) {
  const char *src[ENGINE_MAX_RANKS];
  char *dst[ENGINE_MAX_RANKS];
  if (coll == ENGINE_ALL_REDUCE) {
    const size_t n = bytes / 4;
    if (slots_.size() < n * size_t(n_)) slots_.resize(n * size_t(n_));
    for (int r = 0; r < n_; r++) {
      src[r] = reinterpret_cast<const char *>(buf);
      dst[r] = reinterpret_cast<char *>(slots_.data() + size_t(r) * n);
    }
    if (!exchange(src, bytes, dst, bytes, err, cap)) return 1;
    const float *v[ENGINE_MAX_RANKS];
    for (int r = 0; r < n_; r++) v[r] = r == rank_ ? buf : slots_.data() + size_t(r) * n;
    for (size_t i = 0; i < n; i++) {  // rank order, as the library sums
      float s = v[0][i];
      for (int r = 1; r < n_; r++) s += v[r][i];
      buf[i] = s;
    }
    return 0;
  }
  const size_t per = bytes / size_t(n_);
  for (int r = 0; r < n_; r++) {
    src[r] = reinterpret_cast<const char *>(in);
    dst[r] = reinterpret_cast<char *>(out) + size_t(r) * per;
  }
  if (!exchange(src, per, dst, per, err, cap)) return 1;
  std::memcpy(reinterpret_cast<char *>(out) + size_t(rank_) * per, in, per);
  return 0;
}

}  // namespace engine
