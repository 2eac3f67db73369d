// A two-member link whose fast path moves a pair's gates by their shape
// (shm pushes, rdma windows, a pair's rails): step() takes a pair's gate
// step apart once, into the row, batch or big move the backend runs. In a
// pair's step this rank is member 0 and the peer member 1; the gate's
// regions are src[1] (this rank's partial) and dst[1] (where the peer's
// lands), in the bound slab for row and batch gates (big gates: the
// caller's memory). A group's step is refused: N members run on a
// group's link of the same backend.
#pragma once

#include "link/link.hpp"

namespace ds4tp::link {

constexpr int kPeerMember = 1;

class PairLink : public Link {
 public:
  int step(Step &s, Error &err) final {
    if (s.gate == nullptr)
      return err.set(DS4TP_EINVAL, "a group's step is not a gate of a pair's {} link", name());
    const wire::GateHeader &g = *s.gate;
    seen_ns_ = 0;
    int rc;
    if (g.kind == uint16_t(wire::GateKind::Row))
      rc = row(g.layer, g.aux, g.layer * kGatesPerLayer + g.aux, g.seq, s.start_ns, err);
    else if (g.kind == uint16_t(wire::GateKind::Batch))
      rc = batch(g.layer, g.aux, g.seq, s.start_ns, err);
    else
      rc = big(g.layer, g.seq, s.src[kPeerMember], s.dst[kPeerMember], s.body, s.start_ns, err);
    s.seen_ns = seen_ns_;
    return rc;
  }
  // A pair ends through its failure latch and its liveness watch; the
  // peer sees a closed link when the pair is freed.
  void abort(int, int) override {}

 protected:
  static constexpr uint32_t kGatesPerLayer = 2;
  // Row gate: out[slot] to the peer's in[slot]; returns once the peer's
  // partial for the same (layer, gate, seq) landed in in[slot]. Deadlines
  // count from `start_ns`, the caller's clock read as the gate began.
  virtual int row(uint32_t layer, uint32_t gate, uint32_t slot, uint64_t seq, uint64_t start_ns,
                  Error &err) = 0;
  // Batch gate: `rows` vectors of batch gate `index`.
  virtual int batch(uint32_t index, uint32_t rows, uint64_t seq, uint64_t start_ns,
                    Error &err) = 0;
  // Big gate: `bytes` from `out` to the peer, the peer's into `in`.
  virtual int big(uint32_t layer, uint64_t seq, const void *out, void *in, uint64_t bytes,
                  uint64_t start_ns, Error &err) = 0;
  // When the gate first saw the peer's data (Step::seen_ns); each gate sets it.
  uint64_t seen_ns_ = 0;
};

}  // namespace ds4tp::link
