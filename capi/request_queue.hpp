// The split-phase calls' queue (ds4tp_group_requests.h): one progress
// thread per group runs the started collectives, in the order they were
// started, through the blocking C calls; each request keeps its status
// and message for wait / test.
//
// A wait that finds its request first in line and nothing running runs it
// on the waiting thread instead: a start followed at once by its wait (a
// framework that cannot tell a blocking call from a started one, as
// torch.distributed's backends) then costs no thread hop. The progress
// thread leaves a request started with nothing before it alone for
// kPickupNs, so that wait usually comes first; a request nobody waits for
// starts after that, and one queued behind others as soon as they end.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace ds4tp::capi {

class Request;

// What the queue's thread, the waiters and the queue's owner share; it
// lives as long as any of them (a request may outlive its group).
struct RequestCore {
  std::mutex mu;
  std::condition_variable work, ended;
  std::deque<std::shared_ptr<Request>> queue;
  // Until then the first in line is its waiter's (it was started with
  // nothing before it); 0: the thread's at once.
  uint64_t waiter_until_ns = 0;
  bool running_one = false;     // a call runs (on the thread or a waiter)
  bool stop = false;
};

// One started call: its body, then its outcome.
class Request : public std::enable_shared_from_this<Request> {
 public:
  Request(std::function<int()> run, std::shared_ptr<RequestCore> core)
      : run_(std::move(run)), core_(std::move(core)) {}
  // Runs the body (the queue's thread, or a waiter that took it).
  void run();
  // Ends it unrun with `rc`/`msg` (a group freed first).
  void end(int rc, const std::string &msg);
  // Any thread.
  bool done(int &rc) const;
  int wait();
  const char *message() const;  // "" until it ended

 private:
  std::function<int()> run_;
  std::shared_ptr<RequestCore> core_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  int rc_ = 0;
  std::string msg_;
};

class RequestQueue {
 public:
  // How long the thread leaves a freshly started request to its waiter.
  static constexpr uint64_t kPickupNs = 30'000;

  // `abort` fails the group's call in progress (at destruction, when a
  // request still runs).
  explicit RequestQueue(std::function<void()> abort);
  // Fails the requests still queued (DS4TP_ESTATE) and the one running
  // (through abort), waits for it, then joins the thread.
  ~RequestQueue();
  RequestQueue(const RequestQueue &) = delete;
  RequestQueue &operator=(const RequestQueue &) = delete;

  // Starts the thread at the first push.
  std::shared_ptr<Request> push(std::function<int()> run);
  // Waits until every request pushed so far has ended. Not on the queue's
  // thread (a call it runs does not wait for itself: on_queue_thread()).
  void drain();
  bool idle() const;
  // True while a request's call runs on this thread (the queue's, or a
  // waiter's): the group call inside skips drain() and leaves the handle's
  // message to the request.
  static bool on_queue_thread();

 private:
  void loop();
  std::function<void()> abort_;
  std::shared_ptr<RequestCore> core_;
  std::thread thread_;
};

}  // namespace ds4tp::capi
