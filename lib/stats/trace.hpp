// Gate and control events in preallocated rings, written as Chrome trace /
// Perfetto JSON ("traceEvents", one "X" event per gate, pid = rank, ts in
// microseconds of CLOCK_MONOTONIC).
//
// Each ring has one writer: the gate ring the gate thread, the control
// ring the control thread. Recording is a store into the ring (the oldest
// events are overwritten once it is full); write() may run while gates
// run only from the gate thread. Nothing here allocates after creation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds4tp::stats {

struct Event {
  uint64_t t0 = 0, t1 = 0;   // monotonic ns
  uint64_t seen = 0;         // the peer's first data, 0 when unknown
  uint64_t seq = 0, bytes = 0;
  const char *name = "";     // static text
  uint32_t a = 0;            // layer or batch index
  int32_t rc = 0;
  int16_t kind = -1;         // Kind, or -1 for control
};

struct TraceMeta {
  int rank = 0;
  std::string role, transport, host_id;
  uint32_t gates_per_token = 0;
};

class Trace {
 public:
  // Rings of `capacity` events each (rounded up to a power of two).
  Trace(std::string path, uint32_t capacity);
  void gate(const Event &e) { put(gate_, gate_n_, e); }
  void control(const Event &e) { put(ctl_, ctl_n_, e); }
  uint64_t gate_events() const { return gate_n_; }
  const std::string &path() const { return path_; }
  // Writes the file (replacing it); false with the reason in `why`.
  bool write(const TraceMeta &m, std::string &why) const;

 private:
  void put(std::vector<Event> &ring, uint64_t &n, const Event &e) {
    ring[n & mask_] = e;
    n++;
  }
  std::string path_;
  uint64_t mask_;
  std::vector<Event> gate_, ctl_;
  uint64_t gate_n_ = 0, ctl_n_ = 0;
};

// `p` with every "%r" replaced by `rank`.
std::string path_with_rank(std::string p, int rank);
// The DS4TP_TRACE path with "%r" replaced by `rank`; empty when unset.
std::string trace_path_from_env(int rank);

// `ds4tp trace merge`: the second file's clock is shifted onto the first's.
// On one host (same host_id) the shift is 0; otherwise it is estimated from
// gates both traces hold: each rank's gate can only end after the peer's
// began, so offset = ts_a - ts_b lies in [a.begin - b.end, a.end - b.begin]
// for every shared gate; the midpoint of the intersection is used.
struct MergeResult {
  double offset_us = 0;     // added to the second file's timestamps
  double uncertainty_us = 0;  // half the interval's width
  uint64_t matched = 0;     // gates found in both
  bool same_host = false;
};
bool merge_traces(const std::string &a, const std::string &b, const std::string &out,
                  MergeResult &res, std::string &why);

}  // namespace ds4tp::stats
