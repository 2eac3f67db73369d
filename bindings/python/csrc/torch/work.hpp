// The Works a ds4tp collective returns.
//
// RequestWork: the op was started as a libds4tp request (the split-phase
// calls, ds4tp_group_requests.h) and runs on the group's progress thread
// while the caller goes on. wait() collects it, then does what the op
// leaves for after the data moved (copying a staged output back into a
// strided tensor, unpacking a block into a list); until then the Work
// holds every tensor the request reads or writes. torch's frontend calls
// wait() itself for a synchronous call, so one Work serves both.
//
// DoneWork: already complete at return (a group of one rank copies
// locally; a start the library refused carries its error).
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Work.hpp>

struct ds4tp_group_request;

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

class RequestWork final : public c10d::Work {
 public:
  // Takes `req`. `name` (torch's name for the op) and `size` go into its
  // errors; `keep`: the tensors the request uses beside `outputs`;
  // `after`: run once the request succeeded.
  RequestWork(int rank, int size, c10d::OpType op, const char *name, ds4tp_group_request *req,
              std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep,
              std::function<void()> after);
  // Waits for a request still running (its buffers are ours until then).
  ~RequestWork() override;

  bool isCompleted() override;     // polls ds4tp_group_test; completes the Work once done
  bool isSuccess() const override; // completed, and without an error
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  // Waits for the request, runs `after`, completes the Work and its
  // future. Under completing_.
  void complete_locked();

  std::string where_;  // "rank 1 of 2", for errors
  const char *name_;
  ds4tp_group_request *req_;  // freed once complete
  std::vector<at::Tensor> outputs_, keep_;
  std::function<void()> after_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::mutex completing_;          // one thread waits and runs `after`
  std::atomic<bool> done_{false};  // complete_locked() has run
  std::atomic<bool> watched_{false};  // a thread completes the future (getFuture)
};

}  // namespace ds4tp_torch
