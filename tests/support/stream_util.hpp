// A CPU stand-in for a GPU stream's memory operations on the library's
// stream words: write = cuStreamWriteValue{32,64}, wait = cuStreamWaitValue
// with CU_STREAM_WAIT_VALUE_GEQ (a cyclic compare, as the driver does).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include <sched.h>
#include <unistd.h>

#include "ds4tp/ds4tp.h"

namespace ds4tp::test {

struct CpuStream {
  ds4tp_stream_words w{};

  CpuStream() { w.size = sizeof w; }
  uint8_t *ready(uint32_t s) const { return static_cast<uint8_t *>(w.ready) + s * w.stride; }
  uint8_t *release(uint32_t s) const { return static_cast<uint8_t *>(w.release) + s * w.stride; }
  uint64_t mask() const { return w.word_bits == 64 ? ~uint64_t(0) : 0xffffffffull; }

  // The value both words carry for `seq` at `slot` (ds4tp.h, GPU streams).
  uint64_t value(uint32_t slot, uint64_t seq) const {
    return (w.mode == DS4TP_STREAM_FIXED ? slot + 1 : seq) & mask();
  }
  uint64_t load(const uint8_t *p) const {
    if (w.word_bits == 64) return __atomic_load_n(reinterpret_cast<const uint64_t *>(p), __ATOMIC_ACQUIRE);
    return __atomic_load_n(reinterpret_cast<const uint32_t *>(p), __ATOMIC_ACQUIRE);
  }
  void write(uint32_t s, uint64_t v) const {
    if (w.word_bits == 64)
      __atomic_store_n(reinterpret_cast<uint64_t *>(ready(s)), v, __ATOMIC_RELEASE);
    else
      __atomic_store_n(reinterpret_cast<uint32_t *>(ready(s)), uint32_t(v), __ATOMIC_RELEASE);
  }
  bool geq(uint64_t x, uint64_t v) const {
    return w.word_bits == 64 ? int64_t(x - v) >= 0 : int32_t(uint32_t(x) - uint32_t(v)) >= 0;
  }
  // Waits until release[s] >= v (cyclic); returns the word, and sets
  // timed_out when nothing came within limit_ms.
  uint64_t wait(uint32_t s, uint64_t v, bool &timed_out, int limit_ms = 20000) const {
    auto t0 = std::chrono::steady_clock::now();
    timed_out = false;
    for (unsigned spins = 0;; spins++) {
      uint64_t x = load(release(s));
      if (geq(x, v)) return x;
      if (spins > 1000) sched_yield();
      if ((spins & 0xfff) == 0 &&
          std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(limit_ms)) {
        timed_out = true;
        return x;
      }
    }
  }
  // After the wait: the engine's device-side check.
  bool poisoned(uint32_t s, uint64_t v) const { return load(release(s)) != (v & mask()); }
};

}  // namespace ds4tp::test
