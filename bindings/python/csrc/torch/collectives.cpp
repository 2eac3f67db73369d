// The collectives beside all_reduce, all_gather, broadcast and barrier
// (process_group.cpp): reduce, gather, scatter, reduce_scatter (list and
// tensor forms) and all_to_all (single tensor and list forms), each its
// ds4tp_group_* call. Tensors lying where the library wants them go as
// they are; others go through a block of their own (tensors.hpp). A group
// of one rank has no ds4tp group: the op is a local copy. Each starts a
// request (ProcessGroupDs4tp::launch); copies back into the caller's
// tensors wait for it.
#include <cstring>

#include <ATen/ATen.h>
#include <ds4tp/ds4tp.h>

#include "ops.hpp"
#include "process_group.hpp"
#include "tensors.hpp"

namespace ds4tp_torch {
namespace {

void same_dtype(const at::Tensor &a, const at::Tensor &b, const char *op, const char *an,
                const char *bn) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "ds4tp backend: ", op, ": ", an, " is ",
              dtype_name(a.scalar_type()), " but ", bn, " is ", dtype_name(b.scalar_type()));
}

void same_count(const std::vector<at::Tensor> &list, int64_t count, const char *op,
                const char *what) {
  for (size_t r = 0; r < list.size(); r++)
    TORCH_CHECK(list[r].numel() == count, "ds4tp backend: ", op, ": tensor ", r, " of the list ",
                "holds ", list[r].numel(), " elements, ", what, " ", count, " (equal parts only)");
}

// `out` as the library may write it: contiguous, and either `allowed` (a
// place the call may share with its input; null: none) or apart from
// [in, in + in_bytes).
at::Tensor writable(const at::Tensor &out, const uint8_t *allowed, const uint8_t *in,
                    uint64_t in_bytes) {
  at::Tensor o = out.contiguous();
  if (bytes_of(o) != allowed && overlaps(bytes_of(o), o.nbytes(), in, in_bytes))
    o = at::empty_like(out, at::MemoryFormat::Contiguous);
  return o;
}

// all_to_all_single's bytes and offsets per rank, from the split sizes (in
// rows of dim 0; none: equal splits).
void split_plan(const at::Tensor &t, const std::vector<int64_t> &splits, int n, const char *which,
                std::vector<uint64_t> &bytes, std::vector<uint64_t> &offsets) {
  TORCH_CHECK(t.dim() >= 1, "ds4tp backend: all_to_all_single: the ", which,
              " is a scalar; it splits along dim 0");
  const int64_t rows = t.size(0);
  const uint64_t row_bytes = rows ? t.nbytes() / uint64_t(rows) : 0;
  std::vector<int64_t> each(size_t(n), rows / n);
  if (splits.empty()) {
    TORCH_CHECK(rows % n == 0, "ds4tp backend: all_to_all_single: the ", which, "'s ", rows,
                " rows do not split evenly over ", n, " ranks: pass ", which, "_split_sizes");
  } else {
    TORCH_CHECK(splits.size() == size_t(n), "ds4tp backend: all_to_all_single: ",
                splits.size(), " ", which, "_split_sizes for ", n, " ranks");
    int64_t sum = 0;
    for (int64_t s : splits) {
      TORCH_CHECK(s >= 0, "ds4tp backend: all_to_all_single: ", which, "_split_sizes has ", s);
      sum += s;
    }
    TORCH_CHECK(sum == rows, "ds4tp backend: all_to_all_single: ", which, "_split_sizes add ",
                "up to ", sum, " rows; the ", which, " has ", rows);
    each = splits;
  }
  uint64_t at = 0;
  for (int r = 0; r < n; r++) {
    bytes.push_back(uint64_t(each[size_t(r)]) * row_bytes);
    offsets.push_back(at);
    at += bytes.back();
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::reduce(std::vector<at::Tensor> &tensors,
                                                         const c10d::ReduceOptions &opts) {
  at::Tensor &t = single(tensors, "reduce");
  const int dtype = reduce_dtype(t.scalar_type(), "reduce");
  const int op = reduce_op(opts.reduceOp, "reduce");
  check_root(opts.rootRank, "reduce");
  TORCH_CHECK(opts.rootTensor == 0, "ds4tp backend: reduce: one tensor per process");
  const int root = int(opts.rootRank);
  at::Tensor buf = t.contiguous();
  return launch(
      c10d::OpType::REDUCE, "reduce", {t}, {buf},
      [&](ds4tp_group_request **req) {
        return ds4tp_group_reduce_start(g_, buf.data_ptr(), uint64_t(buf.numel()), dtype, op,
                                        root, req);
      },
      getRank() == root ? copy_back(t, buf) : nullptr);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::_reduce_scatter_base(
    at::Tensor &output, at::Tensor &input, const c10d::ReduceScatterOptions &opts) {
  const char *name = "reduce_scatter_tensor";
  check_tensor(input, name);
  check_tensor(output, name);
  same_dtype(output, input, name, "output", "input");
  TORCH_CHECK(input.numel() == output.numel() * getSize(), "ds4tp backend: ", name, ": input ",
              "has ", input.numel(), " elements; ", getSize(), " ranks x ", output.numel(),
              " needed");
  const int dtype = reduce_dtype(input.scalar_type(), name);
  const int op = reduce_op(opts.reduceOp, name);
  at::Tensor in = input.contiguous();
  const uint64_t seg = output.nbytes();
  // In place: the output may be this rank's segment of the input.
  at::Tensor out = writable(output, bytes_of(in) + uint64_t(getRank()) * seg, bytes_of(in),
                            in.nbytes());
  return launch(
      c10d::OpType::_REDUCE_SCATTER_BASE, name, {output}, {in, out},
      [&](ds4tp_group_request **req) {
        return ds4tp_group_reduce_scatter_start(g_, in.data_ptr(), out.data_ptr(),
                                                uint64_t(out.numel()), dtype, op, req);
      },
      copy_back(output, out), [&] {
        if (seg) std::memmove(out.data_ptr(), in.data_ptr(), seg);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::reduce_scatter(
    std::vector<at::Tensor> &outputs, std::vector<std::vector<at::Tensor>> &inputs,
    const c10d::ReduceScatterOptions &opts) {
  at::Tensor &output = single(outputs, "reduce_scatter");
  std::vector<at::Tensor> &ins =
      one_list(inputs, size_t(getSize()), output.scalar_type(), "reduce_scatter");
  same_count(ins, output.numel(), "reduce_scatter", "the output");
  const int dtype = reduce_dtype(output.scalar_type(), "reduce_scatter");
  const int op = reduce_op(opts.reduceOp, "reduce_scatter");
  Block block(ins, true);  // the inputs' own memory where they lie end to end
  const uint64_t seg = output.nbytes();
  at::Tensor out =
      writable(output, block.data + uint64_t(getRank()) * seg, block.data, block.total);
  return launch(
      c10d::OpType::REDUCE_SCATTER, "reduce_scatter", {output}, joined(ins, {block.flat, out}),
      [&](ds4tp_group_request **req) {
        return ds4tp_group_reduce_scatter_start(g_, block.data, out.data_ptr(),
                                                uint64_t(out.numel()), dtype, op, req);
      },
      copy_back(output, out), [&] {
        if (seg) std::memmove(out.data_ptr(), block.data, seg);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::gather(
    std::vector<std::vector<at::Tensor>> &outputs, std::vector<at::Tensor> &inputs,
    const c10d::GatherOptions &opts) {
  at::Tensor &in = single(inputs, "gather");
  check_root(opts.rootRank, "gather");
  const int root = int(opts.rootRank);
  const bool at_root = getRank() == root;
  std::vector<at::Tensor> none;
  std::vector<at::Tensor> *outs = &none;
  if (at_root) {
    outs = &one_list(outputs, size_t(getSize()), in.scalar_type(), "gather");
    same_count(*outs, in.numel(), "gather", "the input");
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "ds4tp backend: gather: only the root (dst) passes gather_list");
  }
  Block block(*outs, false);  // the root's outputs; none elsewhere
  at::Tensor src = apart(in, block.data, block.total);
  const uint64_t bytes = in.nbytes();
  return launch(
      c10d::OpType::GATHER, "gather", *outs, {src, block.flat},
      [&](ds4tp_group_request **req) {
        return ds4tp_group_gather_start(g_, src.data_ptr(), at_root ? block.data : nullptr, bytes,
                                        root, req);
      },
      block.unpack_later(*outs), [&] {
        if (bytes) std::memmove(block.data, src.data_ptr(), bytes);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::scatter(
    std::vector<at::Tensor> &outputs, std::vector<std::vector<at::Tensor>> &inputs,
    const c10d::ScatterOptions &opts) {
  at::Tensor &output = single(outputs, "scatter");
  check_root(opts.rootRank, "scatter");
  const int root = int(opts.rootRank);
  const bool at_root = getRank() == root;
  std::vector<at::Tensor> none;
  std::vector<at::Tensor> *ins = &none;
  if (at_root) {
    ins = &one_list(inputs, size_t(getSize()), output.scalar_type(), "scatter");
    same_count(*ins, output.numel(), "scatter", "the output");
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "ds4tp backend: scatter: only the root (src) passes scatter_list");
  }
  Block block(*ins, true);  // the root's inputs; none elsewhere
  at::Tensor out = writable(output, nullptr, block.data, block.total);
  const uint64_t bytes = output.nbytes();
  return launch(
      c10d::OpType::SCATTER, "scatter", {output}, joined(*ins, {block.flat, out}),
      [&](ds4tp_group_request **req) {
        return ds4tp_group_scatter_start(g_, at_root ? block.data : nullptr, out.data_ptr(),
                                         bytes, root, req);
      },
      copy_back(output, out), [&] {
        if (bytes) std::memmove(out.data_ptr(), block.data, bytes);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::alltoall_base(
    at::Tensor &output, at::Tensor &input, std::vector<int64_t> &output_splits,
    std::vector<int64_t> &input_splits, const c10d::AllToAllOptions &) {
  const char *name = "all_to_all_single";
  check_tensor(input, name);
  check_tensor(output, name);
  same_dtype(output, input, name, "output", "input");
  const int n = getSize();
  std::vector<uint64_t> send_bytes, send_offsets, recv_bytes, recv_offsets;
  split_plan(input, input_splits, n, "input", send_bytes, send_offsets);
  split_plan(output, output_splits, n, "output", recv_bytes, recv_offsets);
  at::Tensor out = output.contiguous();
  at::Tensor in = apart(input, bytes_of(out), out.nbytes());
  if (!g_)
    TORCH_CHECK(send_bytes[0] == recv_bytes[0], "ds4tp backend: ", name, ": this rank sends ",
                "itself ", send_bytes[0], " bytes and expects ", recv_bytes[0]);
  // The start copies the byte counts and offsets; the tensors stay with the Work.
  return launch(
      c10d::OpType::ALLTOALL_BASE, name, {output}, {in, out},
      [&](ds4tp_group_request **req) {
        return ds4tp_group_all_to_all_v_start(g_, in.data_ptr(), send_bytes.data(),
                                              send_offsets.data(), out.data_ptr(),
                                              recv_bytes.data(), recv_offsets.data(), req);
      },
      copy_back(output, out), [&] {
        if (send_bytes[0]) std::memmove(out.data_ptr(), in.data_ptr(), send_bytes[0]);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::alltoall(std::vector<at::Tensor> &outputs,
                                                           std::vector<at::Tensor> &inputs,
                                                           const c10d::AllToAllOptions &) {
  const size_t n = size_t(getSize());
  TORCH_CHECK(inputs.size() == n && outputs.size() == n, "ds4tp backend: all_to_all: ",
              inputs.size(), " inputs and ", outputs.size(), " outputs for ", n, " ranks");
  for (size_t r = 0; r < n; r++) {
    check_tensor(inputs[r], "all_to_all");
    check_tensor(outputs[r], "all_to_all");
    same_dtype(inputs[r], inputs[0], "all_to_all", "an input", "input 0");
    same_dtype(outputs[r], inputs[0], "all_to_all", "an output", "input 0");
  }
  Block recv(outputs, false);  // the outputs' own memory where they lie end to end
  Block send(inputs, true);
  if (overlaps(send.data, send.total, recv.data, recv.total)) send = Block(inputs, true, true);
  const size_t me = size_t(getRank());
  if (!g_)
    TORCH_CHECK(send.bytes[me] == recv.bytes[me], "ds4tp backend: all_to_all: this rank sends ",
                "itself ", send.bytes[me], " bytes and expects ", recv.bytes[me]);
  return launch(
      c10d::OpType::ALLTOALL, "all_to_all", outputs, joined(inputs, {send.flat, recv.flat}),
      [&](ds4tp_group_request **req) {
        return ds4tp_group_all_to_all_v_start(g_, send.data, send.bytes.data(),
                                              send.offsets.data(), recv.data, recv.bytes.data(),
                                              recv.offsets.data(), req);
      },
      recv.unpack_later(outputs), [&] {
        if (send.bytes[me]) std::memmove(recv.data, send.data, send.bytes[me]);
      });
}

}  // namespace ds4tp_torch
