// Where one handle's waits went (ds4tp_stats: waits, wait_spin_ns,
// wait_yield_ns, wait_sleep_ns): how many waits did not end at once, and
// their time busy-polling, yielding the CPU between polls and asleep in
// the kernel. os::Waiter adds each wait's split as it ends.
// Threading: one writer at a time (the thread stepping the links that
// share it; a tiered leader's second thread has its own), so an add is a
// relaxed load and store, no locked instruction; readers on any thread
// load relaxed (a snapshot may be a wait behind).
#pragma once

#include <atomic>
#include <cstdint>

namespace ds4tp::os {

struct WaitTally {
  enum Phase : int { kSpin = 0, kYield = 1, kSleep = 2, kPhases = 3 };
  std::atomic<uint64_t> waits{0};
  std::atomic<uint64_t> ns[kPhases] = {};

  void add(const uint64_t (&phase_ns)[kPhases]) {
    bump(waits, 1);
    for (int i = 0; i < kPhases; i++)
      if (phase_ns[i] != 0) bump(ns[i], phase_ns[i]);
  }

 private:
  static void bump(std::atomic<uint64_t> &c, uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
};

}  // namespace ds4tp::os
