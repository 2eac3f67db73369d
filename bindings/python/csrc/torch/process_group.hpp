// torch.distributed's "ds4tp" backend: a c10d::ProcessGroup over one
// ds4tp_group, through libds4tp's public C API only.
//
// Lifecycle: the constructor creates the ds4tp group (rank 0 binds its
// rendezvous listener there, so its port can be published in the store
// before anyone dials); connect() brings it up. The Python side
// (ds4tp/torch/_rendezvous.py) runs that sequence.
//
// Every op starts a libds4tp request (ds4tp_group_requests.h) and returns
// a Work that waits for it (work.hpp): async_op=True gets the overlap,
// and a synchronous call is torch's frontend waiting at once. A mutex
// keeps one thread in the handle at a time, as the C API asks; waits on
// requests need no lock.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

struct ds4tp_group;
struct ds4tp_group_request;

namespace ds4tp_torch {

// The ds4tp_group_options the Python side chose; -1 (or empty) = the
// library's default.
struct Config {
  std::string host;  // rank 0: the address it binds; the others: where they dial
  int port = 0;      // rank 0: 0 = any free port
  int transport = 0; // DS4TP_TRANSPORT_*
  int connect_timeout_ms = -1;
  int op_timeout_ms = -1;
  int peer_silence_ms = -1;
  int64_t chunk_bytes = -1;
  int spin_us = -2;  // -2: unset (-1 is DS4TP_SPIN_ADAPTIVE)
  int yield_us = -1;
};

class ProcessGroupDs4tp final : public c10d::ProcessGroup {
 public:
  // Creates this rank's ds4tp group (rank 0 binds here). A group of one
  // rank has no ds4tp group: its collectives are local copies.
  ProcessGroupDs4tp(int rank, int size, const Config &cfg);
  ~ProcessGroupDs4tp() override;

  // Blocking bring-up: rendezvous at rank 0, roster, data links.
  void connect();
  int rendezvous_port() const;  // the bound port on rank 0
  int transport() const;        // DS4TP_TRANSPORT_* after connect
  std::string plan();           // ds4tp_group_plan after connect
  void mark_failed();           // fails the group here and on every rank

  const std::string getBackendName() const override { return "ds4tp"; }

  // What libds4tp has: process_group.cpp (all_reduce, all_gather,
  // broadcast, barrier) and collectives.cpp (the rest).
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                           const c10d::AllreduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                           std::vector<at::Tensor> &inputs,
                                           const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                 const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                           const c10d::BroadcastOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                        const c10d::ReduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                        std::vector<at::Tensor> &inputs,
                                        const c10d::GatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                         std::vector<std::vector<at::Tensor>> &inputs,
                                         const c10d::ScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                std::vector<std::vector<at::Tensor>> &inputs,
                                                const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor &output, at::Tensor &input, const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                               std::vector<int64_t> &output_splits,
                                               std::vector<int64_t> &input_splits,
                                               const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::AllToAllOptions &opts) override;

  // What it has not yet: each refuses, naming the op and the way round it.
  // libds4tp has no point-to-point calls.
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor> &tensors, const c10d::AllreduceCoalescedOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>> &outputs, std::vector<at::Tensor> &inputs,
      const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors,
                                               int tag) override;

 private:
  // Starts an op: `start` (a ds4tp_group_*_start, given the request's
  // slot) under the handle's mutex. The Work waits for the request, then
  // runs `after` (copies out of staging); it holds `outputs` and `keep`
  // (what else the request reads or writes) until then. A refused start
  // is a completed Work with the library's error, naming the op and this
  // rank. A group of one rank runs `local` and `after` at once.
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const char *op,
                                        std::vector<at::Tensor> outputs,
                                        std::vector<at::Tensor> keep,
                                        const std::function<int(ds4tp_group_request **)> &start,
                                        std::function<void()> after = nullptr,
                                        const std::function<void()> &local = nullptr);
  void check_root(int64_t root, const char *op) const;
  std::string failure(const char *op, int status) const;

  ds4tp_group *g_ = nullptr;  // null for a group of one rank
  std::mutex mu_;             // one thread in g_ at a time (the C API's rule)
};

}  // namespace ds4tp_torch
