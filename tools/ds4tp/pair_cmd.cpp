// ds4tp pair: two hosts pair as an engine would, run row gates and big
// gates with every payload verified, and report each link's latency and
// rate. A pair with a standby link that fails over mid-run (for real, or
// given up on purpose with --fail-primary-after) reports both links and
// how long the gate that moved took.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli.hpp"

namespace ds4tp_cli {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t failovers(ds4tp_pair *tp) {
  ds4tp_stats st{};
  st.size = sizeof st;
  return ds4tp_stats_read(tp, &st) == DS4TP_OK ? st.failovers : 0;
}

float pattern(int rank, uint64_t seq, uint64_t i) {
  uint64_t x = (uint64_t(rank) << 60) ^ (seq * 0x9e3779b97f4a7c15ull) ^ (i * 0xbf58476d1ce4e5b9ull);
  x ^= x >> 31;
  uint32_t bits = uint32_t(x) & 0x3fffffffu;  // finite, no NaN patterns
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// One link's share of the run: the row gates it carried and its big-gate rate.
struct Link {
  int transport = 0;
  uint64_t first_gate = 0;
  std::vector<double> lat;  // us, sorted once the run ends
  double big_gbps = 0;
  double at(double q) const { return lat.empty() ? 0 : lat[std::min(lat.size() - 1, size_t(double(lat.size()) * q))]; }
};

struct PairResult {
  int rc = 0;
  std::string step, error;
  int transport = 0;  // negotiated at bring-up
  uint64_t gates = 0;
  double p50 = 0, p99 = 0, max = 0, big_gbps = 0;  // every row gate; the last big test
  std::vector<Link> links;
  uint64_t failover_at = 0;  // the row gate that moved to the standby link
  double failover_ms = 0;    // how long that gate took
  std::string metrics;       // Prometheus text (--metrics)
  std::vector<ds4tp_link_info> data_links;  // ds4tp_links after the run
};

int fail(PairResult &r, const char *step, int rc, const char *msg) {
  r.rc = rc;
  r.step = step;
  r.error = msg ? msg : "";
  return rc;
}

// Three big gates of a.big bytes from `round`: the best rate, or an error.
int big_test(ds4tp_pair *tp, const Args &a, uint64_t &round, PairResult &r, double &gbps) {
  const int rank = ds4tp_rank(tp);
  std::vector<uint8_t> out(a.big), in(a.big);
  for (uint64_t i = 0; i < a.big; i++) out[i] = uint8_t((i * 131 + 7) ^ uint64_t(rank));
  gbps = 0;
  for (int k = 0; k < 3; k++) {
    auto t0 = Clock::now();
    int rc = ds4tp_big_gate_exchange(tp, 0, ++round, out.data(), in.data(), a.big);
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (rc) return fail(r, "big gate", rc, ds4tp_errmsg(tp));
    for (uint64_t i = 0; i < a.big; i++)
      if (in[i] != uint8_t((i * 131 + 7) ^ uint64_t(1 - rank)))
        return fail(r, "big gate", DS4TP_EIO, "big gate payload corrupted: the link altered data");
    gbps = std::max(gbps, double(a.big) / s / 1e9);
  }
  return 0;
}

int run_pair(const Args &a, const IdentitySpec &spec, PairResult &r, LogCtx &lc) {
  ds4tp_options opt;
  ds4tp_options_init(&opt);
  opt.role = a.role;
  opt.transport = a.transport;
  opt.connect_timeout_ms = a.timeout_s * 1000;
  opt.log_fn = log_cb;
  opt.log_user_data = &lc;
  opt.log_level = a.quiet ? DS4TP_LOG_WARN : DS4TP_LOG_INFO;
  opt.failover = a.failover ? 1 : 0;
  if (!a.rails.empty()) opt.rails = a.rails.c_str();
  if (!a.rdma_rails.empty()) opt.rdma_rails = a.rdma_rails.c_str();
  if (a.role == DS4TP_ROLE_LEADER) {
    opt.listen_host = a.host.c_str();
    opt.listen_port = a.port;
  } else {
    opt.leader_host = a.host.c_str();
    opt.leader_port = a.port;
  }
  if (!a.rdma_device.empty()) opt.rdma_device = a.rdma_device.c_str();
  opt.rdma_gid_index = a.rdma_gid_index;
  if (!a.key_file.empty()) opt.psk_file = a.key_file.c_str();
  // The library's test hook counts every gate from 1: the first big test
  // (three gates) comes before the row gates in such a run.
  if (a.fail_after > 0) {
    const std::string at = std::to_string(a.fail_after + 1 + (a.big > 0 ? 3 : 0));
    setenv("DS4TP_FAILOVER_DRILL", at.c_str(), 1);
  }

  ds4tp_pair *tp = nullptr;
  int rc = ds4tp_new(&tp, &opt, &spec.id);
  if (rc) return fail(r, "setup", rc, ds4tp_last_error());
  struct Free {
    ds4tp_pair *p;
    ~Free() { ds4tp_free(p); }
  } guard{tp};
  if (a.role == DS4TP_ROLE_LEADER && !a.json)
    std::fprintf(stderr, "ds4tp: waiting up to %d s for the other host: run there\n"
                         "         ds4tp pair --connect THIS_HOST:%d\n",
                 a.timeout_s, ds4tp_listen_port(tp));
  rc = ds4tp_connect(tp);
  if (rc) return fail(r, "bring-up", rc, ds4tp_errmsg(tp));
  r.transport = ds4tp_transport_active(tp);
  if (!a.trace.empty()) {
    std::string path = a.trace;
    for (size_t at; (at = path.find("%r")) != std::string::npos;)
      path.replace(at, 2, std::to_string(ds4tp_rank(tp)));
    if ((rc = ds4tp_trace_start(tp, path.c_str()))) return fail(r, "trace", rc, ds4tp_errmsg(tp));
  }
  rc = ds4tp_attach_slab(tp, nullptr, 0);
  if (rc) return fail(r, "slab", rc, ds4tp_errmsg(tp));
  // Both ranks learn whether either gives its primary up: both links are
  // then measured, the primary's rate before the row gates.
  uint64_t mine = a.fail_after, theirs = 0;
  if ((rc = ds4tp_small_exchange(tp, &mine, &theirs, sizeof mine)))
    return fail(r, "plan", rc, ds4tp_errmsg(tp));
  const bool two_links = mine != 0 || theirs != 0;
  r.links.push_back(Link{r.transport, 1, {}, 0});
  uint64_t round = 0;
  if (two_links && a.big > 0 && big_test(tp, a, round, r, r.links[0].big_gbps)) return r.rc;

  auto *slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
  int rank = ds4tp_rank(tp);
  uint64_t floats = uint64_t(spec.id.n_embd);
  std::vector<double> lat;
  lat.reserve(a.count);
  for (uint64_t seq = 1; seq <= a.count; seq++) {
    int64_t slot = ds4tp_schedule_slot(&spec.id, seq);
    uint32_t layer = uint32_t(slot / 2), gate = uint32_t(slot % 2);
    auto *out = reinterpret_cast<float *>(slab + ds4tp_slab_out_offset(tp, layer, gate));
    auto *in = reinterpret_cast<float *>(slab + ds4tp_slab_in_offset(tp, layer, gate));
    for (uint64_t i = 0; i < floats; i++) out[i] = pattern(rank, seq, i);
    auto t0 = Clock::now();
    rc = ds4tp_gate_exchange(tp, layer, gate, seq);
    auto t1 = Clock::now();
    if (rc) return fail(r, "gate test", rc, ds4tp_errmsg(tp));
    const double us = std::chrono::duration<double, std::micro>(t1 - t0).count();
    lat.push_back(us);
    // A failover shows as another transport, or (tcp rails to the tcp
    // standby) in the count, read only when a failover is being tested.
    const int now = ds4tp_transport_active(tp);
    if (now != r.links.back().transport || (two_links && failovers(tp) >= r.links.size())) {
      r.failover_at = seq;
      r.failover_ms = us / 1000;
      r.links.push_back(Link{now, seq + 1, {}, 0});  // the moving gate counts for neither
    } else {
      r.links.back().lat.push_back(us);
    }
    for (uint64_t i = 0; i < floats; i++) {
      float want = pattern(1 - rank, seq, i);
      if (std::memcmp(&in[i], &want, 4) != 0) {
        char msg[160];
        std::snprintf(msg, sizeof msg,
                      "gate seq %" PRIu64 " payload corrupted at float %" PRIu64
                      ": the link altered data",
                      seq, i);
        return fail(r, "gate test", DS4TP_EIO, msg);
      }
    }
    if (!a.json && !a.quiet && a.count >= 1000 && seq % (a.count / 4) == 0)
      std::fprintf(stderr, "ds4tp: gate test %" PRIu64 "/%" PRIu64 "\n", seq, a.count);
  }
  r.gates = a.count;
  std::sort(lat.begin(), lat.end());
  r.p50 = lat[lat.size() / 2];
  r.p99 = lat[std::min(lat.size() - 1, lat.size() * 99 / 100)];
  r.max = lat.back();
  for (Link &l : r.links) std::sort(l.lat.begin(), l.lat.end());

  if (a.big > 0 && (r.links.size() > 1 || !two_links)) {
    if (big_test(tp, a, round, r, r.links.back().big_gbps)) return r.rc;
    r.big_gbps = r.links.back().big_gbps;
  }
  ds4tp_link_info li[8];
  const int nl = ds4tp_links(tp, li, 8, sizeof li[0]);
  for (int i = 0; i < nl && i < 8; i++) r.data_links.push_back(li[i]);
  if (!a.trace.empty() && (rc = ds4tp_trace_write(tp)))
    return fail(r, "trace", rc, ds4tp_errmsg(tp));
  if (a.metrics) {
    size_t need = 0;
    ds4tp_stats_prometheus(tp, nullptr, 0, &need);
    r.metrics.assign(need + 1, '\0');
    if ((rc = ds4tp_stats_prometheus(tp, r.metrics.data(), r.metrics.size(), &need)))
      return fail(r, "metrics", rc, ds4tp_errmsg(tp));
    r.metrics.resize(need);
  }
  return 0;
}

const char *role_name(int role) {
  return role == DS4TP_LINK_RAIL ? "rail" : role == DS4TP_LINK_STANDBY ? "standby" : "data";
}
const char *state_name(int state) { return state > 0 ? "carries gates" : state == 0 ? "idle" : "lost"; }

void print_json(const Args &a, const IdentitySpec &spec, const PairResult &r) {
  const char *role = a.role == DS4TP_ROLE_LEADER ? "leader" : "worker";
  std::printf("{\"ok\":%s,\"role\":\"%s\",\"transport\":\"%s\"", r.rc ? "false" : "true", role,
              ds4tp_transport_name(r.transport));
  if (r.rc) {
    std::printf(",\"step\":\"%s\",\"status\":\"%s\",\"error\":\"%s\"}\n", r.step.c_str(),
                ds4tp_err_name(r.rc), json_escape(r.error).c_str());
    return;
  }
  std::printf(",\"gate_bytes\":%" PRIu64 ",\"gates\":%" PRIu64
              ",\"gate_p50_us\":%.2f,\"gate_p99_us\":%.2f,\"gate_max_us\":%.2f,"
              "\"big_gate_bytes\":%" PRIu64 ",\"big_gate_gbps\":%.3f",
              uint64_t(spec.id.n_embd) * 4, r.gates, r.p50, r.p99, r.max, a.big, r.big_gbps);
  std::printf(",\"links\":[");
  for (size_t i = 0; i < r.links.size(); i++) {
    const Link &l = r.links[i];
    std::printf("%s{\"transport\":\"%s\",\"first_gate\":%" PRIu64 ",\"gates\":%zu,"
                "\"gate_p50_us\":%.2f,\"gate_p99_us\":%.2f,\"big_gate_gbps\":%.3f}",
                i ? "," : "", ds4tp_transport_name(l.transport), l.first_gate, l.lat.size(),
                l.at(0.5), l.at(0.99), l.big_gbps);
  }
  std::printf("],\"data_links\":[");
  for (size_t i = 0; i < r.data_links.size(); i++) {
    const ds4tp_link_info &l = r.data_links[i];
    std::printf("%s{\"transport\":\"%s\",\"role\":\"%s\",\"state\":\"%s\",\"row\":%s,"
                "\"share\":%u,\"rate_mbit\":%u,\"rtt_us\":%u}",
                i ? "," : "", ds4tp_transport_name(l.transport), role_name(l.role),
                state_name(l.state), l.row ? "true" : "false", l.share, l.rate_mbit, l.rtt_us);
  }
  std::printf("]");
  if (r.failover_at)
    std::printf(",\"failover_at_gate\":%" PRIu64 ",\"failover_gate_ms\":%.3f", r.failover_at,
                r.failover_ms);
  std::printf("}\n");
}

void print_text(const Args &a, const IdentitySpec &spec, const PairResult &r) {
  const char *role = a.role == DS4TP_ROLE_LEADER ? "leader" : "worker";
  if (r.failover_at == 0) {
    std::printf("ds4tp pair OK: %s, transport %s\n", role, ds4tp_transport_name(r.transport));
  } else {
    std::printf("ds4tp pair OK: %s, transport %s, then %s after a failover at gate %" PRIu64
                " (that gate took %.1f ms)\n",
                role, ds4tp_transport_name(r.transport),
                ds4tp_transport_name(r.links.back().transport), r.failover_at, r.failover_ms);
  }
  std::printf("  %" PRIu64 " gates of %" PRIu64 " bytes, every payload verified: p50 %.1f us, "
              "p99 %.1f us, max %.1f us\n",
              r.gates, uint64_t(spec.id.n_embd) * 4, r.p50, r.p99, r.max);
  if (r.links.size() > 1 || r.failover_at)
    for (const Link &l : r.links)
      std::printf("  link %-4s gates from %" PRIu64 ": %zu, p50 %.1f us, p99 %.1f us; big gate "
                  "%.2f GB/s per direction\n",
                  ds4tp_transport_name(l.transport), l.first_gate, l.lat.size(), l.at(0.5),
                  l.at(0.99), l.big_gbps);
  if (a.big)
    std::printf("  big gate %" PRIu64 " bytes each way: %.2f GB/s per direction\n", a.big,
                r.big_gbps);
  if (r.data_links.size() > 1)
    for (size_t i = 0; i < r.data_links.size(); i++) {
      const ds4tp_link_info &l = r.data_links[i];
      std::printf("  data link %zu: %s %s, %s%s", i, ds4tp_transport_name(l.transport),
                  role_name(l.role), state_name(l.state), l.row ? ", row gates" : "");
      if (l.role != DS4TP_LINK_STANDBY && l.rate_mbit)
        std::printf(", measured %u Mbit/s and %u us round trip, %u/1000 of each big gate",
                    l.rate_mbit, l.rtt_us, l.share);
      std::printf("\n");
    }
}

}  // namespace

int cmd_pair(const Args &a, const IdentitySpec &spec) {
  LogCtx lc{a.json};
  PairResult r;
  run_pair(a, spec, r, lc);
  if (a.json)
    print_json(a, spec, r);
  else if (r.rc)
    std::fprintf(stderr, "ds4tp pair FAILED at %s: %s: %s\n", r.step.c_str(), ds4tp_err_name(r.rc),
                 r.error.c_str());
  else
    print_text(a, spec, r);
  if (r.rc == 0 && a.metrics) std::fputs(r.metrics.c_str(), stdout);
  return r.rc ? 1 : 0;
}

}  // namespace ds4tp_cli
