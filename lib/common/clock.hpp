// Monotonic time helpers for deadlines (no allocation, vDSO-fast).
#pragma once

#include <cstdint>
#include <ctime>

namespace ds4tp {

inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

inline uint64_t ms_to_ns(int64_t ms) { return uint64_t(ms) * 1000000ull; }

// Milliseconds left until `deadline_ns`, rounded up, 0 when passed.
inline int ms_left(uint64_t deadline_ns) {
  uint64_t t = now_ns();
  if (t >= deadline_ns) return 0;
  uint64_t left = (deadline_ns - t + 999999ull) / 1000000ull;
  return left > 0x7fffffff ? 0x7fffffff : int(left);
}

}  // namespace ds4tp
