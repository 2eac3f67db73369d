// A pair's flight recorder: its last 256 gates (kind, layer or batch
// index, seq, bytes, start, duration, how long it waited for the peer's
// first data, status), always kept, written as text an operator reads
// and as a Chrome trace by ds4tp_dump, on a signal the engine picks and
// when a gate fails. A pair has no group clock: its peer's lateness is
// its own wait for the peer's first data (where the link tells: tcp, shm).
//
// Cost: a handful of relaxed stores per gate into a slot whose version
// word tells a reader on another thread a torn copy (it skips it); no
// lock, allocation or system call.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace ds4tp::stats {

struct FlightGate {
  int kind = 0;       // stats::Kind
  uint32_t a = 0;     // layer or batch index
  uint64_t seq = 0, bytes = 0;
  uint64_t t0 = 0, t1 = 0;  // monotonic ns; t1 0 when untimed (DS4TP_STATS=0)
  uint64_t seen = 0;        // the peer's first data; 0 where the link cannot tell
  int rc = 0;
};

struct GateFlightHeader {
  int rank = 0;
  std::string role, transport;
  std::string failure;  // the pair's failure, empty while it works
};

class GateFlight {
 public:
  static constexpr int kGates = 256;
  // The gate thread only. `seen`: link::kSeenAtEnd becomes t1.
  void record(const FlightGate &g);
  // Any thread: the kept gates, oldest first (one being written is left out).
  std::vector<FlightGate> gates() const;
  uint64_t recorded() const { return n_.load(std::memory_order_acquire); }
  // `last`: only the newest that many (0: all).
  std::string text(const GateFlightHeader &h, size_t last = 0) const;
  std::string trace(const GateFlightHeader &h) const;
  // `path` gets the text and `path`.json the trace; false with `why`.
  bool write(const std::string &path, const GateFlightHeader &h, std::string &why) const;

 private:
  struct Slot {
    std::atomic<uint64_t> version{0};  // 2n + 1 while gate n is written, 2n + 2 once it is
    std::atomic<uint64_t> seq{0}, bytes{0}, t0{0}, t1{0}, seen{0};
    std::atomic<uint32_t> a{0};
    std::atomic<int32_t> rc{0}, kind{0};
  };
  Slot slots_[kGates];
  std::atomic<uint64_t> n_{0};
};

}  // namespace ds4tp::stats
