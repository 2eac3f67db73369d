// The tensor checks and staging the ops share: what the library takes is
// contiguous memory that does not overlap unless a call allows it, so a
// tensor that is not that way goes through a copy, and one that is goes
// to the library as it is.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/ATen.h>

namespace ds4tp_torch {

// A CPU, dense tensor, or throws naming `op` and the way round it.
void check_tensor(const at::Tensor &t, const char *op);

// torch hands one tensor per process in a list (the older one-per-GPU form).
at::Tensor &single(std::vector<at::Tensor> &ts, const char *op);

// The list of one process (outputs of gather, inputs of scatter, ...):
// `n` tensors, each checked, each of `dtype`.
std::vector<at::Tensor> &one_list(std::vector<std::vector<at::Tensor>> &lists, size_t n,
                                  c10::ScalarType dtype, const char *op);

inline const uint8_t *bytes_of(const at::Tensor &t) {
  return static_cast<const uint8_t *>(t.data_ptr());
}
inline uint8_t *bytes_of(at::Tensor &t) { return static_cast<uint8_t *>(t.data_ptr()); }

// Whether [p, p + n) and [q, q + m) share a byte.
inline bool overlaps(const uint8_t *p, uint64_t n, const uint8_t *q, uint64_t m) {
  return n && m && p < q + m && q < p + n;
}

// `t` contiguous and apart from [q, q + m): itself where it already is,
// else a copy.
at::Tensor apart(const at::Tensor &t, const uint8_t *q, uint64_t m);

// A list of tensors as one block of memory, parts in list order: their own
// memory where they lie end to end (each contiguous, each right after the
// one before), else (or always, with `own`) a new block, the parts copied
// in when `fill`.
struct Block {
  at::Tensor flat;  // the new block; undefined where direct
  uint8_t *data = nullptr;
  bool direct = true;
  std::vector<uint64_t> bytes, offsets;  // per part
  uint64_t total = 0;                    // bytes

  Block(const std::vector<at::Tensor> &parts, bool fill, bool own = false);
  // Copies the block's parts into `parts` (nothing to do where direct).
  void unpack(std::vector<at::Tensor> &parts) const;
  // unpack(parts) for once the op is done (null where direct); it holds
  // the block and the parts.
  std::function<void()> unpack_later(std::vector<at::Tensor> parts) const;
};

// `dst.copy_(src)` for once the op is done: null where `src` is `dst`
// (the library wrote the tensor itself).
std::function<void()> copy_back(const at::Tensor &dst, const at::Tensor &src);

// `a`, then `b`: the tensors a request uses.
std::vector<at::Tensor> joined(std::vector<at::Tensor> a, const std::vector<at::Tensor> &b);

}  // namespace ds4tp_torch
