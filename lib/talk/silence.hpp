// The one silence rule of every heartbeat in the library (the pair's
// liveness watcher, talk/liveness.cpp, judges one peer on the control
// connection; a tcp group's beat thread, talk/group_beat.cpp, judges the
// ranks on its rendezvous connections): how often to beat for a silence
// limit, when a peer counts as silent, and the rule that a beat thread
// which itself ran late (its process was stopped or starved) restarts
// every peer's silence count instead of blaming them, since what it did
// not see is not their silence. Pure; used by one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ds4tp::talk {

// Four beats inside the silence limit at least, one per `beat_ns` at most.
constexpr uint64_t beat_period(uint64_t beat_ns, uint64_t silence_ns) {
  return std::min(beat_ns, silence_ns / 4);
}

class SilenceJudge {
 public:
  SilenceJudge() = default;
  SilenceJudge(uint64_t silence_ns, int peers, uint64_t now)
      : silence_(silence_ns), last_beat_(now), heard_(size_t(peers), now) {}

  // Bytes of any kind arrived from `peer`.
  void heard(int peer, uint64_t now) { heard_[size_t(peer)] = now; }

  // A beat period starts at `now`. When this thread ran more than half
  // the limit late, every peer counts as heard now. Returns the first
  // peer (among those `judged(peer)` accepts) not heard for the limit,
  // or -1.
  template <typename Judged>
  int beat(uint64_t now, Judged judged) {
    if (now - last_beat_ > silence_ / 2) std::fill(heard_.begin(), heard_.end(), now);
    last_beat_ = now;
    for (int p = 0; p < int(heard_.size()); p++)
      if (judged(p) && now - heard_[size_t(p)] >= silence_) return p;
    return -1;
  }
  int beat(uint64_t now) {
    return beat(now, [](int) { return true; });
  }

  uint64_t quiet_for(int peer, uint64_t now) const { return now - heard_[size_t(peer)]; }
  uint64_t silence_ns() const { return silence_; }

 private:
  uint64_t silence_ = 0;
  uint64_t last_beat_ = 0;
  std::vector<uint64_t> heard_;  // when each peer was last heard
};

}  // namespace ds4tp::talk
