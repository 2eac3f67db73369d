#include "transport/tcp/transport.hpp"

#include <cerrno>
#include <cstring>

#include "os/wait.hpp"
#include "transport/tcp/big_exchange.hpp"
#include "transport/tcp/mesh.hpp"
#include "wire/gate_header.hpp"
#include "talk/peer_state.hpp"

namespace ds4tp {
namespace {

using wire::GateHeader;
using wire::GateKind;

static_assert(slab::kGateRoom >= wire::kGateHeaderBytes, "row slots hold a gate header");

// After a hang-up, bytes the peer sent before it still drain this long.
constexpr uint64_t kGoneGraceNs = 2000000;

// A pair's gate is a step of a two-member mesh (mesh.hpp): this rank is
// member 0, the peer member 1, and the step lands in the slab.
constexpr int kSelf = 0, kPeer = 1;

std::vector<net::Fd> mesh_fds(net::Fd fd) {
  std::vector<net::Fd> fds(2);
  fds[kPeer] = std::move(fd);
  return fds;
}

class TcpTransport final : public Transport {
 public:
  TcpTransport(net::Fd fd, const DataConfig &cfg, const tcp::BigPlan &big, const char *link)
      : cfg_(cfg), big_(big), what_(link),
        link_(mesh_fds(std::move(fd)), kSelf, 0, 0, with_spin(cfg), cfg.adaptive_spin) {}

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
      return tcp::alternate_exchange(
          {link_.socket(kPeer), &cfg_, &link_.policy(), start_ns, &seen_ns_, what_}, big_, h,
          static_cast<const uint8_t *>(out), static_cast<uint8_t *>(in), bytes, err);
    return exchange(h, static_cast<const uint8_t *>(out), static_cast<uint8_t *>(in),
                    bytes, start_ns, cfg_.arrival(true), cfg_.big_gate_timeout_ns, err);
  }

 private:
  static os::WaitPolicy with_spin(const DataConfig &cfg) {
    os::WaitPolicy p;
    p.spin_ns = cfg.spin_ns;
    p.grace_ns = kGoneGraceNs;
    return p;
  }

  // Full-duplex exchange of header+payload, one step of the link. `meet_ns`
  // after `started` bounds the wait for the peer's first bytes; after that
  // `progress_ns` applies to every stretch without progress. With `room`
  // (row slots) the headers go in the slab's header room before `out` and
  // `in`: one buffer each way.
  int exchange(const GateHeader &mine, const uint8_t *out, uint8_t *in, uint64_t bytes,
               uint64_t started, uint64_t meet_ns, uint64_t progress_ns, Error &err,
               bool room = false) {
    uint8_t own[wire::kGateHeaderBytes];
    uint8_t *shdr = room ? const_cast<uint8_t *>(out) - wire::kGateHeaderBytes : own;
    wire::encode_gate_header(mine, shdr);
    // The step reads the socket itself, so a closed peer normally shows as
    // EOF there; the watch covers a peer that is gone while neither
    // direction can move.
    os::PeerWatch watch;
    watch.watch_socket(link_.socket(kPeer), what_);
    talk::watch_peer(watch, cfg_.peer);
    uint8_t *dst[2] = {nullptr, in};
    const uint8_t *src[2] = {out, out};
    transport::GateStep g;
    g.mine = &mine;
    g.dst = dst;
    g.room = room;
    g.start_ns = started;
    g.meet_ns = meet_ns;
    g.progress_ns = progress_ns;
    g.watch = &watch;
    g.peer = cfg_.peer;
    transport::StepHeader h{shdr, wire::kGateHeaderBytes, mine.seq, bytes, nullptr};
    h.gate = &g;
    const void *views[2];
    const int rc = link_.step(h, -1, src, views, err);
    seen_ns_ = g.seen_ns;
    if (rc == DS4TP_OK) return rc;
    using How = transport::StepEnd::How;
    const transport::StepEnd &e = g.end;
    const uint64_t total = wire::kGateHeaderBytes + bytes;
    switch (e.how) {
      case How::kNone: return rc;  // the peer's header: worded by its check
      case How::kClosed: return closed(mine, e.got, total, err);
      case How::kIo: return io_fail(mine, e.sys_errno, e.sent, e.got, total, err);
      case How::kTimeout:
        if (!e.met && cfg_.peer != nullptr) return never_reached(mine, meet_ns, err);
        return timeout(mine, e.met ? progress_ns : meet_ns, e.sent, e.got, total, err);
      case How::kWatch:
        return watch.silent() ? silent(mine, watch, e.got, total, err)
                              : closed(mine, e.got, total, err);
    }
    return rc;
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
                   "peer closed the {} during {} (layer {}, {} {}, seq {}; "
                   "received {} of {} bytes)",
                   what_, wire::gate_kind_name(m.kind), m.layer,
                   m.kind == uint16_t(GateKind::Batch) ? "rows" : "gate", m.aux, m.seq, got,
                   total);
  }

  int io_fail(const GateHeader &m, int e, uint64_t sent, uint64_t got, uint64_t total,
              Error &err) {
    int code = (e == EPIPE || e == ECONNRESET || e == ENOTCONN) ? DS4TP_EPEERCLOSED
                                                                 : DS4TP_EIO;
    return err.set(code,
                   "the {} failed during {} (layer {}, seq {}): {} (sent {} "
                   "and received {} of {} bytes)",
                   what_, wire::gate_kind_name(m.kind), m.layer, m.seq, std::strerror(e),
                   sent, got, total);
  }

  int timeout(const GateHeader &m, uint64_t limit_ns, uint64_t sent, uint64_t got,
              uint64_t total, Error &err) {
    return err.set(DS4TP_ETIMEDOUT,
                   "{} (layer {}, {} {}, seq {}) timed out on the {}: no progress from the "
                   "peer for {} ms (sent {} and received {} of {} bytes); the peer is "
                   "stalled or not at this gate",
                   wire::gate_kind_name(m.kind), m.layer,
                   m.kind == uint16_t(GateKind::Batch) ? "rows" : "gate", m.aux, m.seq, what_,
                   limit_ns / 1000000, sent, got, total);
  }

  DataConfig cfg_;
  tcp::BigPlan big_;
  const char *what_;  // the link in messages: "data connection", "rail 1 link"
  tcp::Mesh link_;  // its wait policy's adaptive window is learned across gates
  uint8_t *base_ = nullptr;
  slab::Layout layout_;
};

}  // namespace

std::unique_ptr<Transport> make_tcp_transport(net::Fd fd, const DataConfig &cfg,
                                              const tcp::BigPlan &big, const char *link) {
  return std::make_unique<TcpTransport>(std::move(fd), cfg, big, link);
}

}  // namespace ds4tp
