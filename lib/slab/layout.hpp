// Slab layout: where every region lives inside the engine's slab. Pure.
//
// Regions, in order, each starting on a 4096-byte boundary:
//   out vectors    slots * slot_stride  this rank's partials
//   in vectors     slots * slot_stride  the peer's partials
//   in seq flags   slots * 64           seq of the landed in vector
//   token slot     64                   {u64 seq, i32 token}
//   gpu flags      slots * 64           engine "gate reached" words
//   gpu release    slots * 64           gate service "gate done" words
//   batch out      batch_gates * rows * vec_stride
//   batch in       same
//   big out        big staging bytes    pipelined big-gate chunks
//   big in         same
// Flag words sit 64 bytes apart so a writer and a spinning reader never
// share a cache line. A row-gate slot is kGateRoom bytes the library owns,
// then the vector: the tcp transport writes a gate's header there, so
// header and payload leave (and land) as one contiguous buffer. Batch rows
// stay vec_stride apart with no room: engines lay them out back to back.
#pragma once

#include <cstdint>

namespace ds4tp::slab {

constexpr uint64_t kRegionAlign = 4096;
constexpr uint64_t kVectorAlign = 64;
constexpr uint64_t kFlagStride = 64;
constexpr uint64_t kGateRoom = 64;  // >= wire::kGateHeaderBytes, keeps vectors aligned
constexpr uint32_t kBatchRows = 8;
constexpr uint32_t kBatchGatesPerLayer = 2;
constexpr uint64_t kBigStagingBytes = 4ull << 20;
// Limits that keep every offset far from 64-bit overflow.
constexpr uint32_t kMaxLayers = 1u << 16;
constexpr uint32_t kMaxEmbd = 1u << 22;

struct Layout {
  uint32_t slots = 0;
  uint32_t batch_gates = 0;
  uint32_t batch_rows = kBatchRows;
  uint64_t vec_bytes = 0;
  uint64_t vec_stride = 0;   // batch rows
  uint64_t slot_stride = 0;  // row-gate slots: kGateRoom + vec_stride
  uint64_t flag_stride = kFlagStride;
  uint64_t out = 0, in = 0, in_seq = 0, token = 0, gpu_flags = 0, gpu_release = 0;
  uint64_t batch_out = 0, batch_in = 0, batch_gate_stride = 0;
  uint64_t big_out = 0, big_in = 0, big_staging = kBigStagingBytes;
  uint64_t total = 0;

  uint64_t out_vec(uint32_t slot) const { return out + kGateRoom + uint64_t(slot) * slot_stride; }
  uint64_t in_vec(uint32_t slot) const { return in + kGateRoom + uint64_t(slot) * slot_stride; }
  uint64_t in_seq_flag(uint32_t slot) const { return in_seq + uint64_t(slot) * flag_stride; }
  uint64_t gpu_flag(uint32_t slot) const { return gpu_flags + uint64_t(slot) * flag_stride; }
  uint64_t gpu_release_flag(uint32_t slot) const {
    return gpu_release + uint64_t(slot) * flag_stride;
  }
  uint64_t batch_out_gate(uint32_t index) const {
    return batch_out + uint64_t(index) * batch_gate_stride;
  }
  uint64_t batch_in_gate(uint32_t index) const {
    return batch_in + uint64_t(index) * batch_gate_stride;
  }
};

// False when n_layer or n_embd is 0 or above the limits.
bool compute_layout(uint32_t n_layer, uint32_t n_embd, Layout &out);

// True when the `a_bytes` at `a` and the `b_bytes` at `b` share a byte
// (a big gate's buffers, each other or a staging region).
inline bool ranges_overlap(const void *a, uint64_t a_bytes, const void *b, uint64_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

}  // namespace ds4tp::slab
