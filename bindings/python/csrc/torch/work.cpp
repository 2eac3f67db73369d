#include "work.hpp"

#include <ATen/core/ivalue_inl.h>

namespace ds4tp_torch {

DoneWork::DoneWork(int rank, c10d::OpType op, std::vector<at::Tensor> outputs,
                   std::exception_ptr error)
    : c10d::Work(rank, op), outputs_(std::move(outputs)) {
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
  finish(error);  // completed_ = true; wait() rethrows `error`
}

std::vector<at::Tensor> DoneWork::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> DoneWork::getFuture() { return future_; }

}  // namespace ds4tp_torch
