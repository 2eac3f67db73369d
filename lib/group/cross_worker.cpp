#include "group/cross_worker.hpp"

#include "common/clock.hpp"

namespace ds4tp::group {

CrossWorker::CrossWorker(Run run, void *ctx) : run_(run), ctx_(ctx), thread_([this] { loop(); }) {}

CrossWorker::~CrossWorker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CrossWorker::post(uint8_t *q, uint64_t m) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    q_ = q, m_ = m;
    has_job_ = true, done_ = false;
  }
  posted_ = true;
  cv_.notify_all();
}

int CrossWorker::wait(Error &err, uint64_t &ns) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [this] { return done_; });
  posted_ = false;
  ns += ns_;
  if (rc_ != DS4TP_OK) err = err_;
  return rc_;
}

void CrossWorker::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [this] { return has_job_ || quit_; });
    if (quit_) return;
    has_job_ = false;
    uint8_t *q = q_;
    const uint64_t m = m_;
    lk.unlock();
    Error e;
    const uint64_t t0 = now_ns();
    const int rc = run_(ctx_, q, m, e);
    const uint64_t ns = now_ns() - t0;
    lk.lock();
    rc_ = rc, ns_ = ns;
    if (rc != DS4TP_OK) err_ = std::move(e);
    done_ = true;
    cv_.notify_all();
  }
}

}  // namespace ds4tp::group
