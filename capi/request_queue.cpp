// The split-phase calls' queue (request_queue.hpp).
#include "request_queue.hpp"

#include <chrono>

#include "common/clock.hpp"
#include "common/status.hpp"
#include "ds4tp/ds4tp.h"
#include "handle.hpp"
#include "os/os.hpp"

namespace ds4tp::capi {

namespace {

thread_local bool t_queue_thread = false;

// Marks this thread as running a request's call while it lives.
struct AsQueueThread {
  bool was = t_queue_thread;
  AsQueueThread() { t_queue_thread = true; }
  ~AsQueueThread() { t_queue_thread = was; }
};

}  // namespace

void Request::run() {
  int rc;
  {
    AsQueueThread mark;
    rc = run_();
  }
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
  // First in line and nothing running: run it here, no thread hop.
  bool mine = false;
  {
    std::lock_guard<std::mutex> l(core_->mu);
    if (!core_->running_one && !core_->queue.empty() && core_->queue.front().get() == this) {
      core_->queue.pop_front();
      core_->waiter_until_ns = 0;
      core_->running_one = mine = true;
    }
  }
  if (mine) {
    run();
    std::lock_guard<std::mutex> l(core_->mu);
    core_->running_one = false;
    core_->ended.notify_all();
    core_->work.notify_one();  // the next in line, if any, is the thread's
  }
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return done_; });
  if (rc_ != DS4TP_OK) t_last_error = msg_;
  return rc_;
}

const char *Request::message() const {
  std::lock_guard<std::mutex> l(mu_);
  return done_ ? msg_.c_str() : "";
}

RequestQueue::RequestQueue(std::function<void()> abort)
    : abort_(std::move(abort)), core_(std::make_shared<RequestCore>()) {}

bool RequestQueue::on_queue_thread() { return t_queue_thread; }

std::shared_ptr<Request> RequestQueue::push(std::function<int()> run) {
  auto r = std::make_shared<Request>(std::move(run), core_);
  std::lock_guard<std::mutex> l(core_->mu);
  if (core_->queue.empty() && !core_->running_one)
    core_->waiter_until_ns = now_ns() + kPickupNs;
  core_->queue.push_back(r);
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  core_->work.notify_one();
  return r;
}

void RequestQueue::loop() {
  os::name_this_thread("ds4tp-greq");
  RequestCore &c = *core_;
  std::unique_lock<std::mutex> l(c.mu);
  for (;;) {
    c.work.wait(l, [&] { return c.stop || (!c.queue.empty() && !c.running_one); });
    if (c.stop) return;
    // The first in line may be its waiter's for a moment (request_queue.hpp).
    const uint64_t now = now_ns();
    if (now < c.waiter_until_ns) {
      c.work.wait_for(l, std::chrono::nanoseconds(c.waiter_until_ns - now));
      continue;
    }
    std::shared_ptr<Request> r = std::move(c.queue.front());
    c.queue.pop_front();
    c.waiter_until_ns = 0;
    c.running_one = true;
    l.unlock();
    r->run();
    l.lock();
    c.running_one = false;
    c.ended.notify_all();
  }
}

void RequestQueue::drain() {
  std::unique_lock<std::mutex> l(core_->mu);
  core_->ended.wait(l, [&] { return core_->queue.empty() && !core_->running_one; });
}

bool RequestQueue::idle() const {
  std::lock_guard<std::mutex> l(core_->mu);
  return core_->queue.empty() && !core_->running_one;
}

RequestQueue::~RequestQueue() {
  std::deque<std::shared_ptr<Request>> unrun;
  bool running;
  {
    std::lock_guard<std::mutex> l(core_->mu);
    unrun.swap(core_->queue);
    running = core_->running_one;
    core_->stop = true;
    core_->work.notify_all();
  }
  for (auto &r : unrun)
    r->end(DS4TP_ESTATE, "ds4tp_group_free came before this request ran (it never started)");
  if (running && abort_) abort_();
  {  // a waiter may be running one: the group must outlive its call
    std::unique_lock<std::mutex> l(core_->mu);
    core_->ended.wait(l, [&] { return !core_->running_one; });
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace ds4tp::capi
