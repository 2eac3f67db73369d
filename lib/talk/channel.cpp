#include "talk/channel.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.hpp"
#include "net/socket.hpp"
#include "os/os.hpp"
#include "os/wait.hpp"
#include "talk/peer_state.hpp"

namespace ds4tp::talk {

namespace {

constexpr size_t kInitialBuffer = 64 * 1024;  // an eval or logits frame never grows it
constexpr uint64_t kForever = UINT64_MAX;

uint64_t deadline_for(int64_t timeout_ms) {
  return timeout_ms < 0 ? kForever : now_ns() + ms_to_ns(timeout_ms);
}

int io_error(int e, const char *what, Error &err) {
  if (e == EPIPE || e == ECONNRESET || e == ENOTCONN)
    return err.set(DS4TP_EPEERCLOSED, "{}: the peer closed the control connection ({})", what,
                   std::strerror(e));
  if (e == ETIMEDOUT)
    return err.set(DS4TP_EPEERCLOSED,
                   "{}: the peer stopped answering on the control connection (TCP gave up: {}); "
                   "its host is down or the network is cut",
                   what, std::strerror(e));
  return err.set(DS4TP_EIO, "{}: {}", what, std::strerror(e));
}

size_t unread_bytes(int fd) {
  int avail = 0;
  return ioctl(fd, FIONREAD, &avail) == 0 && avail > 0 ? size_t(avail) : 0;
}

const char *role_name(int role) {
  return role == DS4TP_ROLE_LEADER ? "leader" : role == DS4TP_ROLE_WORKER ? "worker" : "?";
}

}  // namespace

Channel::Channel(int fd, const ChannelConfig &cfg) : fd_(fd), cfg_(cfg) {
  os::wake_open(wake_);
  sbuf_.reset(new uint8_t[kInitialBuffer]);
  scap_ = kInitialBuffer;
  rbuf_.reset(new uint8_t[kInitialBuffer]);
  rcap_ = kInitialBuffer;
}

Channel::~Channel() { os::wake_close(wake_); }

void Channel::abandon() {
  if (abandoned_.exchange(true, std::memory_order_acq_rel)) return;
  os::wake_signal(wake_);
}

uint8_t *Channel::send_buffer(uint64_t total) {
  if (total > scap_) {
    size_t cap = scap_;
    while (cap < total) cap *= 2;
    sbuf_.reset(new uint8_t[cap]);
    scap_ = cap;
  }
  return sbuf_.get();
}

// Waits until `fd_` has `events` or the channel is abandoned. ETIMEDOUT is
// left to the caller (it knows what it was waiting for).
int Channel::wait(short events, uint64_t deadline, Error &err) {
  int left = deadline == kForever ? -1 : ms_left(deadline);
  if (deadline != kForever && left <= 0) return DS4TP_ETIMEDOUT;
  pollfd p[2] = {{fd_, events, 0}, {wake_[0], POLLIN, 0}};
  int r = ::poll(p, wake_[0] >= 0 ? 2 : 1, left);
  if (r < 0 && errno != EINTR) return io_error(errno, "waiting on the control connection", err);
  return DS4TP_OK;
}

int Channel::io_write(const uint8_t *p, size_t len, uint64_t deadline, int64_t timeout_ms,
                      wire::FrameType type, Error &err) {
  // Worded only on failure: no formatting on the way of every frame.
  const auto what = [type] { return fmt::format("sending {}", wire::frame_name(type)); };
  size_t done = 0;
  while (true) {
    if (int e = net::send_until_blocked(fd_, p, len, done)) return io_error(e, what().c_str(), err);
    if (done == len) break;
    if (deadline == 0) deadline = deadline_for(timeout_ms);  // first full socket: the clock starts
    if (abandoned() && cfg_.peer != nullptr && cfg_.peer->silent())
      return err.set(DS4TP_ETIMEDOUT, "{}: {} ({} of {} bytes written)", what(),
                     cfg_.peer->silence(), done, len);
    if (abandoned())
      return err.set(DS4TP_EFAILED, "{}: abandoned after {} of {} bytes: the pair failed", what(),
                     done, len);
    int rc = wait(POLLOUT, deadline, err);
    if (rc == DS4TP_ETIMEDOUT)
      return err.set(DS4TP_ETIMEDOUT,
                     "{}: the peer did not take the frame within {} ms (frame_timeout_ms; {} of "
                     "{} bytes written): it is stalled and not reading its control connection",
                     what(), timeout_ms, done, len);
    if (rc) return rc;
  }
  return DS4TP_OK;
}

int Channel::write_frame(wire::FrameType type, uint8_t *buf, uint32_t bytes, int64_t timeout_ms,
                         Error &err) {
  wire::FrameHeader h;
  h.type = uint16_t(type);
  h.bytes = bytes;
  h.counter = tx_counter_ + 1;
  wire::encode_frame_header(h, buf);
  std::lock_guard<std::mutex> lock(write_mu_);
  int rc = io_write(buf, wire::kFrameHeaderBytes + bytes, 0, timeout_ms, type, err);
  if (rc == DS4TP_OK) tx_counter_ = h.counter;
  return rc;
}

// Reads until `need` bytes of the current frame are buffered at rpos_.
// Each recv takes whatever the socket holds (up to the buffer's room), so
// a frame that arrived whole costs one system call, and the start of the
// next frame may come along with it.
int Channel::fill(size_t need, ReadClock &clock, const char *what, size_t frame_len,
                  Error &err) {
  if (rpos_ == rend_) rpos_ = rend_ = 0;  // all consumed: the whole buffer is room again
  if (rpos_ + need > rcap_) {  // make room: unread bytes to the front, grow if still short
    const size_t have = rend_ - rpos_;
    if (need > rcap_) {
      size_t cap = rcap_;
      while (cap < need) cap *= 2;
      std::unique_ptr<uint8_t[]> bigger(new uint8_t[cap]);
      std::memcpy(bigger.get(), rbuf_.get() + rpos_, have);
      rbuf_ = std::move(bigger);
      rcap_ = cap;
    } else {
      std::memmove(rbuf_.get(), rbuf_.get() + rpos_, have);
    }
    rpos_ = 0;
    rend_ = have;
  }
  uint64_t spin_until = 0;
  uint32_t spins = 0;
  bool spinning = false;
  while (rend_ - rpos_ < need) {
    ssize_t n = ::recv(fd_, rbuf_.get() + rend_, rcap_ - rend_, MSG_DONTWAIT);
    if (n > 0) {
      if (rend_ == rpos_) clock.rest = 0;  // the frame's first byte: its clock starts at the next wait
      rend_ += size_t(n);
      rx_bytes_.fetch_add(uint64_t(n), std::memory_order_relaxed);
      spin_until = 0;
      spins = 0;
      continue;
    }
    const size_t got = rend_ - rpos_;
    if (n == 0) {
      if (got == 0)
        return err.set(DS4TP_EPEERCLOSED, "{}: the peer closed the control connection", what);
      return err.set(DS4TP_EPEERCLOSED,
                     "{}: the peer closed the control connection in the middle of a frame "
                     "({} of {} bytes): truncated frame",
                     what, got, frame_len);
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return io_error(errno, what, err);
    if (abandoned() && cfg_.peer != nullptr && cfg_.peer->silent())
      return err.set(DS4TP_ETIMEDOUT, "{}: {}", what, cfg_.peer->silence());
    if (abandoned())
      return err.set(DS4TP_EFAILED, "{}: abandoned, the pair failed while waiting", what);
    const bool started = got > 0;
    // Read the clock only now that a wait begins; a frame that arrived
    // whole never needs it.
    if (started && clock.rest == 0) clock.rest = deadline_for(clock.timeout_ms);
    if (!started && clock.meet == 0) clock.meet = deadline_for(clock.meet_ms);
    const uint64_t deadline = started ? clock.rest : clock.meet;
    if (cfg_.spin_ns > 0) {
      // The clock every 8th round: a round is a system call or two already.
      if (spin_until == 0 || (++spins & 7) == 0) {
        const uint64_t t = now_ns();
        if (spin_until == 0) spin_until = t + cfg_.spin_ns;
        spinning = t < spin_until && t < deadline;
      }
      if (spinning) {
        // Yielding every 8th round lets a peer that shares this CPU (more
        // spinning threads than free cores) run and answer, instead of
        // waiting for our spin to run out; a yield every round made each
        // round two system calls, and the reply was seen that much later.
        if ((spins & 7) == 0) os::yield_thread(); else os::cpu_relax();
        continue;
      }
    }
    int rc = wait(POLLIN, deadline, err);
    if (rc == DS4TP_ETIMEDOUT && started)
      return err.set(DS4TP_ETIMEDOUT,
                     "{}: only {} of {} frame bytes arrived within {} ms (frame_timeout_ms)", what,
                     got, frame_len, clock.timeout_ms);
    if (rc == DS4TP_ETIMEDOUT && clock.meet_ms > clock.timeout_ms && cfg_.peer != nullptr)
      return err.set(DS4TP_ETIMEDOUT,
                     "{}: {}, but sent nothing for {} ms (peer_arrival_timeout_ms, at least "
                     "frame_timeout_ms): the ranks are out of lockstep or the {} is stuck",
                     what, cfg_.peer->where_peer_is(), clock.meet_ms, cfg_.peer->peer);
    if (rc == DS4TP_ETIMEDOUT)
      return err.set(DS4TP_ETIMEDOUT,
                     "{}: nothing arrived within {} ms (frame_timeout_ms): the peer is alive "
                     "but stalled, or the ranks are out of lockstep",
                     what, clock.timeout_ms);
    if (rc) return rc;
  }
  return DS4TP_OK;
}

void Channel::heard(const uint8_t *payload) {
  wire::HeartbeatMsg m;
  Error e;
  if (cfg_.peer == nullptr || wire::decode(payload, wire::kHeartbeatBytes, m, e) != DS4TP_OK)
    return;
  cfg_.peer->peer_layer.store(m.layer, std::memory_order_relaxed);
  cfg_.peer->peer_gate.store(PeerState::gate_word(m.kind, m.seq), std::memory_order_relaxed);
  cfg_.peer->peer_entered.store(m.gates, std::memory_order_relaxed);
  cfg_.peer->heartbeats.fetch_add(1, std::memory_order_relaxed);
}

void Channel::send_heartbeat(const wire::HeartbeatMsg &m) {
  uint8_t buf[wire::kFrameHeaderBytes + wire::kHeartbeatBytes];
  wire::FrameHeader h;
  h.type = uint16_t(wire::FrameType::Heartbeat);
  h.bytes = uint32_t(wire::kHeartbeatBytes);
  h.counter = 0;  // outside the session's frame counter
  wire::encode_frame_header(h, buf);
  wire::Writer w(buf + wire::kFrameHeaderBytes, wire::kHeartbeatBytes);
  wire::encode(w, m);
  std::unique_lock<std::mutex> lock(write_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  ssize_t n = os::send_nosignal(fd_, buf, sizeof buf);
  if (n <= 0 || size_t(n) == sizeof buf) return;
  Error e;  // a failure here shows up as the peer's silence or hang-up
  io_write(buf + n, sizeof buf - size_t(n), now_ns() + 1000000000ull, 1000,
           wire::FrameType::Heartbeat,
           e);
}

// True when a whole HEARTBEAT frame starts at `p` (`avail` bytes there).
static bool whole_heartbeat(const uint8_t *p, size_t avail, uint32_t max_frame_bytes) {
  constexpr size_t kWhole = wire::kFrameHeaderBytes + wire::kHeartbeatBytes;
  wire::FrameHeader h;
  Error e;
  return avail >= kWhole &&
         wire::decode_frame_header(p, kWhole, max_frame_bytes, h, e) == DS4TP_OK &&
         h.type == uint16_t(wire::FrameType::Heartbeat);
}

size_t Channel::drain_heartbeats() {
  std::unique_lock<std::mutex> lock(read_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return unread_bytes(fd_);  // the session reads and skips them
  constexpr size_t kWhole = wire::kFrameHeaderBytes + wire::kHeartbeatBytes;
  // What the session's last read took along comes first. Only rpos_ moves
  // here: the payload the session holds stays where it is.
  while (whole_heartbeat(rbuf_.get() + rpos_, rend_ - rpos_, cfg_.max_frame_bytes)) {
    heard(rbuf_.get() + rpos_ + wire::kFrameHeaderBytes);
    rpos_ += kWhole;
  }
  if (rend_ > rpos_) return rend_ - rpos_ + unread_bytes(fd_);
  for (;;) {
    size_t avail = unread_bytes(fd_);
    if (avail < kWhole) return avail;
    uint8_t buf[kWhole];
    ssize_t n = ::recv(fd_, buf, kWhole, MSG_PEEK | MSG_DONTWAIT);
    if (n != ssize_t(kWhole) || !whole_heartbeat(buf, kWhole, cfg_.max_frame_bytes)) return avail;
    n = ::recv(fd_, buf, kWhole, MSG_DONTWAIT);
    if (n != ssize_t(kWhole)) return avail;  // cannot happen: peeked whole
    rx_bytes_.fetch_add(kWhole, std::memory_order_relaxed);
    heard(buf + wire::kFrameHeaderBytes);
  }
}

bool Channel::peek_unread(std::vector<uint8_t> &out, size_t max) {
  out.clear();
  bool whole = false;
  {
    std::unique_lock<std::mutex> lock(read_mu_, std::try_to_lock);
    // While the session reads, its buffer holds only part of the frame it
    // waits for, whose rest is in the socket: the socket alone is looked at.
    whole = lock.owns_lock();
    if (whole) out.assign(rbuf_.get() + rpos_, rbuf_.get() + rpos_ + std::min(rend_ - rpos_, max));
  }
  const size_t room = max - out.size(), avail = std::min(unread_bytes(fd_), room);
  if (avail == 0) return whole;
  const size_t have = out.size();
  out.resize(have + avail);
  ssize_t n = ::recv(fd_, out.data() + have, avail, MSG_PEEK | MSG_DONTWAIT);
  out.resize(have + (n > 0 ? size_t(n) : 0));
  return whole;
}

int Channel::recv(Frame &out, int64_t timeout_ms, const char *what, Error &err,
                  int64_t arrival_ms) {
  std::lock_guard<std::mutex> lock(read_mu_);
  // A live peer may start its frame up to arrival_ms late (its silence
  // ends the wait sooner); without liveness, timeout_ms bounds it.
  int64_t meet_ms = timeout_ms;
  if (cfg_.peer != nullptr && timeout_ms >= 0 && arrival_ms != 0)
    meet_ms = arrival_ms < 0 ? kNoTimeout : std::max(arrival_ms, timeout_ms);
  ReadClock clock{0, meet_ms, timeout_ms};
  const size_t hb = wire::kFrameHeaderBytes;
  wire::FrameHeader h;
  for (;;) {
    // Bytes buffered by the last read: this frame's first byte is in.
    if (rend_ > rpos_) clock.rest = 0;
    if (int rc = fill(hb, clock, what, hb, err)) return rc;
    if (int rc = wire::decode_frame_header(rbuf_.get() + rpos_, hb, cfg_.max_frame_bytes, h, err)) {
      err.message = fmt::format("{}: {}", what, err.message);
      return rc;
    }
    if (h.type != uint16_t(wire::FrameType::Heartbeat)) break;
    // The watcher's frame: no counter; the rule fixed its size.
    if (h.counter != 0)
      return err.set(DS4TP_EPROTO, "{}: HEARTBEAT frame with counter {} (must be 0)", what,
                     h.counter);
    if (int rc = fill(hb + wire::kHeartbeatBytes, clock, what, hb + wire::kHeartbeatBytes, err))
      return rc;
    heard(rbuf_.get() + rpos_ + hb);
    rpos_ += hb + wire::kHeartbeatBytes;
  }
  const wire::FrameRule *rule = wire::frame_rule(h.type);
  const bool from_leader = cfg_.role == DS4TP_ROLE_WORKER;
  if ((rule->sender == wire::Sender::Leader && !from_leader) ||
      (rule->sender == wire::Sender::Worker && from_leader))
    return err.set(DS4TP_EPROTO, "{}: the {} sent a {} frame (type {}, {} bytes), which only the {} sends",
                   what, role_name(from_leader ? DS4TP_ROLE_LEADER : DS4TP_ROLE_WORKER),
                   rule->name, h.type, h.bytes, role_name(cfg_.role));
  if (h.counter != rx_counter_ + 1)
    return err.set(DS4TP_EPROTO,
                   "{}: control frame counter jumped from {} to {} ({} frame, {} bytes): a frame "
                   "was lost, duplicated or injected",
                   what, rx_counter_, h.counter, rule->name, h.bytes);
  // The size is now bounded by max_frame_bytes and the type's rule.
  if (int rc = fill(hb + h.bytes, clock, what, hb + h.bytes, err)) return rc;
  rx_counter_ = h.counter;
  if (h.type == uint16_t(wire::FrameType::Stop)) stop_received_.store(true, std::memory_order_release);
  out.header = h;
  out.payload = rbuf_.get() + rpos_ + hb;
  rpos_ += hb + h.bytes;
  return DS4TP_OK;
}

}  // namespace ds4tp::talk
