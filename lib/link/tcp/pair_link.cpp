// A tcp pair's gates (pair_link.hpp): the pair's watch around a gate's
// step, big gates in alternating rounds where the plan says so, and the
// gate's failure in words.
#include "link/tcp/pair_link.hpp"

#include <cerrno>
#include <cstring>

#include "os/wait.hpp"
#include "talk/peer_state.hpp"
#include "link/tcp/group_link.hpp"
#include "wire/gate_header.hpp"

namespace ds4tp::tcp {
namespace {

using wire::GateHeader;
using wire::GateKind;

static_assert(slab::kGateRoom >= wire::kGateHeaderBytes, "row slots hold a gate header");

// After a hang-up, bytes the peer sent before it still drain this long.
constexpr uint64_t kGoneGraceNs = 2000000;

// A pair's gate is a step of a two-member mesh: this rank is member 0,
// the peer member 1.
constexpr int kSelf = 0, kPeer = 1;

std::vector<net::Fd> pair_fds(net::Fd fd) {
  std::vector<net::Fd> fds(2);
  fds[kPeer] = std::move(fd);
  return fds;
}

os::WaitPolicy with_spin(const DataConfig &cfg) {
  os::WaitPolicy p;
  p.spin_ns = cfg.spin_ns;
  p.grace_ns = kGoneGraceNs;
  p.tally = cfg.tally;
  return p;
}

const char *aux_name(const GateHeader &m) {
  return m.kind == uint16_t(GateKind::Batch) ? "rows" : "gate";
}

}  // namespace

std::unique_ptr<link::Link> make_pair_link(net::Fd fd, const DataConfig &cfg, const BigPlan &big,
                                           const char *what) {
  auto m = std::make_unique<Mesh>(pair_fds(std::move(fd)), kSelf, 0, cfg.gate_timeout_ns,
                                  with_spin(cfg), cfg.adaptive_spin);
  m->pair_ = std::make_unique<Mesh::PairGates>(Mesh::PairGates{cfg, big, what});
  return m;
}

int Mesh::gate_step(Step &s, Error &err) {
  const PairGates &p = *pair_;
  const GateHeader &mine = *s.gate;
  if (mine.kind == uint16_t(GateKind::Big) && p.big.mode == BigMode::Alternate)
    return alternate_exchange({socket(kPeer), &p.cfg, &policy_, s.start_ns, &s.seen_ns, p.what},
                              p.big, mine, s.src[kPeer], s.dst[kPeer], s.body, err);
  // The step reads the socket itself, so a closed peer normally shows as
  // EOF there; the watch covers a peer that is gone while neither
  // direction can move.
  os::PeerWatch watch;
  watch.watch_socket(socket(kPeer), p.what);
  talk::watch_peer(watch, s.peer);
  s.watch = &watch;
  const int rc = run(s, err);
  s.watch = nullptr;
  if (rc == DS4TP_OK) return rc;
  using How = link::End::How;
  const link::End &e = s.end;
  const uint64_t total = wire::kGateHeaderBytes + s.body;
  switch (e.how) {
    case How::kNone: return rc;  // the peer's header: worded by its check
    case How::kClosed: return closed(mine, e.got, total, err);
    case How::kIo: {
      const int code = (e.sys_errno == EPIPE || e.sys_errno == ECONNRESET ||
                        e.sys_errno == ENOTCONN)
                           ? DS4TP_EPEERCLOSED
                           : DS4TP_EIO;
      return err.set(code,
                     "the {} failed during {} (layer {}, seq {}): {} (sent {} "
                     "and received {} of {} bytes)",
                     p.what, wire::gate_kind_name(mine.kind), mine.layer, mine.seq,
                     std::strerror(e.sys_errno), e.sent, e.got, total);
    }
    case How::kTimeout:
      if (!e.met && s.peer != nullptr)
        return err.set(DS4TP_ETIMEDOUT,
                       "{} (layer {}, {} {}, seq {}): {}, but it never reached this gate in {} "
                       "ms (peer_arrival_timeout_ms, at least the gate's progress deadline)",
                       wire::gate_kind_name(mine.kind), mine.layer, aux_name(mine), mine.aux,
                       mine.seq, s.peer->where_peer_is(), s.arrival_ns / 1000000);
      return err.set(DS4TP_ETIMEDOUT,
                     "{} (layer {}, {} {}, seq {}) timed out on the {}: no progress from the "
                     "peer for {} ms (sent {} and received {} of {} bytes); the peer is "
                     "stalled or not at this gate",
                     wire::gate_kind_name(mine.kind), mine.layer, aux_name(mine), mine.aux,
                     mine.seq, p.what, (e.met ? s.progress_ns : s.arrival_ns) / 1000000, e.sent,
                     e.got, total);
    case How::kWatch:
      if (!watch.silent()) return closed(mine, e.got, total, err);
      return err.set(DS4TP_ETIMEDOUT, "{} during {} (layer {}, {} {}, seq {}; received {} of {} "
                     "bytes)",
                     watch.why(), wire::gate_kind_name(mine.kind), mine.layer, aux_name(mine),
                     mine.aux, mine.seq, e.got, total);
  }
  return rc;
}

int Mesh::closed(const GateHeader &m, uint64_t got, uint64_t total, Error &err) const {
  return err.set(DS4TP_EPEERCLOSED,
                 "peer closed the {} during {} (layer {}, {} {}, seq {}; received {} of {} "
                 "bytes)",
                 pair_->what, wire::gate_kind_name(m.kind), m.layer, aux_name(m), m.aux, m.seq,
                 got, total);
}

}  // namespace ds4tp::tcp
