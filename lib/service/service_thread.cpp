#include "service/service_thread.hpp"

#include <chrono>
#include <system_error>
#include <utility>

namespace ds4tp {

void ServiceThread::join_ended() {
  if (thread_.joinable()) thread_.join();
}

int ServiceThread::start(std::function<void()> fn, const char *what, Error &err) {
  stop_.store(false, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(end_mu_);
    ended_ = false;
  }
  state_.store(DS4TP_SERVICE_RUNNING, std::memory_order_release);
  try {
    thread_ = std::thread(std::move(fn));
  } catch (const std::system_error &e) {
    state_.store(DS4TP_SERVICE_STOPPED, std::memory_order_release);
    return err.set(DS4TP_EIO, "cannot start the {} thread: {}", what, e.what());
  }
  return DS4TP_OK;
}

bool ServiceThread::stop(uint64_t timeout_ns) {
  if (!thread_.joinable()) return true;
  stop_.store(true, std::memory_order_release);
  {
    std::unique_lock<std::mutex> lock(end_mu_);
    if (!end_cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns), [this] { return ended_; }))
      return false;
  }
  thread_.join();
  return true;
}

bool ServiceThread::halt() {
  if (!thread_.joinable()) return false;
  stop_.store(true, std::memory_order_release);
  thread_.join();
  return true;
}

void ServiceThread::mark_ended(int state) {
  state_.store(state, std::memory_order_release);
  std::lock_guard<std::mutex> lock(end_mu_);
  ended_ = true;
  end_cv_.notify_all();
}

}  // namespace ds4tp
