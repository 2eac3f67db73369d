// The timing rules every heartbeat of the library follows (the pair's
// liveness watcher, talk/liveness.cpp; a group's rank beats,
// talk/group_beat.cpp): how often to beat for a silence limit, and the
// rule that a beat thread which itself ran late (its process was stopped
// or starved) restarts the silence count instead of blaming the peers,
// since what it did not see is not their silence. Pure; one thread.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ds4tp::talk {

// Four beats inside the silence limit at least, one per `beat_ns` at most.
constexpr uint64_t beat_period(uint64_t beat_ns, uint64_t silence_ns) {
  return std::min(beat_ns, silence_ns / 4);
}

class BeatClock {
 public:
  explicit BeatClock(uint64_t silence_ns = 0) : silence_(silence_ns) {}
  void start(uint64_t now) { last_ = now; }
  // A beat period starts at `now`: true when this thread ran more than
  // half the silence limit late, so every peer counts as heard now.
  bool ran_late(uint64_t now) {
    const bool late = now - last_ > silence_ / 2;
    last_ = now;
    return late;
  }
  uint64_t silence_ns() const { return silence_; }

 private:
  uint64_t silence_;
  uint64_t last_ = 0;
};

}  // namespace ds4tp::talk
