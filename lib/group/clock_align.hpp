// The group clock: rank 0's monotonic clock. A rank on another host
// measures its offset at bring-up over its rendezvous connection in
// kClockRounds round trips (common/clock_offset.hpp), and its heartbeats
// keep measuring it between calls (talk/group_beat.hpp). Ranks on rank
// 0's host share its clock (CLOCK_MONOTONIC is host-wide) and measure
// nothing. The flight recorder's arrival marks use it.
#pragma once

#include <cstdint>
#include <vector>

#include "common/clock_offset.hpp"
#include "common/error.hpp"

namespace ds4tp::group {

constexpr int kClockRounds = 8;
constexpr uint8_t kClockPing = 'T';

// Rank 0: answers kClockRounds pings on each of `fds` in turn.
int serve_clock(const std::vector<int> &fds, uint64_t deadline, Error &err);
// A rank on another host than rank 0's: pings rank 0 on `fd`; `rounds`
// gets the rounds (the heartbeats go on from them).
int align_clock(int fd, uint64_t deadline, ClockOffset &out, std::vector<ClockRound> &rounds,
                Error &err);

}  // namespace ds4tp::group
