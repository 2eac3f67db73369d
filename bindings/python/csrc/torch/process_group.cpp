#include "process_group.hpp"

#include <cstring>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ds4tp/ds4tp.h>

#include "ops.hpp"
#include "tensors.hpp"
#include "work.hpp"

namespace ds4tp_torch {
namespace {

// The all-gather's input as the library may take it: contiguous, and
// either this rank's own slot of `out` (the in-place form) or apart from
// `out` altogether.
at::Tensor gather_source(const at::Tensor &in, const uint8_t *out, uint64_t bytes, int rank,
                         int size) {
  at::Tensor src = in.contiguous();
  const uint8_t *p = bytes_of(src);
  if (p != out + uint64_t(rank) * bytes && overlaps(p, bytes, out, bytes * uint64_t(size)))
    src = src.clone();
  return src;
}

}  // namespace

ProcessGroupDs4tp::ProcessGroupDs4tp(int rank, int size, const Config &cfg)
    : c10d::ProcessGroup(rank, size) {
  TORCH_CHECK(size >= 1 && size <= 16, "ds4tp backend: a ds4tp group has 2..16 ranks (or 1, run ",
              "locally); this one has ", size, ": use Gloo for larger groups");
  init();  // torch's usage logging for the backend
  if (size == 1) return;
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.rank = rank;
  o.group_size = size;
  o.rendezvous_host = cfg.host.c_str();  // copied by ds4tp_group_new
  o.rendezvous_port = cfg.port;
  o.transport = cfg.transport;
  if (cfg.connect_timeout_ms >= 0) o.connect_timeout_ms = cfg.connect_timeout_ms;
  if (cfg.op_timeout_ms >= 0) o.op_timeout_ms = cfg.op_timeout_ms;
  if (cfg.peer_silence_ms >= 0) o.peer_silence_ms = cfg.peer_silence_ms;
  if (cfg.chunk_bytes >= 0) o.chunk_bytes = uint32_t(cfg.chunk_bytes);
  if (cfg.spin_us != -2) o.spin_us = cfg.spin_us;
  if (cfg.yield_us >= 0) o.yield_us = cfg.yield_us;
  const int rc = ds4tp_group_new(&g_, &o, nullptr);
  if (rc != DS4TP_OK)
    throw std::runtime_error(std::string("ds4tp backend: rank ") + std::to_string(rank) + " of " +
                             std::to_string(size) + " could not create its ds4tp group (" +
                             ds4tp_err_name(rc) + "): " + ds4tp_last_error());
}

ProcessGroupDs4tp::~ProcessGroupDs4tp() { ds4tp_group_free(g_); }

void ProcessGroupDs4tp::connect() {
  if (!g_) return;
  std::lock_guard<std::mutex> lock(mu_);
  const int rc = ds4tp_group_connect(g_);
  if (rc != DS4TP_OK) throw std::runtime_error(failure("bring-up", rc));
}

int ProcessGroupDs4tp::rendezvous_port() const { return g_ ? ds4tp_group_rendezvous_port(g_) : 0; }
int ProcessGroupDs4tp::transport() const { return g_ ? ds4tp_group_transport(g_) : 0; }
void ProcessGroupDs4tp::mark_failed() { ds4tp_group_mark_failed(g_); }

std::string ProcessGroupDs4tp::plan() {
  if (!g_) return "plan: one rank; collectives are local copies";
  std::lock_guard<std::mutex> lock(mu_);
  size_t need = 0;
  ds4tp_group_plan(g_, nullptr, 0, &need);
  std::string text(need + 1, '\0');
  const int rc = ds4tp_group_plan(g_, text.data(), text.size(), &need);
  if (rc != DS4TP_OK) throw std::runtime_error(failure("plan", rc));
  text.resize(need);
  return text;
}

std::string ProcessGroupDs4tp::failure(const char *op, int status) const {
  return std::string("ds4tp backend: ") + op + " failed on rank " + std::to_string(getRank()) +
         " of " + std::to_string(getSize()) + " (" + ds4tp_err_name(status) +
         "): " + ds4tp_group_errmsg(g_);
}

void ProcessGroupDs4tp::check_root(int64_t root, const char *op) const {
  TORCH_CHECK(root >= 0 && root < getSize(), "ds4tp backend: ", op, ": root ", root,
              " is not a rank of this group of ", getSize());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::launch(
    c10d::OpType type, const char *op, std::vector<at::Tensor> outputs,
    std::vector<at::Tensor> keep, const std::function<int(ds4tp_group_request **)> &start,
    std::function<void()> after, const std::function<void()> &local) {
  if (!g_) {  // one rank: the op is a local copy, done at return
    if (local) local();
    if (after) after();
    return c10::make_intrusive<DoneWork>(getRank(), type, std::move(outputs), nullptr);
  }
  ds4tp_group_request *req = nullptr;
  int rc = DS4TP_OK;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rc = start(&req);
  }
  if (rc != DS4TP_OK)
    return c10::make_intrusive<DoneWork>(
        getRank(), type, std::move(outputs),
        std::make_exception_ptr(std::runtime_error(failure(op, rc))));
  return c10::make_intrusive<RequestWork>(getRank(), getSize(), type, op, req, std::move(outputs),
                                          std::move(keep), std::move(after));
}

// ---- what libds4tp has: each op is its C call, no copy for a contiguous tensor

c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::allreduce(std::vector<at::Tensor> &tensors,
                                                            const c10d::AllreduceOptions &opts) {
  at::Tensor &t = single(tensors, "all_reduce");
  const int dtype = reduce_dtype(t.scalar_type(), "all_reduce");
  const int op = reduce_op(opts.reduceOp, "all_reduce");
  at::Tensor buf = t.contiguous();
  return launch(
      c10d::OpType::ALLREDUCE, "all_reduce", {t}, {buf},
      [&](ds4tp_group_request **req) {
        return ds4tp_group_all_reduce_start(g_, buf.data_ptr(), uint64_t(buf.numel()), dtype, op,
                                            req);
      },
      copy_back(t, buf));  // one rank: the sum is the tensor
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::_allgather_base(
    at::Tensor &output, at::Tensor &input, const c10d::AllgatherOptions &) {
  check_tensor(input, "_all_gather_base");
  check_tensor(output, "_all_gather_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "ds4tp backend: _all_gather_base: ",
              "output is ", dtype_name(output.scalar_type()), " but input is ",
              dtype_name(input.scalar_type()));
  TORCH_CHECK(output.numel() == input.numel() * getSize(), "ds4tp backend: _all_gather_base: ",
              "output has ", output.numel(), " elements; ", getSize(), " ranks x ", input.numel(),
              " needed");
  at::Tensor out = output.contiguous();
  const uint64_t bytes = input.nbytes();
  at::Tensor src = gather_source(input, bytes_of(out), bytes, getRank(), getSize());
  return launch(
      c10d::OpType::_ALLGATHER_BASE, "_all_gather_base", {output}, {out, src},
      [&](ds4tp_group_request **req) {
        return ds4tp_group_all_gather_start(g_, src.data_ptr(), out.data_ptr(), bytes, req);
      },
      copy_back(output, out), [&] { std::memmove(out.data_ptr(), src.data_ptr(), bytes); });
}

// Equal parts: ds4tp_group_all_gather (the input may be this rank's part
// of the outputs' block). Parts of different sizes (rank r's input fills
// output r): ds4tp_group_all_gather_v.
c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::allgather(
    std::vector<std::vector<at::Tensor>> &outputs, std::vector<at::Tensor> &inputs,
    const c10d::AllgatherOptions &) {
  at::Tensor &in = single(inputs, "all_gather");
  std::vector<at::Tensor> &outs =
      one_list(outputs, size_t(getSize()), in.scalar_type(), "all_gather");
  const int me = getRank();
  TORCH_CHECK(outs[me].numel() == in.numel(), "ds4tp backend: all_gather: output ", me,
              " (this rank's part) holds ", outs[me].numel(), " elements, the input ", in.numel());
  const uint64_t bytes = in.nbytes();
  Block block(outs, false);  // direct: the library fills the outputs
  bool even = true;
  for (uint64_t b : block.bytes) even = even && b == bytes;
  at::Tensor src = even ? gather_source(in, block.data, bytes, me, getSize())
                        : apart(in, block.data, block.total);
  return launch(
      c10d::OpType::ALLGATHER, "all_gather", outs, {src, block.flat},
      [&](ds4tp_group_request **req) {
        return even ? ds4tp_group_all_gather_start(g_, src.data_ptr(), block.data, bytes, req)
                    : ds4tp_group_all_gather_v_start(g_, src.data_ptr(), block.data,
                                                     block.bytes.data(), req);
      },
      block.unpack_later(outs), [&] {
        if (bytes) std::memmove(block.data, src.data_ptr(), bytes);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::broadcast(std::vector<at::Tensor> &tensors,
                                                            const c10d::BroadcastOptions &opts) {
  at::Tensor &t = single(tensors, "broadcast");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < getSize(), "ds4tp backend: broadcast: src ",
              opts.rootRank, " is not a rank of this group of ", getSize());
  TORCH_CHECK(opts.rootTensor == 0, "ds4tp backend: broadcast: one tensor per process");
  at::Tensor buf = t.contiguous();
  const int root = int(opts.rootRank);
  return launch(
      c10d::OpType::BROADCAST, "broadcast", {t}, {buf},
      [&](ds4tp_group_request **req) {
        return ds4tp_group_broadcast_start(g_, buf.data_ptr(), buf.nbytes(), root, req);
      },
      copy_back(t, buf));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::barrier(const c10d::BarrierOptions &) {
  return launch(c10d::OpType::BARRIER, "barrier", {}, {},
                [&](ds4tp_group_request **req) { return ds4tp_group_barrier_start(g_, req); });
}

// ---- not in libds4tp yet: when the C API gains one, its method calls it here

namespace {
constexpr const char *kNoP2P =
    "libds4tp's groups have collectives only: no point-to-point send or receive yet";
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::allreduce_coalesced(
    std::vector<at::Tensor> &, const c10d::AllreduceCoalescedOptions &) {
  refuse("all_reduce_coalesced");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::allgather_coalesced(
    std::vector<std::vector<at::Tensor>> &, std::vector<at::Tensor> &,
    const c10d::AllgatherOptions &) {
  refuse("all_gather_coalesced");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::send(std::vector<at::Tensor> &, int, int) {
  refuse("send", kNoP2P);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::recv(std::vector<at::Tensor> &, int, int) {
  refuse("recv", kNoP2P);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupDs4tp::recvAnysource(std::vector<at::Tensor> &, int) {
  refuse("recv (from any source)", kNoP2P);
}

}  // namespace ds4tp_torch
