// A group's flight recorder: the last 256 calls, each with its op, bytes,
// algorithm, duration, error and when every rank entered it, written on
// demand (ds4tp_group_dump, a signal the engine picks) and when a call
// fails, as text an operator reads and as a Chrome trace.
//
// Arrival: every step of a call carries its sender's mark, the time it
// entered the call in microseconds of the group clock (rank 0's monotonic
// clock; each rank measures its offset at bring-up, clock_align.hpp), low
// 32 bits (link::Step::mark). A flat group's ranks hear every rank at
// every step, so each knows every rank's entry; a tiered group's rank
// knows its host's ranks and, on a leader, the other leaders, whose mark
// across hosts is their host's latest entry where their host met first
// (all-reduce).
//
// Cost: a spin lock no other thread takes but a dump, and a copy of a
// few words per call; no allocation, no system call.
#pragma once

#include <cstdint>
#include <atomic>
#include <thread>
#include <string>
#include <vector>

#include "link/link.hpp"

namespace ds4tp::group {

constexpr int kFlightCalls = 256;
constexpr int kFlightRanks = link::kMaxMembers;
constexpr int32_t kUnknownArrival = INT32_MIN;

struct FlightCall {
  uint64_t index = 0;  // the call's number on this group (1, 2, ...)
  uint32_t call = 0;   // its call word (call.hpp)
  uint64_t bytes = 0;  // payload bytes this rank gave the others and got
  uint64_t start_ns = 0;  // this rank's entry, group clock
  uint64_t duration_ns = 0;
  int32_t rc = 0;
  const char *algorithm = "";  // static text: "one-shot", "ring", ...; "" where none is chosen
  int ranks = 0;
  // Rank r's entry after the earliest rank's, microseconds; kUnknownArrival
  // where this rank did not hear it.
  int32_t arrival_us[kFlightRanks] = {};
  int last = -1;  // last_arrival()
  char error[192] = {};  // where rc != 0
};

// Arrival offsets of `ranks` ranks from the marks a call's lanes heard
// and this rank's own mark: each heard rank's entry after the earliest
// one's (marks wrap after 71 minutes; offsets are taken as signed 32-bit
// differences from this rank's).
void arrivals_of(int me, uint32_t my_mark, const link::Marks *const *lanes, int lane_count,
                 int ranks, int32_t *arrival_us);
// The latest of `mine` and the marks heard (wrapping differences).
uint32_t latest_mark(uint32_t mine, const link::Marks &heard);
// The rank that entered last, strictly after every other; -1 when a rank
// is unknown or two tie.
int last_arrival(const int32_t *arrival_us, int ranks);

// Context the dump prints above the calls.
struct FlightHeader {
  int rank = 0, size = 0;
  std::string plan;
  int64_t clock_offset_ns = 0;     // added to this rank's clock for rank 0's
  uint64_t clock_uncertainty_ns = 0;
  bool clock_measured = false;     // false: on rank 0's host (the same clock)
};

class FlightRecorder {
 public:
  FlightRecorder() : ring_(kFlightCalls) {}
  // Fills the next entry through `fill` under the lock.
  template <typename Fill>
  void record(Fill fill) {
    Hold h(busy_);
    FlightCall &c = ring_[size_t(n_ % kFlightCalls)];
    fill(c);
    n_++;
  }
  uint64_t recorded() const {
    Hold h(busy_);
    return n_;
  }
  // The kept calls, oldest first.
  std::vector<FlightCall> calls() const;
  // The operator's text, and the Chrome trace (ts: group clock, so the
  // ranks' files line up; pid: rank).
  // `last`: only the newest that many calls (0: all kept).
  std::string text(const FlightHeader &h, size_t last = 0) const;
  std::string trace(const FlightHeader &h) const;
  // `path` gets the text and `path`.json the trace; false with `why`.
  bool write(const std::string &path, const FlightHeader &h, std::string &why) const;

 private:
  // One atomic exchange to take, a store to give back: cheaper than a
  // mutex on the call path, and a dump holds it only to copy the ring.
  struct Hold {
    explicit Hold(std::atomic_flag &f) : f_(f) {
      while (f_.test_and_set(std::memory_order_acquire)) std::this_thread::yield();
    }
    ~Hold() { f_.clear(std::memory_order_release); }
    std::atomic_flag &f_;
  };
  mutable std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  std::vector<FlightCall> ring_;
  uint64_t n_ = 0;
};

}  // namespace ds4tp::group
