// Pair gates: the engine's entry points, the checks every gate makes
// before it reaches the transport, the staging hooks around it, and the
// one place a gate is timed for lib/stats.
#include "pair/pair.hpp"

#include "common/clock.hpp"
#include "link/gate_step.hpp"
#include "wire/gate_header.hpp"

namespace ds4tp {

// The gate's one start clock read: the link's deadlines count from it (it
// reads none to begin) and it is the stats' start; Stats reads the end
// only when timing is on, and the link reports when the peer's data first
// showed (Step::seen_ns) from a read its wait made anyway.
int Pair::timed_gate(int kind, link::GateStep &g, uint32_t a, Error &err) {
  const uint64_t t0 = now_ns();
  g.waits(data_config_, t0);
  peer_state_.entering();
  const int rc = link_->step(g.s, err);
  const uint64_t t1 =
      stats_.gate_done(kind, a, g.h.seq, g.h.bytes, stats_.timed() ? t0 : 0, g.s.seen_ns, rc);
  flight_.record({kind, a, g.h.seq, g.h.bytes, t0, t1, g.s.seen_ns, rc});
  if (rc == DS4TP_OK) peer_state_.completed(g.h.kind, a, g.h.seq);
  return rc;
}

int Pair::gate(uint32_t layer, uint32_t gate, uint64_t seq, Error &err) {
  if (int rc = refuse_if_service(err)) return rc;
  return settle(row_exchange(layer, gate, seq, err), err);
}

int Pair::batch_gate(uint32_t index, uint32_t rows, uint64_t seq, Error &err) {
  if (int rc = refuse_if_service(err)) return rc;
  return settle(batch_exchange(index, rows, seq, err), err);
}

int Pair::big_gate(uint32_t layer, uint64_t seq, const void *out, void *in, uint64_t bytes,
                   Error &err) {
  if (int rc = refuse_if_service(err)) return rc;
  return settle(big_exchange(layer, seq, out, in, bytes, err), err);
}

int Pair::row_exchange(uint32_t layer, uint32_t gate, uint64_t seq, Error &err) {
  if (slab_ == nullptr) return err.set(DS4TP_ESTATE, "gate before ds4tp_attach_slab");
  if (layer >= layout_.slots / 2 || gate >= DS4TP_GATES_PER_LAYER)
    return err.set(DS4TP_EINVAL, "gate (layer {}, gate {}) is outside {} layers x 2 gates",
                   layer, gate, layout_.slots / 2);
  uint32_t slot = layer * 2 + gate;
  const uint64_t last = last_row_seq_.load(std::memory_order_relaxed);
  if (seq != last + 1)
    return err.set(DS4TP_EINVAL,
                   "row gate seq {} for layer {} gate {}: seqs must rise by one per gate "
                   "(last was {})",
                   seq, layer, gate, last);
  int64_t want = slab::slot_for_seq(schedule_, seq);
  if (want != int64_t(slot))
    return err.set(DS4TP_EINVAL,
                   "row gate seq {} must hit slot {} (layer {}, gate {}) by the identity's "
                   "schedule, but the call is for layer {} gate {}",
                   seq, want, want / 2, want % 2, layer, gate);
  last_row_seq_.store(seq, std::memory_order_relaxed);
  gates_started_ = true;
  if (hooks_.before_exchange) {
    int h = hooks_.before_exchange(Stage::Row, layer, gate, seq, slab_ + layout_.out_vec(slot),
                                   layout_.vec_bytes);
    if (h != 0) return hook_failed("before_exchange", h, "row", layer, gate, seq, err);
  }
  link::GateStep g;
  g.row(slab_, layout_, layer, gate, seq);
  int rc = timed_gate(stats::kRow, g, layer, err);
  if (rc == DS4TP_OK && hooks_.after_exchange) {
    int h = hooks_.after_exchange(Stage::Row, layer, gate, seq, slab_ + layout_.in_vec(slot),
                                  layout_.vec_bytes);
    if (h != 0) return hook_failed("after_exchange", h, "row", layer, gate, seq, err);
  }
  return rc;
}

int Pair::batch_exchange(uint32_t index, uint32_t rows, uint64_t seq, Error &err) {
  if (slab_ == nullptr) return err.set(DS4TP_ESTATE, "batch gate before ds4tp_attach_slab");
  if (index >= layout_.batch_gates)
    return err.set(DS4TP_EINVAL, "batch gate index {} is outside 0..{}", index,
                   layout_.batch_gates - 1);
  if (rows == 0 || rows > layout_.batch_rows)
    return err.set(DS4TP_EINVAL, "batch gate rows {} outside 1..{}", rows, layout_.batch_rows);
  if (seq == 0) return err.set(DS4TP_EINVAL, "batch gate seq must be nonzero");
  gates_started_ = true;
  const uint64_t bytes = uint64_t(rows - 1) * layout_.vec_stride + layout_.vec_bytes;
  if (hooks_.before_exchange) {
    int h = hooks_.before_exchange(Stage::Batch, index, rows, seq,
                                   slab_ + layout_.batch_out_gate(index), bytes);
    if (h != 0) return hook_failed("before_exchange", h, "batch", index, rows, seq, err);
  }
  link::GateStep g;
  g.batch(slab_, layout_, index, rows, seq);
  int rc = timed_gate(stats::kBatch, g, index, err);
  if (rc == DS4TP_OK && hooks_.after_exchange) {
    int h = hooks_.after_exchange(Stage::Batch, index, rows, seq,
                                  slab_ + layout_.batch_in_gate(index), bytes);
    if (h != 0) return hook_failed("after_exchange", h, "batch", index, rows, seq, err);
  }
  return rc;
}

int Pair::set_staging_hooks(StagingHooks hooks, Error &err) {
  if (service_->running())
    return err.set(DS4TP_ESTATE, "staging hooks cannot change while the gate service runs");
  if (gates_started_)
    return err.set(DS4TP_ESTATE,
                   "staging hooks must be set before the first row or batch gate (row gate "
                   "seq {} already ran)",
                   last_row_seq());
  hooks_ = std::move(hooks);
  return DS4TP_OK;
}

int Pair::hook_failed(const char *which, int value, const char *kind, uint32_t a, uint32_t b,
                      uint64_t seq, Error &err) {
  const bool row = kind[0] == 'r';
  return err.set(DS4TP_EIO,
                 "staging hook {} returned {} at {} gate ({} {}, {} {}, seq {}): the "
                 "engine's device copy failed",
                 which, value, kind, row ? "layer" : "index", a, row ? "gate" : "rows", b,
                 seq);
}

int Pair::big_exchange(uint32_t layer, uint64_t seq, const void *out, void *in,
                       uint64_t bytes, Error &err) {
  if (!connected_) return err.set(DS4TP_ESTATE, "big gate before ds4tp_connect");
  if (slab_ == nullptr) return err.set(DS4TP_ESTATE, "big gate before ds4tp_attach_slab");
  if (bytes > 0 && (out == nullptr || in == nullptr))
    return err.set(DS4TP_EINVAL, "big gate buffers must not be NULL");
  if (slab::ranges_overlap(out, bytes, in, bytes))
    return err.set(DS4TP_EINVAL, "big gate out and in buffers overlap");
  if (seq == 0) return err.set(DS4TP_EINVAL, "big gate seq must be nonzero");
  link::GateStep g;
  g.big(layer, seq, out, in, bytes);
  return timed_gate(stats::kBig, g, layer, err);
}

}  // namespace ds4tp
