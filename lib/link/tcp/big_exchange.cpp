#include "link/tcp/big_exchange.hpp"
#include "link/tcp/gate_stream.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "common/clock.hpp"
#include "talk/peer_state.hpp"

namespace ds4tp::tcp {

namespace {

using wire::GateHeader;

bool is_loopback_v4(const in_addr &a) { return (ntohl(a.s_addr) >> 24) == 127; }

}  // namespace

// A host talking to its own NIC address is routed over lo too, hence
// "same address as this end".
bool over_loopback(int fd) {
  sockaddr_storage me{}, peer{};
  socklen_t ml = sizeof me, pl = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr *>(&me), &ml) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &pl) != 0 ||
      me.ss_family != peer.ss_family)
    return false;
  if (peer.ss_family == AF_INET) {
    auto &a = reinterpret_cast<const sockaddr_in &>(me).sin_addr;
    auto &b = reinterpret_cast<const sockaddr_in &>(peer).sin_addr;
    return is_loopback_v4(b) || a.s_addr == b.s_addr;
  }
  if (peer.ss_family == AF_INET6) {
    auto &a = reinterpret_cast<const sockaddr_in6 &>(me).sin6_addr;
    auto &b = reinterpret_cast<const sockaddr_in6 &>(peer).sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&b) || std::memcmp(&a, &b, sizeof a) == 0) return true;
    if (IN6_IS_ADDR_V4MAPPED(&b)) {
      in_addr v4;
      std::memcpy(&v4, b.s6_addr + 12, 4);
      return is_loopback_v4(v4);
    }
  }
  return false;
}

namespace {

const char *kind(const GateHeader &m) { return wire::gate_kind_name(m.kind); }

}  // namespace

uint64_t send_limit(const BigPlan &plan, uint64_t got, uint64_t total) {
  if (plan.mode == BigMode::Duplex || plan.round == 0) return total;
  // Rounds of the peer's stream fully held; the last one may be short.
  uint64_t rounds_in = got >= total ? (total + plan.round - 1) / plan.round : got / plan.round;
  uint64_t may = (rounds_in + (plan.sends_first ? 1 : 0)) * plan.round;
  // Headers go both ways at once, so both ranks check the gate (and see a
  // desync) before any round moves, as in full duplex.
  return std::min(std::max<uint64_t>(may, wire::kGateHeaderBytes), total);
}

BigPlan choose_big_plan(int fd, int rank, const char *&bad) {
  BigPlan p;
  p.sends_first = rank == 0;
  bad = nullptr;
  const char *v = std::getenv("DS4TP_BIG_GATE");
  if (v != nullptr && std::strcmp(v, "duplex") == 0) {
    p.why = "DS4TP_BIG_GATE=duplex";
    return p;
  }
  if (v != nullptr && std::strcmp(v, "alternate") == 0) {
    p.mode = BigMode::Alternate;
    p.why = "DS4TP_BIG_GATE=alternate";
    return p;
  }
  if (v != nullptr && *v != '\0' && std::strcmp(v, "auto") != 0) bad = v;
  if (over_loopback(fd)) {
    p.mode = BigMode::Alternate;
    p.why = "the data connection is on loopback";
  } else {
    p.why = "the data connection leaves the loopback device";
  }
  return p;
}

namespace {

// The error texts of exchange() (transport.cpp), plus the round size, so
// a log tells which strategy was running.
struct Fail {
  const char *what;
  const GateHeader &m;
  const BigPlan &plan;
  uint64_t sent, got, total;

  int closed(Error &err) const {
    return err.set(DS4TP_EPEERCLOSED,
                   "peer closed the {} during {} (layer {}, gate {}, seq {}; "
                   "received {} of {} bytes, alternating rounds of {} KiB)",
                   what, kind(m), m.layer, m.aux, m.seq, got, total, plan.round >> 10);
  }
  int io(int e, Error &err) const {
    int code = (e == EPIPE || e == ECONNRESET || e == ENOTCONN) ? DS4TP_EPEERCLOSED
                                                                 : DS4TP_EIO;
    return err.set(code,
                   "the {} failed during {} (layer {}, seq {}): {} (sent {} and "
                   "received {} of {} bytes, alternating rounds of {} KiB)",
                   what, kind(m), m.layer, m.seq, std::strerror(e), sent, got, total,
                   plan.round >> 10);
  }
  int timeout(uint64_t limit_ns, Error &err) const {
    return err.set(DS4TP_ETIMEDOUT,
                   "{} (layer {}, gate {}, seq {}) timed out on the {}: no progress from the "
                   "peer for {} ms (sent {} and received {} of {} bytes, alternating rounds "
                   "of {} KiB); the peer is stalled or not at this gate",
                   kind(m), m.layer, m.aux, m.seq, what, limit_ns / 1000000, sent, got, total,
                   plan.round >> 10);
  }
  int never(const talk::PeerState &peer, uint64_t limit_ns, Error &err) const {
    return err.set(DS4TP_ETIMEDOUT,
                   "{} (layer {}, gate {}, seq {}): {}, but it never reached this gate in {} "
                   "ms (peer_arrival_timeout_ms, at least the gate's progress deadline)",
                   kind(m), m.layer, m.aux, m.seq, peer.where_peer_is(), limit_ns / 1000000);
  }
  int silent(const os::PeerWatch &w, Error &err) const {
    return err.set(DS4TP_ETIMEDOUT, "{} during {} (layer {}, gate {}, seq {}; received {} of "
                   "{} bytes)", w.why(), kind(m), m.layer, m.aux, m.seq, got, total);
  }
};

// SO_RCVLOWAT for one gate, put back to 1 (the kernel's default, which
// row gates rely on) however the gate ends.
struct LowWater {
  int fd;
  int now = 1;
  void set(int v) {
    if (v == now) return;
    if (::setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v) == 0) now = v;
  }
  ~LowWater() { set(1); }
};

// A blocked receiver wakes per this many bytes at most, not per segment
// (64 MiB under load: lib alternate 1.01-1.12x of raw alternate with it,
// 0.86-0.92x without).
constexpr uint64_t kWakeBytes = 256u << 10;

}  // namespace

int alternate_exchange(const BigLink &link, const BigPlan &plan, const GateHeader &mine,
                       const uint8_t *out, uint8_t *in, uint64_t bytes, Error &err) {
  uint8_t shdr[wire::kGateHeaderBytes];
  wire::encode_gate_header(mine, shdr);

  const int fd = link.fd;
  const DataConfig &cfg = *link.cfg;
  const uint64_t meet_ns = cfg.arrival(true), progress_ns = cfg.big_gate_timeout_ns;
  const uint64_t total = wire::kGateHeaderBytes + bytes;
  uint64_t sent = 0;
  GateInbound rx{mine, in, total};
  Fail f{link.what, mine, plan, 0, 0, total};
  os::PeerWatch watch;
  watch.watch_socket(fd, link.what);
  talk::watch_peer(watch, cfg.peer);
  // Several rounds: no busy-polling. A rank then waits at least the
  // peer's whole round (ms), and on loopback the peer's core does the TCP
  // work of that round, so a spinning rank takes the CPU the transfer
  // needs (64 MiB under load: 1.28 GB/s with spin_us=0, 1.07 with 200;
  // equal when idle). One round: the usual spin, for its latency.
  os::WaitPolicy policy = *link.policy;
  if (total > plan.round) policy.spin_ns = 0;
  const uint64_t started = link.start_ns;
  os::Waiter w(policy, &watch, 0, started);
  *link.seen_ns = 0;
  uint64_t deadline = os::deadline_after(started, meet_ns);
  LowWater low{fd};

  while (sent < total || rx.got < total) {
    bool progress = false;
    const uint64_t limit = send_limit(plan, rx.got, total);
    if (sent < limit) {
      ssize_t r = send_stream(fd, shdr, out, sent, limit);
      if (r > 0) {
        sent += uint64_t(r);
        progress = true;
      } else if (r < 0 && !retry_later(errno)) {
        f.sent = sent, f.got = rx.got;
        return f.io(errno, err);
      }
    }
    if (rx.got < total) {
      const bool first = rx.got == 0;
      ssize_t r;
      if (int rc = rx.read(fd, r, err)) return rc;
      if (r > 0) {
        if (first) *link.seen_ns = 1;  // stamped below with the progress clock read
        progress = true;
      } else if (r == 0) {
        f.sent = sent, f.got = rx.got;
        return f.closed(err);
      } else if (!retry_later(errno)) {
        f.sent = sent, f.got = rx.got;
        return f.io(errno, err);
      }
    }
    if (progress) {
      w.progress();
      if (*link.seen_ns == 1) *link.seen_ns = w.last_progress();
      deadline = rx.got > 0 ? w.last_progress() + progress_ns : os::deadline_after(started, meet_ns);
      continue;
    }
    int perr = 0;
    const bool want_out = sent < send_limit(plan, rx.got, total);
    if (!want_out && rx.header_checked && rx.got < total) {
      // Only receiving: wake once a good slice has landed, never asking
      // for more than the peer sends before it waits for our next round.
      uint64_t round_end = std::min(total, (rx.got / plan.round + 1) * plan.round);
      low.set(int(std::min(round_end - rx.got, kWakeBytes)));
    }
    int rc = w.idle(deadline, [&](uint64_t) {
      pollfd p{fd, short((rx.got < total ? POLLIN : 0) | (want_out ? POLLOUT : 0)), 0};
      if (::poll(&p, 1, std::min(ms_left(deadline), kLivenessSliceMs)) < 0 && errno != EINTR)
        perr = errno;
    });
    f.sent = sent, f.got = rx.got;
    if (perr != 0) return f.io(perr, err);
    if (rc == DS4TP_ETIMEDOUT && rx.got == 0 && cfg.peer != nullptr)
      return f.never(*cfg.peer, meet_ns, err);
    if (rc == DS4TP_ETIMEDOUT) return f.timeout(rx.got == 0 ? meet_ns : progress_ns, err);
    if (rc == DS4TP_EPEERCLOSED && watch.silent()) return f.silent(watch, err);
    if (rc == DS4TP_EPEERCLOSED) return f.closed(err);
  }
  return DS4TP_OK;
}

}  // namespace ds4tp::tcp
