#include "stats/stats.hpp"

#include <cstdlib>
#include <cstring>

#include "common/clock.hpp"
#include "ds4tp/ds4tp.h"
#include "stats/trace.hpp"

namespace ds4tp::stats {

const char *kind_name(int kind) {
  static const char *const k[] = {"row", "batch", "big"};
  return kind >= 0 && kind < kGateKinds ? k[kind] : "?";
}

const char *hist_name(int hist) {
  static const char *const k[] = {"row",      "batch",     "big",        "control",
                                  "row_wait", "host_step", "across_step"};
  if (hist >= hLate) return "lateness";
  if (hist >= hColl) return coll_name(hist - hColl);
  return hist >= 0 ? k[hist] : "?";
}

const char *coll_name(int coll) {
  static const char *const k[] = {"all_reduce",   "all_gather", "broadcast",       "barrier",
                                  "reduce_scatter", "reduce",   "gather",          "scatter",
                                  "all_gather_v", "all_gather_rows", "all_to_all_v"};
  static_assert(sizeof k / sizeof k[0] == kColls);
  return coll >= 0 && coll < kColls ? k[coll] : "?";
}

Stats::Stats() {
  const char *v = std::getenv("DS4TP_STATS");
  if (v != nullptr && std::strcmp(v, "0") == 0) timed_ = false;
}

uint64_t Stats::gate_done(int kind, uint32_t a, uint64_t seq, uint64_t bytes, uint64_t t0,
                      uint64_t seen, int rc) {
  // One clock read per gate beyond the one before it; none when untimed.
  const uint64_t t1 = t0 != 0 ? now_ns() : 0;
  if (seen == UINT64_MAX) seen = t1;  // link::kSeenAtEnd: it all came at the end
  if (rc == DS4TP_OK) {
    bump(gates_[kind]);
    bump(sent_, bytes);
    bump(received_, bytes);
    if (t0 != 0) {
      hist_[kind].record(t1 - t0);
      if (seen >= t0 && seen <= t1) {
        bump(wait_ns_, seen - t0);
        bump(transfer_ns_, t1 - seen);
        bump(split_);
        if (kind == kRow) hist_[hRowWait].record(seen - t0);
      }
    }
  }
  if (trace_ != nullptr) {
    Event e;
    e.t0 = t0;
    e.t1 = t1;
    e.seen = seen >= t0 && seen <= t1 ? seen : 0;
    e.seq = seq;
    e.bytes = bytes;
    e.a = a;
    e.rc = rc;
    e.kind = int16_t(kind);
    trace_->gate(e);
  }
  return t1;
}

void Stats::control_done(const char *what, uint64_t t0, uint64_t t1) {
  hist_[hControl].record(t1 - t0);
  if (trace_ != nullptr) {
    Event e;
    e.t0 = t0;
    e.t1 = t1;
    e.name = what;
    trace_->control(e);
  }
}

void Stats::collective_done(int coll, uint64_t sent, uint64_t received, uint64_t t0,
                            uint64_t t1, int rc) {
  if (rc != DS4TP_OK) return;
  bump(coll_[coll]);
  bump(sent_, sent);
  bump(received_, received);
  if (t0 != 0) hist_[hColl + coll].record(t1 - t0);
}

void Stats::arrivals_done(const int32_t *arrival_us, int ranks, int last) {
  for (int r = 0; r < ranks && r < kRanks; r++)
    if (arrival_us[r] != INT32_MIN) hist_[hLate + r].record(uint64_t(arrival_us[r]) * 1000);
  if (last >= 0 && last < kRanks) bump(last_[last]);
}

void Stats::failed_call(int rc) {
  errors_.fetch_add(1, std::memory_order_relaxed);
  if (rc == DS4TP_ETIMEDOUT) timeouts_.fetch_add(1, std::memory_order_relaxed);
  if (rc == DS4TP_EDESYNC) desyncs_.fetch_add(1, std::memory_order_relaxed);
}

void Stats::raw(Snapshot &s) const {
  auto ld = [](const std::atomic<uint64_t> *c) {
    return c != nullptr ? c->load(std::memory_order_relaxed) : 0;
  };
  for (int k = 0; k < kGateKinds; k++) s.gates[k] = ld(&gates_[k]);
  s.bytes_sent = ld(&sent_);
  s.bytes_received = ld(&received_);
  s.errors = ld(&errors_);
  s.timeouts = ld(&timeouts_);
  s.desyncs = ld(&desyncs_);
  s.rdma_retries = ld(src_.rdma_retries);
  s.rdma_qp_recreated = s.rdma_retries;  // every retried set-up recreates the QP
  s.heartbeats_received = ld(src_.heartbeats);
  s.heartbeats_missed = ld(src_.heartbeats_missed);
  s.failovers = ld(src_.failovers);
  s.peer_wait_ns = ld(&wait_ns_);
  s.transfer_ns = ld(&transfer_ns_);
  s.split_gates = ld(&split_);
  for (int c = 0; c < kColls; c++) s.collectives[c] = ld(&coll_[c]);
  for (int r = 0; r < kRanks; r++) s.arrived_last[r] = ld(&last_[r]);
  s.waits = 0;
  for (auto &w : s.wait_ns) w = 0;
  for (const auto &t : tallies_) {
    s.waits += ld(&t.waits);
    for (int p = 0; p < os::WaitTally::kPhases; p++) s.wait_ns[p] += ld(&t.ns[p]);
  }
  for (int h = 0; h < kHists; h++) {
    HistSnap &o = s.hist[h];
    o.count = 0;
    for (int b = 0; b < kBuckets; b++) o.count += o.bucket[b] = ld(&hist_[h].bucket[b]);
    o.sum_ns = ld(&hist_[h].sum_ns);
  }
}

void Stats::snapshot(Snapshot &s) const {
  raw(s);
  std::lock_guard<std::mutex> l(mu_);
  const Snapshot &b = base_;
  for (int k = 0; k < kGateKinds; k++) s.gates[k] -= b.gates[k];
  s.bytes_sent -= b.bytes_sent;
  s.bytes_received -= b.bytes_received;
  s.errors -= b.errors;
  s.timeouts -= b.timeouts;
  s.desyncs -= b.desyncs;
  s.rdma_retries -= b.rdma_retries;
  s.rdma_qp_recreated -= b.rdma_qp_recreated;
  s.heartbeats_received -= b.heartbeats_received;
  s.heartbeats_missed -= b.heartbeats_missed;
  s.failovers -= b.failovers;
  s.peer_wait_ns -= b.peer_wait_ns;
  s.transfer_ns -= b.transfer_ns;
  s.split_gates -= b.split_gates;
  for (int c = 0; c < kColls; c++) s.collectives[c] -= b.collectives[c];
  for (int r = 0; r < kRanks; r++) s.arrived_last[r] -= b.arrived_last[r];
  s.waits -= b.waits;
  for (int p = 0; p < os::WaitTally::kPhases; p++) s.wait_ns[p] -= b.wait_ns[p];
  for (int h = 0; h < kHists; h++) {
    s.hist[h].count = 0;
    for (int i = 0; i < kBuckets; i++)
      s.hist[h].count += s.hist[h].bucket[i] -= b.hist[h].bucket[i];
    s.hist[h].sum_ns -= b.hist[h].sum_ns;
  }
}

void Stats::reset() {
  Snapshot now;
  raw(now);
  std::lock_guard<std::mutex> l(mu_);
  base_ = now;
}

}  // namespace ds4tp::stats
