// Counters and latency histograms of one pair or one group, and the hook
// the gate path calls once per gate.
//
// Cost on the hot path: every counter has one writer (the gate thread for
// gate counters, the control thread for round trips; errors may come from
// either and use fetch_add), so a bump is a relaxed load and store, no
// lock, no allocation, no system call. Readers (any thread) load relaxed;
// a snapshot taken while gates run may be one gate behind in some fields.
// reset() does not write the counters (that would race their writer): it
// keeps a baseline that snapshots subtract.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "os/wait_tally.hpp"

namespace ds4tp::stats {

class Trace;

// Log-spaced buckets: bucket 0 holds values <= 256 ns, bucket i values in
// (256 << (i-1), 256 << i] ns, up to 256 << 24 ns (4.3 s); the last bucket
// is everything above (+Inf).
constexpr int kFinite = 25;
constexpr int kBuckets = kFinite + 1;
constexpr uint64_t bucket_le_ns(int i) { return uint64_t(256) << i; }
inline int bucket_of(uint64_t ns) {
  if (ns <= 256) return 0;
  int b = 64 - __builtin_clzll(ns - 1) - 8;  // ceil(log2 ns) - 8
  return b < kFinite ? b : kFinite;
}

enum Kind : int { kRow = 0, kBatch = 1, kBig = 2, kGateKinds = 3 };
// Group collectives by kind, in the order of group::Kind (one less) and
// of the C API's DS4TP_COLL_*.
enum Coll : int { cAllReduce = 0, cAllGather, cBroadcast, cBarrier, cReduceScatter, cReduce,
                  cGather, cScatter, cAllGatherV, cAllGatherRows, cAllToAllV, kColls };
// A group's ranks, for the per-rank arrival series.
constexpr int kRanks = 16;
// Histograms: the three gate kinds, control round trips, the peer-wait
// part of row gates, a tiered group's collectives' time in their steps
// within a host and across hosts, each collective kind's latency (hColl
// + its Coll), then each rank's lateness (hLate + its rank).
enum Hist : int { hRow = 0, hBatch, hBig, hControl, hRowWait, hHostStep, hAcrossStep, hColl,
                  hLate = hColl + kColls, kHists = hLate + kRanks };
constexpr int hAllReduce = int(hColl) + int(cAllReduce);

const char *kind_name(int kind);  // "row", "batch", "big"
const char *hist_name(int hist);  // "row", ..., "control", "row_wait", ..., a collective's
const char *coll_name(int coll);  // "all_reduce", ..., "all_to_all_v"

// One writer: a relaxed load and store (no locked instruction).
inline void bump(std::atomic<uint64_t> &c, uint64_t n = 1) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

struct Histogram {
  std::atomic<uint64_t> bucket[kBuckets] = {};
  std::atomic<uint64_t> sum_ns{0};
  void record(uint64_t ns) {
    bump(bucket[bucket_of(ns)]);
    bump(sum_ns, ns);
  }
};

struct HistSnap {
  uint64_t count = 0;  // the sum of the buckets, so +Inf always equals it
  uint64_t sum_ns = 0;
  uint64_t bucket[kBuckets] = {};  // per bucket, not cumulative
};

// A plain copy of everything (what ds4tp_stats mirrors).
struct Snapshot {
  uint64_t gates[kGateKinds] = {};
  uint64_t bytes_sent = 0, bytes_received = 0;  // payload bytes, headers not counted
  uint64_t errors = 0, timeouts = 0, desyncs = 0;
  uint64_t rdma_retries = 0, rdma_qp_recreated = 0;
  uint64_t heartbeats_received = 0, heartbeats_missed = 0;
  uint64_t failovers = 0;  // primary links left for the standby
  uint64_t peer_wait_ns = 0, transfer_ns = 0, split_gates = 0;
  uint64_t collectives[kColls] = {};
  uint64_t arrived_last[kRanks] = {};  // group calls each rank entered after every other
  // Waits that did not end at once, and their time by os::WaitTally phase.
  uint64_t waits = 0;
  uint64_t wait_ns[os::WaitTally::kPhases] = {};
  HistSnap hist[kHists];
};

// Sources owned elsewhere that a snapshot reads (the pair's PeerState,
// the transport's set-up counters); any may be null.
struct Sources {
  const std::atomic<uint64_t> *heartbeats = nullptr;
  const std::atomic<uint64_t> *heartbeats_missed = nullptr;
  const std::atomic<uint64_t> *rdma_retries = nullptr;
  const std::atomic<uint64_t> *failovers = nullptr;
};

class Stats {
 public:
  // DS4TP_STATS=0 in the environment turns timing off (counters of gates
  // and bytes still count); for measuring what the clock reads cost.
  Stats();

  bool timed() const { return timed_ || trace_ != nullptr; }

  // After a gate of `kind` (layer or batch index `a`) that started at t0
  // (0 when untimed) and moved `bytes` each way; `seen` is when the peer's
  // first data showed (0: the transport cannot tell; UINT64_MAX: as the
  // gate ended, link::kSeenAtEnd). Gate thread only. Returns the end's
  // clock read (0 when untimed).
  uint64_t gate_done(int kind, uint32_t a, uint64_t seq, uint64_t bytes, uint64_t t0,
                 uint64_t seen, int rc);
  // A control reply arrived `t1 - t0` after its command left; control
  // thread only. `what` is a static frame name.
  void control_done(const char *what, uint64_t t0, uint64_t t1);
  // A group collective that began at t0 (0 when untimed) and ended at t1;
  // the group's one thread. `sent` and `received`: payload bytes this
  // rank gave the others and got from them.
  void collective_done(int coll, uint64_t sent, uint64_t received, uint64_t t0, uint64_t t1,
                       int rc);
  // A tiered collective's `ns` in the steps of hist hHostStep or
  // hAcrossStep; the group's one thread.
  void steps_done(int hist, uint64_t ns) { hist_[hist].record(ns); }
  // A completed group call's arrivals (group/flight.hpp): each known
  // rank's entry after the first one's (us; INT32_MIN: unknown) into its
  // lateness histogram, and `last` (-1: none) counted; the group's thread.
  void arrivals_done(const int32_t *arrival_us, int ranks, int last);
  // A latching failure's status (either thread).
  void failed_call(int rc);

  void set_sources(const Sources &s) { src_ = s; }
  // Where the handle's waits count their phases (WaitPolicy::tally):
  // `thread` 0 for the thread that calls into the handle, 1 for a second
  // one that steps links at the same time (a tiered leader's cross
  // worker). Null when timing is off (DS4TP_STATS=0): the tally's clock
  // read at the end of a wait is skipped with the others.
  os::WaitTally *wait_tally(int thread) { return timed_ ? &tallies_[thread] : nullptr; }
  void snapshot(Snapshot &out) const;
  void reset();

  // Tracing: the ring the hooks above also feed. Set only while no gate
  // or control call runs (or from the gate thread); owned by the caller.
  void set_trace(Trace *t) { trace_ = t; }
  Trace *trace() const { return trace_; }

 private:
  void raw(Snapshot &out) const;

  bool timed_ = true;
  Trace *trace_ = nullptr;
  std::atomic<uint64_t> gates_[kGateKinds] = {};
  std::atomic<uint64_t> sent_{0}, received_{0};
  std::atomic<uint64_t> errors_{0}, timeouts_{0}, desyncs_{0};
  std::atomic<uint64_t> wait_ns_{0}, transfer_ns_{0}, split_{0};
  std::atomic<uint64_t> coll_[kColls] = {};
  std::atomic<uint64_t> last_[kRanks] = {};
  os::WaitTally tallies_[2];
  Histogram hist_[kHists];
  Sources src_;
  mutable std::mutex mu_;  // the baseline; never taken by the hooks
  Snapshot base_;
};

// Prometheus text exposition of `s` (metric names ds4tp_*, histograms in
// seconds). `labels` are the constant labels, e.g. rank="0",transport="tcp"
// (without braces); `group` selects the group metrics (collectives) over
// the pair ones. Appends to `out`.
void prometheus(const Snapshot &s, const std::string &labels, bool group, std::string &out);

}  // namespace ds4tp::stats
