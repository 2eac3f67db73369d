#include "support/fault_proxy.hpp"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ds4tp::test {

namespace {

constexpr size_t kQueueCap = 4u << 20;  // per stream; beyond it stop reading
constexpr int kSlicesPerPump = 64;      // sliced writes before polling again

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

void no_delay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void close_rst(int fd) {
  if (fd < 0) return;
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);
}

}  // namespace

FaultProxy::FaultProxy(int leader_port) : leader_port_(leader_port) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 ||
      listen(listen_fd_, 16) != 0 ||
      getsockname(listen_fd_, reinterpret_cast<sockaddr *>(&a), &len) != 0)
    throw std::runtime_error(std::string("fault proxy: cannot listen: ") + strerror(errno));
  set_nonblock(listen_fd_);
  port_ = ntohs(a.sin_port);
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error("fault proxy: pipe failed");
}

FaultProxy::~FaultProxy() {
  stop();
  for (auto &l : links_) close_link(*l, false);
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_[0] >= 0) close(wake_[0]), close(wake_[1]);
}

void FaultProxy::start() { thread_ = std::thread([this] { run(); }); }

void FaultProxy::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  (void)!write(wake_[1], "x", 1);
  thread_.join();
}

uint64_t FaultProxy::forwarded(int conn, int dir) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (conn < 0 || size_t(conn) >= counters_.size()) return 0;
  return counters_[size_t(conn)][size_t(dir)];
}

uint64_t FaultProxy::next_slice(size_t left) {
  int n = slice_.load();
  if (n <= 0) return left;
  if (n == 1) return 1;
  rng_ ^= rng_ << 13, rng_ ^= rng_ >> 7, rng_ ^= rng_ << 17;
  uint64_t s = (rng_ % uint64_t(n)) | 1;  // odd sizes: never aligned to a field
  return s < left ? s : left;
}

void FaultProxy::close_link(Link &l, bool rst) {
  if (l.closed) return;
  l.closed = true;
  for (int &fd : l.fds) {
    if (rst)
      close_rst(fd);
    else if (fd >= 0)
      close(fd);
    fd = -1;
  }
}

void FaultProxy::accept_one() {
  int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (c < 0) return;
  int index = accepted_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    counters_.push_back({0, 0});
  }
  if (Mode(mode_.load()) == Mode::Reset) {
    close_rst(c);
    return;
  }
  int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(leader_port_));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (up < 0 || connect(up, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
    // Nobody there (the leader died): the worker sees its connection close.
    if (up >= 0) close(up);
    close(c);
    return;
  }
  set_nonblock(c);
  set_nonblock(up);
  no_delay(c);
  no_delay(up);
  auto l = std::make_unique<Link>();
  l->index = index;
  l->fds[0] = c;
  l->fds[1] = up;
  l->s[ToLeader].from = c;
  l->s[ToLeader].to = up;
  l->s[ToWorker].from = up;
  l->s[ToWorker].to = c;
  links_.push_back(std::move(l));
}

void FaultProxy::pump(Link &l, int dir, bool can_read, bool can_write, uint64_t now) {
  Stream &s = l.s[dir];
  Mode m = Mode(mode_.load());
  if (can_read && !s.eof && (m == Mode::Pass || m == Mode::Blackhole) && s.queued < kQueueCap) {
    uint8_t buf[65536];
    ssize_t n = recv(s.from, buf, sizeof buf, 0);
    if (n > 0) {
      if (tap_) tap_(l.index, dir, s.read, buf, size_t(n));
      s.read += uint64_t(n);
      if (m == Mode::Pass && !s.discard) {
        Chunk c;
        c.due_ns = now + uint64_t(delay_ms_.load()) * 1000000ull;
        c.bytes.assign(buf, buf + n);
        s.queued += size_t(n);
        s.queue.push_back(std::move(c));
      }
    } else if (n == 0) {
      s.eof = true;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      // A reset from one side becomes a reset toward the other.
      close_link(l, true);
      return;
    }
  }
  if (m != Mode::Pass || !can_write) return;
  for (int slices = 0; slices < kSlicesPerPump && !s.queue.empty(); slices++) {
    Chunk &c = s.queue.front();
    if (c.due_ns > now) break;
    size_t left = c.bytes.size() - c.off;
    size_t len = size_t(next_slice(left));
    bool fire_now = false;
    if (trigger_.conn == l.index && trigger_.dir == dir && !fired_.load()) {
      if (s.sent >= trigger_.at) {
        fire_now = true;
        len = 0;
      } else if (s.sent + len >= trigger_.at) {
        len = size_t(trigger_.at - s.sent);
        fire_now = true;
      }
    }
    if (len > 0) {
      ssize_t w = send(s.to, c.bytes.data() + c.off, len, MSG_NOSIGNAL);
      if (w < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
        close_link(l, true);
        return;
      }
      c.off += size_t(w);
      s.sent += uint64_t(w);
      s.queued -= size_t(w);
      {
        std::lock_guard<std::mutex> lock(mu_);
        counters_[size_t(l.index)][size_t(dir)] = s.sent;
      }
      if (c.off == c.bytes.size()) s.queue.erase(s.queue.begin());
      if (size_t(w) < len) break;
    }
    if (fire_now && s.sent >= trigger_.at) {
      fired_.store(true);
      if (trigger_.action) trigger_.action();
      if (trigger_.discard_rest) {
        s.queue.clear();
        s.queued = 0;
        s.discard = true;
      }
      mode_.store(int(trigger_.then));
      return;
    }
  }
  if (s.eof && s.queue.empty() && !s.shut) {
    shutdown(s.to, SHUT_WR);
    s.shut = true;
  }
}

void FaultProxy::run() {
  std::vector<pollfd> pfds;
  while (!stop_.load()) {
    uint64_t now = mono_ns();
    Mode m = Mode(mode_.load());
    if (m == Mode::Reset)
      for (auto &l : links_) close_link(*l, true);
    pfds.clear();
    pfds.push_back({wake_[0], POLLIN, 0});
    pfds.push_back({listen_fd_, POLLIN, 0});
    int timeout = 50;
    for (auto &l : links_) {
      if (l->closed) continue;
      if (l->s[0].shut && l->s[1].shut) {
        close_link(*l, false);
        continue;
      }
      short ev[2] = {0, 0};
      for (int d = 0; d < 2; d++) {
        Stream &s = l->s[d];
        int from = s.from == l->fds[0] ? 0 : 1;
        if (!s.eof && (m == Mode::Pass || m == Mode::Blackhole) && s.queued < kQueueCap)
          ev[from] |= POLLIN;
        if (m == Mode::Pass && !s.queue.empty()) {
          uint64_t due = s.queue.front().due_ns;
          if (due <= now)
            ev[1 - from] |= POLLOUT;
          else if (int left = int((due - now) / 1000000ull) + 1; left < timeout)
            timeout = left;
        }
        if (s.eof && s.queue.empty() && !s.shut) timeout = 0;
      }
      pfds.push_back({l->fds[0], ev[0], 0});
      pfds.push_back({l->fds[1], ev[1], 0});
    }
    poll(pfds.data(), pfds.size(), timeout);
    if (pfds[0].revents) {
      char b[16];
      while (read(wake_[0], b, sizeof b) > 0) {
      }
    }
    if (pfds[1].revents & POLLIN) accept_one();
    now = mono_ns();
    size_t k = 2;
    for (auto &l : links_) {
      if (l->closed) continue;
      if (k + 1 >= pfds.size()) break;
      short r0 = pfds[k].revents, r1 = pfds[k + 1].revents;
      k += 2;
      for (int d = 0; d < 2 && !l->closed; d++) {
        Stream &s = l->s[d];
        bool from0 = s.from == l->fds[0];
        short rin = from0 ? r0 : r1, rout = from0 ? r1 : r0;
        pump(*l, d, (rin & (POLLIN | POLLHUP | POLLERR)) != 0,
             (rout & POLLOUT) != 0 || (m == Mode::Pass && !s.queue.empty()), now);
      }
    }
  }
}

}  // namespace ds4tp::test
