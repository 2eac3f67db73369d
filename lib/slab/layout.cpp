#include "slab/layout.hpp"

namespace ds4tp::slab {

namespace {
uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

bool compute_layout(uint32_t n_layer, uint32_t n_embd, Layout &l) {
  if (n_layer == 0 || n_embd == 0 || n_layer > kMaxLayers || n_embd > kMaxEmbd)
    return false;
  l = Layout{};
  l.slots = n_layer * 2;
  l.batch_gates = n_layer * kBatchGatesPerLayer;
  l.vec_bytes = uint64_t(n_embd) * 4;
  l.vec_stride = align_up(l.vec_bytes, kVectorAlign);
  l.slot_stride = kGateRoom + l.vec_stride;
  l.batch_gate_stride = uint64_t(l.batch_rows) * l.vec_stride;

  uint64_t at = 0;
  auto region = [&](uint64_t bytes) {
    uint64_t start = align_up(at, kRegionAlign);
    at = start + bytes;
    return start;
  };
  l.out = region(uint64_t(l.slots) * l.slot_stride);
  l.in = region(uint64_t(l.slots) * l.slot_stride);
  l.in_seq = region(uint64_t(l.slots) * l.flag_stride);
  l.token = region(64);
  l.gpu_flags = region(uint64_t(l.slots) * l.flag_stride);
  l.gpu_release = region(uint64_t(l.slots) * l.flag_stride);
  l.batch_out = region(uint64_t(l.batch_gates) * l.batch_gate_stride);
  l.batch_in = region(uint64_t(l.batch_gates) * l.batch_gate_stride);
  l.big_out = region(l.big_staging);
  l.big_in = region(l.big_staging);
  l.total = align_up(at, kRegionAlign);
  return true;
}

}  // namespace ds4tp::slab
