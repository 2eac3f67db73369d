#include "work.hpp"

#include <stdexcept>
#include <thread>

#include <ATen/core/ivalue_inl.h>
#include <ds4tp/ds4tp.h>

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

RequestWork::RequestWork(int rank, int size, c10d::OpType op, const char *name,
                         ds4tp_group_request *req, std::vector<at::Tensor> outputs,
                         std::vector<at::Tensor> keep, std::function<void()> after)
    : c10d::Work(rank, op),
      where_("rank " + std::to_string(rank) + " of " + std::to_string(size)),
      name_(name),
      req_(req),
      outputs_(std::move(outputs)),
      keep_(std::move(keep)),
      after_(std::move(after)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors())) {}

RequestWork::~RequestWork() {
  // A Work dropped unwaited still finishes its op (an unpack included), so
  // the outputs hold the result and no buffer goes while the library uses it.
  std::lock_guard<std::mutex> lock(completing_);
  if (!done_) complete_locked();
}

void RequestWork::complete_locked() {
  const int rc = ds4tp_group_wait(req_);
  std::exception_ptr error;
  if (rc != DS4TP_OK) {
    // The blocking calls' form (ProcessGroupDs4tp::failure), the request's message.
    error = std::make_exception_ptr(std::runtime_error(
        std::string("ds4tp backend: ") + name_ + " failed on " + where_ + " (" +
        ds4tp_err_name(rc) + "): " + ds4tp_group_request_errmsg(req_)));
  } else if (after_) {
    try {
      after_();
    } catch (...) {
      error = std::current_exception();
    }
  }
  ds4tp_group_request_free(req_);
  req_ = nullptr;
  after_ = nullptr;
  keep_.clear();  // staging blocks and copies go now; the outputs stay for result()
  finish(error);
  done_ = true;
  // Last: the future's callbacks run here and may look at the Work.
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

bool RequestWork::isCompleted() {
  if (done_) return true;
  // Never blocks: a thread completing the Work now holds the lock.
  std::unique_lock<std::mutex> lock(completing_, std::try_to_lock);
  if (!lock.owns_lock() || done_) return done_;
  int ended = 0;
  ds4tp_group_test(req_, &ended);
  if (ended) complete_locked();  // `after` runs before anyone sees it done
  return done_;
}

bool RequestWork::isSuccess() const {
  return const_cast<RequestWork *>(this)->isCompleted() && !exception();
}

bool RequestWork::wait(std::chrono::milliseconds timeout) {
  if (timeout != kNoTimeout) {
    // The library's wait has no deadline: poll until the request ends.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!isCompleted()) {
      if (std::chrono::steady_clock::now() >= deadline)
        throw std::runtime_error(std::string("ds4tp backend: ") + name_ + " on " + where_ +
                                 ": not done after " + std::to_string(timeout.count()) +
                                 " ms (wait's timeout); the op is still in flight");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  {
    std::lock_guard<std::mutex> lock(completing_);
    if (!done_) complete_locked();
  }
  if (auto e = exception()) std::rethrow_exception(e);
  return true;
}

std::vector<at::Tensor> RequestWork::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> RequestWork::getFuture() {
  // torch waits on the future alone where it takes one (DDP's gradient
  // buckets, fut.wait(), fut.then()) and never calls wait(): a thread of
  // the Work's own completes it as soon as the request ends.
  if (!isCompleted() && !watched_.exchange(true)) {
    auto self = c10::intrusive_ptr<RequestWork>::reclaim_copy(this);
    std::thread([self] {
      std::lock_guard<std::mutex> lock(self->completing_);
      if (!self->done_) self->complete_locked();  // the error goes to the future
    }).detach();
  }
  return future_;
}

}  // namespace ds4tp_torch
