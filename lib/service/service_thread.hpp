// ServiceThread: the lifecycle shared by the library's service threads
// (GateService, group::GroupStream): one std::thread, a stop flag the
// thread polls, a state word readable from any thread, and an "ended"
// signal so stop() can wait with a deadline instead of an unbounded join.
//
// Threading: start/stop/halt/join_ended from the owner's control thread
// (not concurrently with each other); stopping() and mark_ended() from the
// service thread; state() from any thread. The owner keeps its own error
// messages: ServiceThread only reports what happened.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "common/error.hpp"

namespace ds4tp {

class ServiceThread {
 public:
  ServiceThread() = default;
  // The owner must have joined (halt or stop) before this runs.
  ~ServiceThread() = default;
  ServiceThread(const ServiceThread &) = delete;
  ServiceThread &operator=(const ServiceThread &) = delete;

  int state() const { return state_.load(std::memory_order_acquire); }
  bool running() const { return state() == DS4TP_SERVICE_RUNNING; }
  // Service thread: true once the owner asked it to stop.
  bool stopping() const { return stop_.load(std::memory_order_acquire); }

  // Joins a thread that already ended by itself (after a failure), so a
  // new start() may replace it. Call only when !running().
  void join_ended();
  // Sets the state to RUNNING and launches fn; EIO (state back to STOPPED)
  // when the system refuses a thread, with `what` naming it in the message.
  int start(std::function<void()> fn, const char *what, Error &err);
  // Asks the thread to stop and waits up to timeout_ns for mark_ended();
  // true once it ended and was joined (or none was started), false at the
  // deadline (the thread is still running; call again).
  bool stop(uint64_t timeout_ns);
  // Asks the thread to stop and joins without a deadline; true when there
  // was a thread to join.
  bool halt();
  // Service thread, last thing it does: publishes the final state
  // (STOPPED or FAILED) and wakes stop().
  void mark_ended(int state);

 private:
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> state_{DS4TP_SERVICE_STOPPED};
  std::mutex end_mu_;
  std::condition_variable end_cv_;
  bool ended_ = false;
};

}  // namespace ds4tp
