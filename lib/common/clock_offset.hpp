// Another host's clock from round trips, NTP's way: each round gives the
// offset from four clock reads, and the round with the least time on the
// wire is kept (its half-width bounds the error). Pure; the group's
// bring-up (group/clock_align.hpp) and its heartbeats (talk/group_beat.hpp)
// feed it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ds4tp {

// One round: this side sent at t0 and read the answer at t3 (its clock);
// the other read the request at t1 and answered at t2 (its clock).
struct ClockRound {
  uint64_t t0 = 0, t1 = 0, t2 = 0, t3 = 0;
};
struct ClockOffset {
  int64_t offset_ns = 0;        // add to this side's clock for the other's
  uint64_t uncertainty_ns = 0;  // half the kept round's time on the wire
  bool measured = false;
};

inline ClockOffset clock_offset(const ClockRound *rounds, size_t n) {
  ClockOffset best;
  uint64_t least = UINT64_MAX;
  for (size_t i = 0; i < n; i++) {
    const ClockRound &r = rounds[i];
    if (r.t0 == 0) continue;  // an empty slot
    const uint64_t held = r.t2 >= r.t1 ? r.t2 - r.t1 : 0;
    const uint64_t trip = r.t3 >= r.t0 ? r.t3 - r.t0 : 0;
    const uint64_t wire = trip > held ? trip - held : 0;
    if (wire >= least) continue;
    least = wire;
    best.offset_ns = ((int64_t(r.t1) - int64_t(r.t0)) + (int64_t(r.t2) - int64_t(r.t3))) / 2;
    best.uncertainty_ns = wire / 2;
    best.measured = true;
  }
  return best;
}
inline ClockOffset clock_offset(const std::vector<ClockRound> &rounds) {
  return clock_offset(rounds.data(), rounds.size());
}

}  // namespace ds4tp
