// Prometheus text exposition format (version 0.0.4): per family one HELP
// and one TYPE line, then its samples; histograms as cumulative
// _bucket{le="..."} lines ending with le="+Inf" (= _count), then _sum and
// _count. Durations in seconds, as Prometheus conventions ask.
#include <cinttypes>
#include <cstdio>

#include "stats/stats.hpp"

namespace ds4tp::stats {
namespace {

struct Out {
  const std::string &labels;
  std::string &s;

  void family(const char *name, const char *type, const char *help) {
    s += "# HELP ";
    s += name;
    s += ' ';
    s += help;
    s += "\n# TYPE ";
    s += name;
    s += ' ';
    s += type;
    s += '\n';
  }
  // name{labels[,extra]} value
  void sample(const char *name, const char *suffix, const char *extra, const char *value) {
    s += name;
    s += suffix;
    s += '{';
    s += labels;
    if (extra != nullptr && *extra != 0) {
      if (!labels.empty()) s += ',';
      s += extra;
    }
    s += "} ";
    s += value;
    s += '\n';
  }
  void u64(const char *name, const char *extra, uint64_t v) {
    char b[32];
    std::snprintf(b, sizeof b, "%" PRIu64, v);
    sample(name, "", extra, b);
  }
  void secs(const char *name, const char *extra, uint64_t ns) {
    char b[40];
    std::snprintf(b, sizeof b, "%.9f", double(ns) / 1e9);
    sample(name, "", extra, b);
  }
  void counter(const char *name, const char *help, uint64_t v) {
    family(name, "counter", help);
    u64(name, nullptr, v);
  }
  // One histogram series; `extra` labels it (kind="row"), may be empty.
  void hist(const char *name, const std::string &extra, const HistSnap &h) {
    uint64_t cum = 0;
    char lab[96], v[32];
    for (int i = 0; i < kFinite; i++) {
      cum += h.bucket[i];
      std::snprintf(lab, sizeof lab, "%s%sle=\"%.9g\"", extra.c_str(), extra.empty() ? "" : ",",
                    double(bucket_le_ns(i)) / 1e9);
      std::snprintf(v, sizeof v, "%" PRIu64, cum);
      sample(name, "_bucket", lab, v);
    }
    std::snprintf(lab, sizeof lab, "%s%sle=\"+Inf\"", extra.c_str(), extra.empty() ? "" : ",");
    std::snprintf(v, sizeof v, "%" PRIu64, h.count);
    sample(name, "_bucket", lab, v);
    std::snprintf(v, sizeof v, "%.9f", double(h.sum_ns) / 1e9);
    sample(name, "_sum", extra.c_str(), v);
    std::snprintf(v, sizeof v, "%" PRIu64, h.count);
    sample(name, "_count", extra.c_str(), v);
  }
};

std::string kind_label(const char *k) { return std::string("kind=\"") + k + "\""; }
std::string peer_label(int r) { return "peer_rank=\"" + std::to_string(r) + "\""; }

}  // namespace

void prometheus(const Snapshot &s, const std::string &labels, bool group, std::string &out) {
  Out o{labels, out};
  if (!group) {
    o.family("ds4tp_gates_total", "counter", "Gates completed, by kind.");
    for (int k = 0; k < kGateKinds; k++) o.u64("ds4tp_gates_total", kind_label(kind_name(k)).c_str(), s.gates[k]);
  } else {
    o.family("ds4tp_collectives_total", "counter", "Group collectives completed, by kind.");
    for (int c = 0; c < kColls; c++)
      o.u64("ds4tp_collectives_total", kind_label(coll_name(c)).c_str(), s.collectives[c]);
  }
  o.family("ds4tp_bytes_total", "counter", "Payload bytes moved, by direction (headers not counted).");
  o.u64("ds4tp_bytes_total", "direction=\"sent\"", s.bytes_sent);
  o.u64("ds4tp_bytes_total", "direction=\"received\"", s.bytes_received);
  o.counter("ds4tp_errors_total", "Calls that failed the handle.", s.errors);
  o.counter("ds4tp_timeouts_total", "Failures that were timeouts.", s.timeouts);
  o.counter("ds4tp_desyncs_total", "Failures that were lockstep desyncs.", s.desyncs);
  o.counter("ds4tp_waits_total", "Waits for a peer that did not end at once.", s.waits);
  o.family("ds4tp_wait_seconds_total", "counter",
           "Time those waits spent, by phase: spin (busy-polling), yield (yielding the CPU "
           "between polls), sleep (blocked in the kernel).");
  static const char *const phases[] = {"phase=\"spin\"", "phase=\"yield\"", "phase=\"sleep\""};
  for (int p = 0; p < os::WaitTally::kPhases; p++)
    o.secs("ds4tp_wait_seconds_total", phases[p], s.wait_ns[p]);
  if (!group) {
    o.counter("ds4tp_rdma_retries_total", "RDMA set-up attempts retried.", s.rdma_retries);
    o.counter("ds4tp_failovers_total", "Primary links left for the standby tcp link.", s.failovers);
    o.counter("ds4tp_rdma_qp_recreated_total", "RDMA queue pairs recreated.", s.rdma_qp_recreated);
    o.counter("ds4tp_heartbeats_received_total", "Heartbeats received from the peer.",
              s.heartbeats_received);
    o.counter("ds4tp_heartbeats_missed_total",
              "Heartbeat periods in which no heartbeat from the peer arrived.", s.heartbeats_missed);
    o.family("ds4tp_gate_peer_wait_seconds_total", "counter",
             "Time gates spent waiting for the peer's first data (where the transport tells).");
    o.secs("ds4tp_gate_peer_wait_seconds_total", nullptr, s.peer_wait_ns);
    o.family("ds4tp_gate_transfer_seconds_total", "counter",
             "Time gates spent moving bytes after the peer's first data showed.");
    o.secs("ds4tp_gate_transfer_seconds_total", nullptr, s.transfer_ns);
    o.family("ds4tp_gate_duration_seconds", "histogram", "Gate latency, by kind.");
    for (int k = 0; k < kGateKinds; k++)
      o.hist("ds4tp_gate_duration_seconds", kind_label(kind_name(k)), s.hist[k]);
    o.family("ds4tp_gate_peer_wait_duration_seconds", "histogram",
             "Row gates: wait for the peer's first data.");
    o.hist("ds4tp_gate_peer_wait_duration_seconds", kind_label("row"), s.hist[hRowWait]);
    o.family("ds4tp_control_round_trip_seconds", "histogram",
             "Leader: a command sent until its first reply frame read.");
    o.hist("ds4tp_control_round_trip_seconds", "", s.hist[hControl]);
  } else {
    o.family("ds4tp_all_reduce_duration_seconds", "histogram",
             "Group all-reduce latency (the same as ds4tp_collective_duration_seconds "
             "kind=\"all_reduce\").");
    o.hist("ds4tp_all_reduce_duration_seconds", "", s.hist[hAllReduce]);
    // Kinds the group never ran are left out: a serving group calls two or
    // three of them, and eleven empty histograms would bury those.
    o.family("ds4tp_collective_duration_seconds", "histogram",
             "Group collective latency, by kind (kinds not yet called are left out).");
    for (int c = 0; c < kColls; c++)
      if (s.collectives[c] != 0 || s.hist[hColl + c].count != 0)
        o.hist("ds4tp_collective_duration_seconds", kind_label(coll_name(c)), s.hist[hColl + c]);
    o.family("ds4tp_group_step_duration_seconds", "histogram",
             "Tiered groups: a collective's time in its shm steps within the host (step=host) "
             "and in the leaders' steps across hosts (step=across).");
    o.hist("ds4tp_group_step_duration_seconds", "step=\"host\"", s.hist[hHostStep]);
    o.hist("ds4tp_group_step_duration_seconds", "step=\"across\"", s.hist[hAcrossStep]);
    // Per rank of the group as this rank heard it (label peer_rank; rank
    // is the reporting one); ranks never heard are left out.
    o.family("ds4tp_group_arrived_last_total", "counter",
             "Group calls that peer_rank entered after every other rank.");
    for (int r = 0; r < kRanks; r++)
      if (s.hist[hLate + r].count != 0)
        o.u64("ds4tp_group_arrived_last_total", peer_label(r).c_str(), s.arrived_last[r]);
    o.family("ds4tp_group_lateness_seconds", "histogram",
             "How long after the first rank peer_rank entered each group call.");
    for (int r = 0; r < kRanks; r++)
      if (s.hist[hLate + r].count != 0)
        o.hist("ds4tp_group_lateness_seconds", peer_label(r), s.hist[hLate + r]);
  }
}

}  // namespace ds4tp::stats
