// The adaptive wait policy's learned state: how long the next wait of one
// link (a pair's transport, a group's lane, a gate service) busy-polls
// before it yields or blocks. Pure: no clock, no I/O, no allocation;
// os::Waiter feeds it the quiet stretch each wait ended with (wait.hpp),
// which tests can do too.
//
// What it learns: how late the peer arrives. An engine computes between
// gates and collectives, so the ranks come skewed by microseconds to
// milliseconds, and a wait that blocks before the peer comes pays a
// wake-up (tens to hundreds of us on a VM) on top of the skew. The budget
// keeps a histogram of recent waits (log2 bins from 1 us, halved every
// kHalfLife waits) and spins through the shortest bin edge that serves 9
// in 10 of the waits a spin of the cap could serve, plus kFloorNs, and at
// least kWakeNs: a peer that comes within a wake-up is cheaper met
// spinning than asleep, and a wait that spins that long before it sleeps
// costs at most twice the best choice. Where fewer than a quarter of the
// waits are that short, it does not spin: those waits are mostly longer
// than any spin worth paying.
//
// When it stops: spinning is wrong when the host has no core to spare
// (the peer, or the thread we wait for, may need the very core we spin
// on). Two signs, each quartering the window (shift += 2); four
// quarterings turn spinning off:
//  - the wait lost its core: a spin was preempted (two clock reads while
//    spinning more than kPreemptedNs apart), or a yield handed the core to
//    another thread for more than kYieldedNs;
//  - kHeldOff waits in a row outlasted a window at least as long as the
//    last wait that did (each by more than kFloorNs): spinning as long as
//    a wait already seen did not serve the next one, as when the spin
//    holds off a peer on the same core (a skew that grows or a tail
//    outlasts a window shorter than it, which the histogram then learns).
// The part of the learned window a wait does not spin it yields
// (yield_after): a shared core then goes to whoever needs it, the peer
// included when the two ranks were woken onto one CPU, while the waiter
// stays runnable, so the scheduler can still spread the ranks over the
// cores (a sleep would keep them together: each rank would run only while
// the other sleeps). A wait served inside the learned window (or within
// kFloorNs after it), by its spin or by those yields, without losing its
// core doubles the window back (shift -= 1). With spinning off, one wait
// in kProbeEvery also spins the learned window.
//
// Waits longer than the window that were not served by it ("misses")
// are not signs: a skew that grows or a tail is learned instead.
// Threading: one thread at a time (the link's stepping thread, or the
// service thread), like the Waiter that uses it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ds4tp::os {

class SpinBudget {
 public:
  static constexpr uint64_t kDefaultCapNs = 1000000;  // 1 ms: above 2x a vCPU wake-up
  static constexpr uint64_t kFloorNs = 4000;           // slack past the window still served
  static constexpr uint64_t kWakeNs = 50000;           // a wake-up on a VM (ds4tp_bench_wake)
  static constexpr uint32_t kProbeEvery = 256;         // waits without a window per probe
  static constexpr uint64_t kPreemptedNs = 100000;     // a spin gap this long: descheduled
  static constexpr uint64_t kYieldedNs = 20000;        // a yield this long: another thread ran
  static constexpr uint32_t kOffShift = 8;             // four quarterings: spinning is off
  static constexpr int kBins = 16;                     // bin b: waits in (2^(b-1), 2^b] us
  static constexpr uint32_t kHalfLife = 32;            // waits between halvings
  static constexpr uint32_t kRelearn = 4;              // waits between window updates
  static constexpr uint32_t kHeldOff = 3;              // such misses in a row: a busy core

  explicit SpinBudget(uint64_t cap_ns = kDefaultCapNs) : cap_(cap_ns), learned_(cap_ns) {
    while (top_ + 1 < kBins && edge(top_) < cap_) top_++;
  }

  // The window the wait about to start spins for (counts the probes).
  uint64_t begin() {
    if (shift_ < kOffShift) return window();
    if (++unspun_ < kProbeEvery) return 0;
    unspun_ = 0;
    return learned();
  }
  // The wait that began with `window` ended `quiet_ns` after its last
  // progress (the stretch the window is measured against); `preempted`:
  // its spin or a yield lost the core at least once.
  void ended(uint64_t window, uint64_t quiet_ns, bool preempted = false) {
    if (preempted) {  // says how busy the core is, not how late the peer was
      lose();
      return;
    }
    const uint64_t given = std::max(window, learned_);  // spun, then yielded
    learn(quiet_ns);
    if (given != 0 && quiet_ns <= given + kFloorNs) {  // served on a core of its own
      held_ = 0;
      if (shift_ > 0) shift_--;
      return;
    }
    if (window == 0) return;  // a blocked wait: a sample, nothing about spinning
    if (window >= last_miss_ && ++held_ >= kHeldOff) lose();
    last_miss_ = quiet_ns;
  }

  // What a wait that spins `spin` yields after it: the rest of the learned
  // window (0 when the waits are too long to serve: it sleeps at once).
  uint64_t yield_after(uint64_t spin) const { return learned_ > spin ? learned_ - spin : 0; }
  // The current window: the learned one, quartered per sign of a busy core.
  uint64_t window() const { return shift_ >= kOffShift ? 0 : learned_ >> shift_; }
  // What the waits say, before the busy-core signs: the cap before any
  // wait was seen, 0 when too few are short enough to serve.
  uint64_t learned() const { return learned_; }
  uint64_t cap() const { return cap_; }
  bool off() const { return shift_ >= kOffShift; }

  // Bin b holds waits in (edge(b - 1), edge(b)]; the last one all longer.
  static uint64_t edge(int b) { return uint64_t(1000) << b; }
  static int bin(uint64_t ns) {
    if (ns <= 1000) return 0;
    const int b = 64 - __builtin_clzll((ns - 1) / 1000);
    return b < kBins ? b : kBins - 1;
  }

 private:
  uint64_t from_bins() const {
    if (total_ == 0) return cap_;
    uint32_t reach = 0;
    for (int i = 0; i <= top_; i++) reach += bins_[i];
    if (4 * reach < total_) return 0;
    int b = 0;
    for (uint32_t upto = bins_[0]; b < top_ && 10 * upto < 9 * reach;) upto += bins_[++b];
    return std::min(cap_, std::max(kWakeNs, edge(b) + kFloorNs));
  }
  // Counts are in 16ths of a wait, so a halving keeps some resolution.
  // The window is worked out again every kRelearn waits (a wait's end is
  // on the gate path).
  void learn(uint64_t q) {
    bins_[bin(q)] += 16;
    total_ += 16;
    if (++seen_ == kHalfLife) {
      seen_ = 0;
      total_ = 0;
      for (auto &c : bins_) total_ += c /= 2;
    }
    if (seen_ % kRelearn == 1 || total_ == 16) learned_ = from_bins();
  }
  void lose() { shift_ = std::min<uint32_t>(shift_ + 2, kOffShift); }

  uint64_t cap_;
  uint64_t learned_;           // from_bins() as of the last update
  int top_ = 0;                // the last bin a spin of the cap reaches into
  uint32_t bins_[kBins] = {};  // recent waits by bin, decayed
  uint32_t total_ = 0;         // their sum
  uint32_t seen_ = 0;          // waits since the last halving
  uint32_t shift_ = 0;         // window = learned >> shift; kOffShift: off
  uint32_t unspun_ = 0;        // waits begun with spinning off since the last probe
  uint64_t last_miss_ = UINT64_MAX;  // the last spinning wait that outlasted its window
  uint32_t held_ = 0;          // such waits in a row whose window covered the one before
};

}  // namespace ds4tp::os
