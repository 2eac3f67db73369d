// extern "C" observability calls of a pair: snapshots, reset, Prometheus
// text, traces. The group's are in group.cpp, over the same helpers.
#include "stats.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include "convert.hpp"
#include "handle.hpp"
#include "stats/trace.hpp"

namespace ds4tp::capi {

namespace {

void hist_to_c(const stats::HistSnap &h, ds4tp_stats_hist &o) {
  static_assert(DS4TP_STATS_BUCKETS == stats::kBuckets);
  o.count = h.count;
  o.sum_ns = h.sum_ns;
  for (int i = 0; i < stats::kBuckets; i++) o.buckets[i] = h.bucket[i];
}

}  // namespace

int stats_to_c(const stats::Snapshot &s, int rank, int transport, ds4tp_stats *st, Error &err) {
  if (st == nullptr) return err.set(DS4TP_EINVAL, "stats: the ds4tp_stats pointer is NULL");
  const uint32_t size = st->size;
  if (size < 16 || size > (1u << 16))
    return err.set(DS4TP_EINVAL, "ds4tp_stats size field {} is invalid: set it to sizeof(ds4tp_stats) ({})",
                   size, sizeof(ds4tp_stats));
  ds4tp_stats c{};
  c.size = uint32_t(sizeof c);
  c.rank = rank;
  c.transport = transport;
  c.row_gates = s.gates[stats::kRow];
  c.batch_gates = s.gates[stats::kBatch];
  c.big_gates = s.gates[stats::kBig];
  c.bytes_sent = s.bytes_sent;
  c.bytes_received = s.bytes_received;
  c.errors = s.errors;
  c.timeouts = s.timeouts;
  c.desyncs = s.desyncs;
  c.rdma_retries = s.rdma_retries;
  c.rdma_qp_recreated = s.rdma_qp_recreated;
  c.heartbeats_received = s.heartbeats_received;
  c.heartbeats_missed = s.heartbeats_missed;
  c.failovers = s.failovers;
  c.split_gates = s.split_gates;
  c.peer_wait_ns = s.peer_wait_ns;
  c.transfer_ns = s.transfer_ns;
  c.all_reduces = s.collectives[stats::cAllReduce];
  c.all_gathers = s.collectives[stats::cAllGather];
  c.broadcasts = s.collectives[stats::cBroadcast];
  c.barriers = s.collectives[stats::cBarrier];
  hist_to_c(s.hist[stats::hRow], c.row_gate);
  hist_to_c(s.hist[stats::hBatch], c.batch_gate);
  hist_to_c(s.hist[stats::hBig], c.big_gate);
  hist_to_c(s.hist[stats::hControl], c.control_round_trip);
  hist_to_c(s.hist[stats::hAllReduce], c.all_reduce);
  hist_to_c(s.hist[stats::hRowWait], c.row_peer_wait);
  hist_to_c(s.hist[stats::hHostStep], c.group_host_step);
  hist_to_c(s.hist[stats::hAcrossStep], c.group_across_step);
  c.waits = s.waits;
  c.wait_spin_ns = s.wait_ns[os::WaitTally::kSpin];
  c.wait_yield_ns = s.wait_ns[os::WaitTally::kYield];
  c.wait_sleep_ns = s.wait_ns[os::WaitTally::kSleep];
  static_assert(DS4TP_COLL_KINDS == stats::kColls && DS4TP_COLL_ALL_TO_ALL_V == stats::cAllToAllV);
  for (int k = 0; k < stats::kColls; k++) {
    c.collectives[k] = s.collectives[k];
    hist_to_c(s.hist[stats::hColl + k], c.collective[k]);
  }
  static_assert(DS4TP_STATS_RANKS == stats::kRanks);
  for (int r = 0; r < stats::kRanks; r++) {
    c.arrived_last[r] = s.arrived_last[r];
    hist_to_c(s.hist[stats::hLate + r], c.lateness[r]);
  }
  // An older caller's smaller struct gets its prefix; its size stays.
  std::memcpy(st, &c, size < sizeof c ? size : sizeof c);
  st->size = size < sizeof c ? size : uint32_t(sizeof c);
  return DS4TP_OK;
}

int prometheus_to_c(const stats::Snapshot &s, int rank, int transport, bool group, char *buf,
                    size_t cap, size_t *needed, Error &err) {
  std::string labels = "rank=\"" + std::to_string(rank) + "\",transport=\"" +
                       ds4tp_transport_name(transport) + "\"";
  std::string text;
  text.reserve(16384);
  stats::prometheus(s, labels, group, text);
  return text_to_c(text, buf, cap, needed, "stats_prometheus", err);
}

}  // namespace ds4tp::capi

using namespace ds4tp::capi;
using ds4tp::Error;

extern "C" {

int ds4tp_stats_read(const ds4tp_pair *pair, ds4tp_stats *st) {
  auto *p = const_cast<ds4tp_pair *>(pair);
  if (int rc = check_pair(p)) return rc;
  return guarded(p, [&]() -> int {
    ds4tp::stats::Snapshot s;
    p->impl->stats().snapshot(s);
    Error err;
    int rc = stats_to_c(s, p->impl->rank(), p->impl->transport(), st, err);
    return rc == DS4TP_OK ? rc : finish(p, rc, err);
  });
}

int ds4tp_links(const ds4tp_pair *pair, ds4tp_link_info *links, int cap, size_t entry_size) {
  auto *p = const_cast<ds4tp_pair *>(pair);
  if (int rc = check_pair(p)) return rc;
  return guarded(p, [&]() -> int {
    Error err;
    if (cap < 0 || (cap > 0 && (links == nullptr || entry_size < sizeof(int32_t) ||
                                entry_size > (1u << 16))))
      return finish(p, err.set(DS4TP_EINVAL, "ds4tp_links: links NULL, cap {} or entry size {} "
                                             "(sizeof(ds4tp_link_info) is {})",
                               cap, entry_size, sizeof(ds4tp_link_info)),
                    err);
    if (!p->impl->connected())
      return finish(p, err.set(DS4TP_ESTATE, "ds4tp_links needs a connected pair"), err);
    const auto all = p->impl->links();
    for (int i = 0; i < cap && size_t(i) < all.size(); i++) {
      const ds4tp::LinkInfo &l = all[size_t(i)];
      ds4tp_link_info c{};
      c.transport = l.transport;
      c.role = l.role;
      c.state = l.state;
      c.row = l.row ? 1 : 0;
      c.share = l.share;
      c.rate_mbit = l.rate_mbit;
      c.rtt_us = l.rtt_us;
      // An older caller's smaller entries get their prefix.
      std::memcpy(reinterpret_cast<uint8_t *>(links) + size_t(i) * entry_size, &c,
                  entry_size < sizeof c ? entry_size : sizeof c);
    }
    return int(all.size());
  });
}

int ds4tp_stats_reset(ds4tp_pair *pair) {
  if (int rc = check_pair(pair)) return rc;
  pair->impl->stats_reset();
  return DS4TP_OK;
}

uint64_t ds4tp_stats_bucket_le_ns(int i) {
  if (i < 0 || i >= ds4tp::stats::kFinite) return UINT64_MAX;
  return ds4tp::stats::bucket_le_ns(i);
}

int ds4tp_stats_prometheus(const ds4tp_pair *pair, char *buf, size_t cap, size_t *needed) {
  auto *p = const_cast<ds4tp_pair *>(pair);
  if (int rc = check_pair(p)) return rc;
  return guarded(p, [&]() -> int {
    ds4tp::stats::Snapshot s;
    p->impl->stats().snapshot(s);
    Error err;
    int rc = prometheus_to_c(s, p->impl->rank(), p->impl->transport(), false, buf, cap, needed,
                             err);
    // A size query is not the pair's error: errmsg keeps what it said.
    if (rc == DS4TP_ENOMEM) t_last_error = err.message;
    return rc == DS4TP_OK || rc == DS4TP_ENOMEM ? rc : finish(p, rc, err);
  });
}

int ds4tp_trace_start(ds4tp_pair *pair, const char *path) {
  if (int rc = check_pair(pair)) return rc;
  if (path == nullptr) return invalid(pair, "ds4tp_trace_start: path is NULL");
  return guarded(pair, [&]() -> int {
    Error err;
    return finish(pair, pair->impl->trace_start(path, err), err);
  });
}

// Any thread, also on a failed pair: the message goes to the calling
// thread's last error, not the pair's.
int ds4tp_dump(const ds4tp_pair *pair, const char *path) {
  auto *p = const_cast<ds4tp_pair *>(pair);
  if (p == nullptr) return invalid(nullptr, "ds4tp_dump: pair is NULL");
  return guarded(p, [&]() -> int {
    Error err;
    const char *env = std::getenv("DS4TP_PAIR_DUMP");
    const char *at = path != nullptr ? path : env != nullptr ? env : "";
    return finish(nullptr, p->impl->dump(at, err), err);
  });
}

int ds4tp_dump_on_signal(ds4tp_pair *pair, int signo, const char *path) {
  if (pair == nullptr) return invalid(nullptr, "ds4tp_dump_on_signal: pair is NULL");
  return guarded(pair, [&]() -> int {
    Error err;
    return finish(nullptr, pair->impl->dump_on_signal(signo, path != nullptr ? path : "", err),
                  err);
  });
}

int ds4tp_trace_write(ds4tp_pair *pair) {
  if (int rc = check_pair(pair)) return rc;
  return guarded(pair, [&]() -> int {
    Error err;
    return finish(pair, pair->impl->trace_write(err), err);
  });
}

int ds4tp_trace_merge(const char *a, const char *b, const char *out, double *offset_us,
                      double *uncertainty_us) {
  if (a == nullptr || b == nullptr || out == nullptr)
    return invalid(nullptr, "ds4tp_trace_merge: a path is NULL");
  return guarded(nullptr, [&]() -> int {
    ds4tp::stats::MergeResult r;
    std::string why;
    Error err;
    if (!ds4tp::stats::merge_traces(a, b, out, r, why))
      return finish(nullptr, err.set(DS4TP_EIO, "trace merge: {}", why), err);
    if (offset_us != nullptr) *offset_us = r.offset_us;
    if (uncertainty_us != nullptr) *uncertainty_us = r.uncertainty_us;
    return DS4TP_OK;
  });
}

}  // extern "C"
