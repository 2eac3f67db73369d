// A thread of its own for one variant of a case: run() hands it a block
// of exchanges and waits until it is done, so blocks still run one at a
// time, in the case's order.
//
// Why a thread each: Linux copies a TCP send into the sending thread's
// page fragment (32 KiB), and a message that does not divide it (16 KiB
// plus a header) leaves the fragment at an offset where every later 16 KiB
// message straddles two pages, which costs about 6% per exchange here.
// With every variant in one thread, a raw 16 KiB exchange after a library
// block paid the library's misalignment too (bench/group/frame_cost.cpp
// measures both ways: README "Groups").
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace bench {

class VariantThread {
 public:
  VariantThread() : thread_([this] { loop(); }) {}
  ~VariantThread() {
    {
      std::lock_guard<std::mutex> l(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  VariantThread(const VariantThread &) = delete;
  VariantThread &operator=(const VariantThread &) = delete;

  // Runs f on this thread; returns when it has returned.
  void run(std::function<void()> f) {
    std::unique_lock<std::mutex> l(mu_);
    job_ = std::move(f);
    cv_.notify_all();
    cv_.wait(l, [this] { return !job_; });
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [this] { return quit_ || job_; });
      if (quit_) return;
      l.unlock();
      job_();
      l.lock();
      job_ = nullptr;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;  // set while a block waits to run or runs
  bool quit_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace bench
