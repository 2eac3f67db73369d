#include "tensors.hpp"

#include <cstring>

#include "ops.hpp"

namespace ds4tp_torch {

void check_tensor(const at::Tensor &t, const char *op) {
  TORCH_CHECK(t.device().is_cpu(), "ds4tp backend: ", op, " takes CPU tensors; this one is on ",
              t.device().str(), " (move it with t.cpu(), or use the nccl backend for GPU tensors)");
  TORCH_CHECK(t.layout() == c10::kStrided, "ds4tp backend: ", op,
              " takes dense tensors; this one is ", t.layout(), " (t.to_dense())");
}

at::Tensor &single(std::vector<at::Tensor> &ts, const char *op) {
  TORCH_CHECK(ts.size() == 1, "ds4tp backend: ", op, " takes one tensor per process, not ",
              ts.size());
  check_tensor(ts[0], op);
  return ts[0];
}

std::vector<at::Tensor> &one_list(std::vector<std::vector<at::Tensor>> &lists, size_t n,
                                  c10::ScalarType dtype, const char *op) {
  TORCH_CHECK(lists.size() == 1, "ds4tp backend: ", op, " takes one list of tensors per ",
              "process, not ", lists.size());
  std::vector<at::Tensor> &list = lists[0];
  TORCH_CHECK(list.size() == n, "ds4tp backend: ", op, ": ", list.size(), " tensors in the list ",
              "for ", n, " ranks");
  for (size_t r = 0; r < n; r++) {
    check_tensor(list[r], op);
    TORCH_CHECK(list[r].scalar_type() == dtype, "ds4tp backend: ", op, ": tensor ", r,
                " of the list is ", dtype_name(list[r].scalar_type()), ", the other one ",
                dtype_name(dtype));
  }
  return list;
}

at::Tensor apart(const at::Tensor &t, const uint8_t *q, uint64_t m) {
  at::Tensor c = t.contiguous();
  if (overlaps(bytes_of(c), c.nbytes(), q, m)) c = c.clone();
  return c;
}

Block::Block(const std::vector<at::Tensor> &parts, bool fill, bool own) {
  direct = !own;
  for (const auto &t : parts) {
    const uint64_t b = t.nbytes();
    direct = direct && t.is_contiguous() &&
             (b == 0 || parts.front().nbytes() == 0 ||
              bytes_of(t) == bytes_of(parts.front()) + total);
    offsets.push_back(total);
    bytes.push_back(b);
    total += b;
  }
  // Parts of no bytes lie anywhere; the first part with bytes fixes the
  // block's start (an empty first part has no address to go by).
  if (direct && !parts.empty() && parts.front().nbytes() == 0 && total != 0) direct = false;
  if (direct) {
    data = parts.empty() ? nullptr : static_cast<uint8_t *>(parts.front().data_ptr());
    return;
  }
  flat = at::empty({int64_t(total)}, at::TensorOptions().dtype(at::kByte));
  data = static_cast<uint8_t *>(flat.data_ptr());
  if (!fill) return;
  for (size_t i = 0; i < parts.size(); i++) {
    if (!bytes[i]) continue;
    at::Tensor c = parts[i].contiguous();
    std::memcpy(data + offsets[i], c.data_ptr(), bytes[i]);
  }
}

void Block::unpack(std::vector<at::Tensor> &parts) const {
  if (direct) return;
  for (size_t i = 0; i < parts.size(); i++) {
    if (!bytes[i]) continue;
    at::Tensor &t = parts[i];
    t.copy_(at::from_blob(data + offsets[i], t.sizes(), t.options()));
  }
}

std::function<void()> Block::unpack_later(std::vector<at::Tensor> parts) const {
  if (direct) return nullptr;
  return [block = *this, parts = std::move(parts)]() mutable { block.unpack(parts); };
}

std::function<void()> copy_back(const at::Tensor &dst, const at::Tensor &src) {
  if (src.is_same(dst)) return nullptr;
  return [dst, src]() mutable { dst.copy_(src); };
}

std::vector<at::Tensor> joined(std::vector<at::Tensor> a, const std::vector<at::Tensor> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace ds4tp_torch
