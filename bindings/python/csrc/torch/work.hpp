// The Work a ds4tp collective returns. libds4tp's collectives block until
// every rank is done, so the Work is complete when the call returns: wait()
// returns at once, or rethrows the library's error. Once the C API gains
// split-phase start/wait calls, a Work that waits there replaces this one
// for those ops; the ops themselves do not change.
#pragma once

#include <exception>
#include <vector>

#include <torch/csrc/distributed/c10d/Work.hpp>

namespace ds4tp_torch {

class DoneWork final : public c10d::Work {
 public:
  // `outputs` are what result() and the future hand out; `error` (may be
  // null) is rethrown by wait() and set on the future.
  DoneWork(int rank, c10d::OpType op, std::vector<at::Tensor> outputs, std::exception_ptr error);

  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace ds4tp_torch
