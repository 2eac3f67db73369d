// The split-phase calls' queue (request_queue.hpp).
#include "request_queue.hpp"

#include "common/status.hpp"
#include "ds4tp/ds4tp.h"
#include "handle.hpp"
#include "os/os.hpp"

namespace ds4tp::capi {

namespace {
thread_local bool t_queue_thread = false;
}  // namespace

void Request::run() {
  const int rc = run_();
  end(rc, rc == DS4TP_OK ? std::string() : t_last_error);
  run_ = nullptr;  // what it captured goes now, not at free
}

void Request::end(int rc, const std::string &msg) {
  std::lock_guard<std::mutex> l(mu_);
  rc_ = rc;
  msg_ = msg;
  done_ = true;
  cv_.notify_all();
}

bool Request::done(int &rc) const {
  std::lock_guard<std::mutex> l(mu_);
  rc = rc_;
  return done_;
}

int Request::wait() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return done_; });
  if (rc_ != DS4TP_OK) t_last_error = msg_;
  return rc_;
}

const char *Request::message() const {
  std::lock_guard<std::mutex> l(mu_);
  return done_ ? msg_.c_str() : "";
}

bool RequestQueue::on_queue_thread() { return t_queue_thread; }

void RequestQueue::push(std::shared_ptr<Request> r) {
  std::lock_guard<std::mutex> l(mu_);
  queue_.push_back(std::move(r));
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  work_.notify_one();
}

void RequestQueue::loop() {
  t_queue_thread = true;
  os::name_this_thread("ds4tp-greq");
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    work_.wait(l, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    std::shared_ptr<Request> r = std::move(queue_.front());
    queue_.pop_front();
    running_one_ = true;
    l.unlock();
    r->run();
    l.lock();
    running_one_ = false;
    ended_.notify_all();
  }
}

void RequestQueue::drain() {
  std::unique_lock<std::mutex> l(mu_);
  ended_.wait(l, [&] { return queue_.empty() && !running_one_; });
}

bool RequestQueue::idle() const {
  std::lock_guard<std::mutex> l(mu_);
  return queue_.empty() && !running_one_;
}

RequestQueue::~RequestQueue() {
  std::deque<std::shared_ptr<Request>> unrun;
  bool running;
  {
    std::lock_guard<std::mutex> l(mu_);
    unrun.swap(queue_);
    running = running_one_;
    stop_ = true;
    work_.notify_one();
  }
  for (auto &r : unrun)
    r->end(DS4TP_ESTATE, "ds4tp_group_free came before this request ran (it never started)");
  if (running && abort_) abort_();
  if (thread_.joinable()) thread_.join();
}

}  // namespace ds4tp::capi
