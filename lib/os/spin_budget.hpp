// The adaptive wait policy's learned state: how long the next wait of one
// pair's transport (or one gate service) busy-polls before it yields or
// blocks. Pure: no clock, no I/O, no allocation; os::Waiter feeds it the
// quiet stretch each wait ended with (wait.hpp), which tests can do too.
//
// Why it adapts: spinning is right while the peer runs on another core (a
// wake-up costs more than the wait), and wrong when the machine is
// oversubscribed: the peer, or the thread we wait for, may need the very
// core we spin on, so the spin only delays what it waits for. The budget
// tells the two apart by whether recent waits ended inside their window:
//  - a wait served while spinning, or within kFloorNs after its window
//    closed, doubles the window (at least to twice that wait, at most to
//    the cap);
//  - a wait that outlasted its window by more than that quarters it, as
//    does a wait whose spin was preempted (two clock reads while spinning
//    more than kPreemptedNs apart: another thread wanted this core, so the
//    spin was stealing it even if the wait ended inside the window); below
//    kFloorNs it is 0, and waits go to yield/block at once;
//  - with no window, one wait in kProbeEvery spins the whole cap, so a
//    machine that went quiet (both ranks blocking, each wait then a
//    wake-up long) finds its way back to spinning.
// Threading: one thread at a time (the transport's gate caller, or the
// service thread), like the Waiter that uses it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ds4tp::os {

class SpinBudget {
 public:
  static constexpr uint64_t kDefaultCapNs = 1000000;  // 1 ms: above 2x a vCPU wake-up
  static constexpr uint64_t kFloorNs = 4000;           // smallest window worth spinning
  static constexpr uint32_t kProbeEvery = 256;         // waits without a window per probe
  static constexpr uint64_t kPreemptedNs = 100000;     // a spin gap this long: descheduled

  explicit SpinBudget(uint64_t cap_ns = kDefaultCapNs) : cap_(cap_ns), window_(cap_ns) {}

  // The window the wait about to start spins for (counts the probes).
  uint64_t begin() {
    if (window_ != 0) return window_;
    if (++unspun_ < kProbeEvery) return 0;
    unspun_ = 0;
    return cap_;
  }
  // The wait that began with `window` ended `quiet_ns` after its last
  // progress (the stretch the window is measured against); `preempted`:
  // its spin lost the core at least once.
  void ended(uint64_t window, uint64_t quiet_ns, bool preempted = false) {
    if (!preempted && quiet_ns <= window + kFloorNs) {
      window_ = std::min(cap_, std::max({2 * window_, 2 * quiet_ns, kFloorNs}));
    } else {
      window_ /= 4;  // shrink faster than it grows: a miss costs its whole window
      if (window_ < kFloorNs) window_ = 0;
    }
  }

  uint64_t window() const { return window_; }
  uint64_t cap() const { return cap_; }

 private:
  uint64_t cap_;
  uint64_t window_;
  uint32_t unspun_ = 0;  // waits begun with no window since the last probe
};

}  // namespace ds4tp::os
