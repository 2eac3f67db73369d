// The split-phase calls' queue (ds4tp_group_requests.h): one progress
// thread per group runs the started collectives, in the order they were
// started, through the blocking C calls; each request keeps its status
// and message for wait / test.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace ds4tp::capi {

// One started call: its body, then its outcome.
class Request {
 public:
  explicit Request(std::function<int()> run) : run_(std::move(run)) {}
  // The queue's thread: runs the body, or ends it unrun with `rc`/`msg`.
  void run();
  void end(int rc, const std::string &msg);
  // Any thread.
  bool done(int &rc) const;
  int wait();
  const char *message() const;  // "" until it ended

 private:
  std::function<int()> run_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  int rc_ = 0;
  std::string msg_;
};

class RequestQueue {
 public:
  // `abort` fails the group's call in progress (at destruction, when a
  // request still runs).
  explicit RequestQueue(std::function<void()> abort) : abort_(std::move(abort)) {}
  // Fails the requests still queued (DS4TP_ESTATE) and the one running
  // (through abort), then joins the thread.
  ~RequestQueue();
  RequestQueue(const RequestQueue &) = delete;
  RequestQueue &operator=(const RequestQueue &) = delete;

  // Starts the thread at the first push.
  void push(std::shared_ptr<Request> r);
  // Waits until every request pushed so far has ended. Not on the queue's
  // thread (a call it runs does not wait for itself: on_queue_thread()).
  void drain();
  bool idle() const;
  // True on a queue's thread (a group call it runs skips drain() and
  // leaves the handle's message to the request).
  static bool on_queue_thread();

 private:
  void loop();
  std::function<void()> abort_;
  mutable std::mutex mu_;
  std::condition_variable work_, ended_;
  std::deque<std::shared_ptr<Request>> queue_;
  bool running_one_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ds4tp::capi
