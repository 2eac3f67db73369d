#include "transport/tcp/transport.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <poll.h>
#include <sys/socket.h>

#include "common/clock.hpp"
#include "os/wait.hpp"
#include "transport/tcp/big_exchange.hpp"
#include "transport/tcp/gate_stream.hpp"
#include "wire/gate_header.hpp"
#include "talk/peer_state.hpp"

namespace ds4tp {
namespace {

using wire::GateHeader;
using wire::GateKind;

static_assert(slab::kGateRoom >= wire::kGateHeaderBytes, "row slots hold a gate header");

// After a hang-up, bytes the peer sent before it still drain this long.
constexpr uint64_t kGoneGraceNs = 2000000;

class TcpTransport final : public Transport {
 public:
  TcpTransport(net::Fd fd, const DataConfig &cfg, const tcp::BigPlan &big)
      : fd_(std::move(fd)), cfg_(cfg), big_(big) {
    os::set_spin(policy_, budget_, cfg.spin_ns, cfg.adaptive_spin);
    policy_.clock_every = 8;  // a spin round is a recvmsg already: no clock read each time
    policy_.grace_ns = kGoneGraceNs;
  }

  const char *name() const override { return "tcp"; }

  int attach(uint8_t *base, const slab::Layout &layout, Error &) override {
    base_ = base;
    layout_ = layout;
    return DS4TP_OK;
  }
  void detach() override { base_ = nullptr; }

  int gate(uint32_t layer, uint32_t gate, uint32_t slot, uint64_t seq, uint64_t start_ns,
           Error &err) override {
    GateHeader h{uint16_t(GateKind::Row), layer, gate, seq, layout_.vec_bytes};
    return exchange(h, base_ + layout_.out_vec(slot), base_ + layout_.in_vec(slot),
                    layout_.vec_bytes, start_ns, cfg_.arrival(false), cfg_.gate_timeout_ns,
                    err, /*room=*/true);
  }

  int batch_gate(uint32_t index, uint32_t rows, uint64_t seq, uint64_t start_ns,
                 Error &err) override {
    // Rows are vec_stride apart; when stride == vec_bytes they are one run.
    // Otherwise send the padded run: padding bytes are never read as data.
    uint64_t bytes = uint64_t(rows - 1) * layout_.vec_stride + layout_.vec_bytes;
    GateHeader h{uint16_t(GateKind::Batch), index, rows, seq, bytes};
    return exchange(h, base_ + layout_.batch_out_gate(index),
                    base_ + layout_.batch_in_gate(index), bytes, start_ns, cfg_.arrival(false),
                    cfg_.gate_timeout_ns, err);
  }

  int big_gate(uint32_t layer, uint64_t seq, const void *out, void *in, uint64_t bytes,
               uint64_t start_ns, Error &err) override {
    GateHeader h{uint16_t(GateKind::Big), layer, 0, seq, bytes};
    if (big_.mode == tcp::BigMode::Alternate)
      return tcp::alternate_exchange({fd_.get(), &cfg_, &policy_, start_ns, &seen_ns_}, big_,
                                     h, static_cast<const uint8_t *>(out),
                                     static_cast<uint8_t *>(in), bytes, err);
    return exchange(h, static_cast<const uint8_t *>(out), static_cast<uint8_t *>(in),
                    bytes, start_ns, cfg_.arrival(true), cfg_.big_gate_timeout_ns, err);
  }

 private:
  // Full-duplex exchange of header+payload. `meet_ns` after `started`
  // bounds the wait for the peer's first bytes; after that `progress_ns`
  // applies to every stretch without progress. With `room` (row slots)
  // the headers go in the slab's header room before `out` and `in`: one
  // buffer each way.
  int exchange(const GateHeader &mine, const uint8_t *out, uint8_t *in, uint64_t bytes,
               uint64_t started, uint64_t meet_ns, uint64_t progress_ns, Error &err,
               bool room = false) {
    uint8_t own[wire::kGateHeaderBytes];
    uint8_t *shdr = room ? const_cast<uint8_t *>(out) - wire::kGateHeaderBytes : own;
    wire::encode_gate_header(mine, shdr);

    const int fd = fd_.get();
    const uint64_t total = wire::kGateHeaderBytes + bytes;
    uint64_t sent = 0;
    tcp::GateInbound rx{mine, in, total, room};
    // The data path reads the socket itself, so a closed peer normally
    // shows as EOF there; the watch covers a peer that is gone while
    // neither direction can move.
    os::PeerWatch watch;
    watch.watch_socket(fd, "data connection");
    talk::watch_peer(watch, cfg_.peer);
    os::Waiter w(policy_, &watch, 0, started);
    seen_ns_ = 0;
    uint64_t deadline = os::deadline_after(started, meet_ns);
    bool first_pass = true;

    while (sent < total || rx.got < total) {
      bool progress = false;
      if (sent < total) {
        ssize_t r = tcp::send_stream(fd, shdr, out, sent, total);
        if (r > 0) {
          sent += uint64_t(r);
          progress = true;
        } else if (r < 0 && !tcp::retry_later(errno)) {
          return io_fail(mine, errno, sent, rx.got, total, err);
        }
      }
      if (rx.got < total) {
        const bool first = rx.got == 0;
        ssize_t r;
        if (int rc = rx.read(fd, r, err)) return rc;
        if (r > 0) {
          if (first) seen_ns_ = 1;  // stamped below with the progress clock read
          progress = true;
        } else if (r == 0) {
          return closed(mine, rx.got, total, err);
        } else if (!tcp::retry_later(errno)) {
          return io_fail(mine, errno, sent, rx.got, total, err);
        }
      }
      if (progress) {
        // No clock read when the gate is done (Stats reads the end) or
        // when this was the first pass (the Waiter's read dated it).
        if (sent == total && rx.got == total) {
          w.progress_at_last_read();
          if (seen_ns_ == 1) seen_ns_ = kSeenAtEnd;
          break;
        }
        if (first_pass) w.progress_at_last_read(); else w.progress();
        first_pass = false;
        if (seen_ns_ == 1) seen_ns_ = w.last_progress();
        // Once the peer has shown up, the in-gate timeout applies.
        deadline = rx.got > 0 ? w.last_progress() + progress_ns : os::deadline_after(started, meet_ns);
        continue;
      }
      first_pass = false;
      int perr = 0;
      int rc = w.idle(deadline, [&](uint64_t) {
        pollfd p{fd, short((rx.got < total ? POLLIN : 0) | (sent < total ? POLLOUT : 0)), 0};
        // In slices, so the peer's liveness verdict is read while blocked.
        if (::poll(&p, 1, std::min(ms_left(deadline), kLivenessSliceMs)) < 0 && errno != EINTR)
          perr = errno;
      });
      if (perr != 0) return io_fail(mine, perr, sent, rx.got, total, err);
      if (rc == DS4TP_ETIMEDOUT && rx.got == 0 && cfg_.peer != nullptr)
        return never_reached(mine, meet_ns, err);
      if (rc == DS4TP_ETIMEDOUT)
        return timeout(mine, rx.got == 0 ? meet_ns : progress_ns, sent, rx.got, total, err);
      if (rc == DS4TP_EPEERCLOSED && watch.silent()) return silent(mine, watch, rx.got, total, err);
      if (rc == DS4TP_EPEERCLOSED) return closed(mine, rx.got, total, err);
    }
    return DS4TP_OK;
  }

  int never_reached(const GateHeader &m, uint64_t limit_ns, Error &err) {
    return err.set(DS4TP_ETIMEDOUT,
                   "{} (layer {}, {} {}, seq {}): {}, but it never reached this gate in {} ms "
                   "(peer_arrival_timeout_ms, at least the gate's progress deadline)",
                   wire::gate_kind_name(m.kind), m.layer,
                   m.kind == uint16_t(GateKind::Batch) ? "rows" : "gate", m.aux, m.seq,
                   cfg_.peer->where_peer_is(), limit_ns / 1000000);
  }

  int silent(const GateHeader &m, const os::PeerWatch &watch, uint64_t got, uint64_t total,
             Error &err) {
    return err.set(DS4TP_ETIMEDOUT, "{} during {} (layer {}, {} {}, seq {}; received {} of {} "
                   "bytes)",
                   watch.why(), wire::gate_kind_name(m.kind), m.layer,
                   m.kind == uint16_t(GateKind::Batch) ? "rows" : "gate", m.aux, m.seq, got,
                   total);
  }

  int closed(const GateHeader &m, uint64_t got, uint64_t total, Error &err) {
    return err.set(DS4TP_EPEERCLOSED,
                   "peer closed the data connection during {} (layer {}, {} {}, seq {}; "
                   "received {} of {} bytes)",
                   wire::gate_kind_name(m.kind), m.layer,
                   m.kind == uint16_t(GateKind::Batch) ? "rows" : "gate", m.aux, m.seq, got,
                   total);
  }

  int io_fail(const GateHeader &m, int e, uint64_t sent, uint64_t got, uint64_t total,
              Error &err) {
    int code = (e == EPIPE || e == ECONNRESET || e == ENOTCONN) ? DS4TP_EPEERCLOSED
                                                                 : DS4TP_EIO;
    return err.set(code,
                   "data connection failed during {} (layer {}, seq {}): {} (sent {} "
                   "and received {} of {} bytes)",
                   wire::gate_kind_name(m.kind), m.layer, m.seq, std::strerror(e),
                   sent, got, total);
  }

  int timeout(const GateHeader &m, uint64_t limit_ns, uint64_t sent, uint64_t got,
              uint64_t total, Error &err) {
    return err.set(DS4TP_ETIMEDOUT,
                   "{} (layer {}, {} {}, seq {}) timed out: no progress from the peer "
                   "for {} ms (sent {} and received {} of {} bytes); the peer is "
                   "stalled or not at this gate",
                   wire::gate_kind_name(m.kind), m.layer,
                   m.kind == uint16_t(GateKind::Batch) ? "rows" : "gate", m.aux, m.seq,
                   limit_ns / 1000000, sent, got, total);
  }

  net::Fd fd_;
  DataConfig cfg_;
  tcp::BigPlan big_;
  os::WaitPolicy policy_;
  os::SpinBudget budget_;  // the adaptive policy's window, learned across gates
  uint8_t *base_ = nullptr;
  slab::Layout layout_;
};

}  // namespace

std::unique_ptr<Transport> make_tcp_transport(net::Fd fd, const DataConfig &cfg,
                                              const tcp::BigPlan &big) {
  return std::make_unique<TcpTransport>(std::move(fd), cfg, big);
}

}  // namespace ds4tp
