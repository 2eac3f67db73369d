// Observability: counters match the work done exactly, histogram buckets
// sum to their counts, the Prometheus text follows the exposition format,
// and traces load as JSON with one X event per gate and merge.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "stats/stats.hpp"
#include "support/ranks.hpp"

using namespace ds4tp::test;
namespace st = ds4tp::stats;

namespace {

// Checks `text` against the text-format rules we rely on: every sample's
// family has HELP and TYPE lines before it; histogram le bounds rise,
// bucket counts are cumulative, +Inf equals _count. Returns "" or what
// broke, with the line.
std::string check_exposition(const std::string &text) {
  std::map<std::string, std::string> type;  // family -> type
  std::map<std::string, bool> help;
  std::istringstream in(text);
  std::string line;
  // Per histogram series (name + labels without le): last le, last count.
  std::map<std::string, std::pair<double, double>> last;
  std::map<std::string, double> inf;
  int n = 0;
  while (std::getline(in, line)) {
    n++;
    auto where = [&](const std::string &why) { return why + " at line " + std::to_string(n) + ": " + line; };
    if (line.empty()) return where("empty line");
    if (line.rfind("# HELP ", 0) == 0) {
      std::string fam = line.substr(7, line.find(' ', 7) - 7);
      if (help[fam]) return where("second HELP");
      help[fam] = true;
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::string rest = line.substr(7);
      std::string fam = rest.substr(0, rest.find(' '));
      std::string t = rest.substr(rest.find(' ') + 1);
      if (t != "counter" && t != "gauge" && t != "histogram") return where("bad type");
      if (type.count(fam)) return where("second TYPE");
      type[fam] = t;
      continue;
    }
    if (line[0] == '#') return where("unknown comment");
    size_t brace = line.find('{'), close = line.find("} ");
    if (brace == std::string::npos || close == std::string::npos) return where("no labels");
    std::string name = line.substr(0, brace);
    std::string labels = line.substr(brace + 1, close - brace - 1);
    char *end = nullptr;
    std::string vs = line.substr(close + 2);
    double v = std::strtod(vs.c_str(), &end);
    if (end == vs.c_str() || *end != 0) return where("bad value");
    for (char c : name)
      if (!(std::isalnum((unsigned char)c) || c == '_' || c == ':')) return where("bad name");
    std::string fam = name;
    for (const char *suf : {"_bucket", "_sum", "_count"})
      if (!type.count(fam) && fam.size() > std::strlen(suf) &&
          fam.compare(fam.size() - std::strlen(suf), std::string::npos, suf) == 0)
        fam = fam.substr(0, fam.size() - std::strlen(suf));
    if (!type.count(fam) || !help[fam]) return where("sample before its HELP/TYPE");
    if (type[fam] == "histogram" && name == fam + "_bucket") {
      size_t le = labels.find("le=\"");
      if (le == std::string::npos) return where("bucket without le");
      std::string bound = labels.substr(le + 4, labels.find('"', le + 4) - le - 4);
      std::string series = fam + "{" + labels.substr(0, le) + "}";
      double b = bound == "+Inf" ? INFINITY : std::strtod(bound.c_str(), nullptr);
      auto it = last.find(series);
      if (it != last.end() && (b <= it->second.first || v < it->second.second))
        return where("le not rising or count not cumulative");
      last[series] = {b, v};
      if (bound == "+Inf") inf[series] = v;
    } else if (type[fam] == "histogram" && name == fam + "_count") {
      std::string lab = labels.empty() ? "" : labels + ",";
      std::string series = fam + "{" + lab + "}";
      if (!inf.count(series)) return where("_count without a +Inf bucket");
      if (inf[series] != v) return where("+Inf bucket differs from _count");
    }
  }
  if (n == 0) return "empty text";
  return "";
}

std::string prom(ds4tp_pair *tp) {
  size_t need = 0;
  int rc = ds4tp_stats_prometheus(tp, nullptr, 0, &need);
  if (rc != DS4TP_ENOMEM) return "size query returned " + std::to_string(rc);
  std::string s(need + 1, '\0');
  if (ds4tp_stats_prometheus(tp, s.data(), s.size(), &need) != DS4TP_OK) return "render failed";
  s.resize(need);
  return s;
}

bool hist_ok(const ds4tp_stats_hist &h) {
  uint64_t sum = 0;
  for (uint64_t b : h.buckets) sum += b;
  return sum == h.count;
}

constexpr uint64_t kRows = 64, kBatches = 10, kBigs = 3, kBigBytes = 300000, kControls = 3;

struct Work {
  uint64_t bytes = 0;
};

// Runs a known amount of work, then checks this rank's snapshot against it
// exactly. `trace` (may be empty) is traced.
int work_and_check(ds4tp_pair *tp, bool leader, const std::string &trace, Work &w) {
  CHILD_EXPECT_OK(ds4tp_connect(tp), tp);
  if (!trace.empty()) CHILD_EXPECT_OK(ds4tp_trace_start(tp, trace.c_str()), tp);
  CHILD_EXPECT_OK(ds4tp_attach_slab(tp, nullptr, 0), tp);
  ds4tp_slab_layout l{};
  l.size = sizeof l;
  CHILD_EXPECT_OK(ds4tp_slab_layout_get(tp, &l), tp);
  const uint32_t n_layer = l.slots / 2;
  for (uint64_t seq = 1; seq <= kRows; seq++) {
    uint32_t slot = uint32_t((seq - 1) % l.slots);
    CHILD_EXPECT_OK(ds4tp_gate_exchange(tp, slot / 2, slot % 2, seq), tp);
    w.bytes += l.vec_bytes;
  }
  for (uint64_t b = 1; b <= kBatches; b++) {
    uint32_t rows = uint32_t((b - 1) % DS4TP_BATCH_MAX_ROWS) + 1;
    CHILD_EXPECT_OK(ds4tp_batch_gate_exchange(tp, uint32_t(b % l.batch_gates), rows, b), tp);
    w.bytes += uint64_t(rows - 1) * l.vec_stride + l.vec_bytes;
  }
  std::vector<uint8_t> out(kBigBytes, 1), in(kBigBytes);
  for (uint64_t b = 1; b <= kBigs; b++) {
    CHILD_EXPECT_OK(ds4tp_big_gate_exchange(tp, b % n_layer, b, out.data(), in.data(), kBigBytes), tp);
    w.bytes += kBigBytes;
  }
  for (uint64_t s = 1; s <= kControls; s++) {
    if (leader) {
      CHILD_EXPECT_OK(ds4tp_send_session_create(tp, s, 1024), tp);
      int32_t status = -1;
      CHILD_EXPECT_OK(ds4tp_wait_ack(tp, s, &status), tp);
    } else {
      ds4tp_command cmd;
      ds4tp_command_init(&cmd);
      CHILD_EXPECT_OK(ds4tp_recv_command(tp, &cmd, 5000), tp);
      ds4tp_command_free(&cmd);
      CHILD_EXPECT_OK(ds4tp_send_ack(tp, DS4TP_ACK_DONE), tp);
    }
  }
  // Heartbeats come every 100 ms (peer_silence_ms 1000 / 4 at most).
  std::this_thread::sleep_for(std::chrono::milliseconds(350));

  ds4tp_stats s{};
  s.size = sizeof s;
  CHILD_EXPECT_OK(ds4tp_stats_read(tp, &s), tp);
  CHILD_EXPECT(s.size == sizeof s, tp);
  CHILD_EXPECT(s.rank == ds4tp_rank(tp) && s.transport == ds4tp_transport_active(tp), tp);
  CHILD_EXPECT(s.row_gates == kRows, tp, "row_gates %llu", (unsigned long long)s.row_gates);
  CHILD_EXPECT(s.batch_gates == kBatches, tp, "batch_gates %llu", (unsigned long long)s.batch_gates);
  CHILD_EXPECT(s.big_gates == kBigs, tp, "big_gates %llu", (unsigned long long)s.big_gates);
  CHILD_EXPECT(s.bytes_sent == w.bytes && s.bytes_received == w.bytes, tp,
               "bytes sent %llu received %llu, work %llu", (unsigned long long)s.bytes_sent,
               (unsigned long long)s.bytes_received, (unsigned long long)w.bytes);
  CHILD_EXPECT(s.row_gate.count == kRows && s.batch_gate.count == kBatches &&
                   s.big_gate.count == kBigs, tp);
  CHILD_EXPECT(hist_ok(s.row_gate) && hist_ok(s.batch_gate) && hist_ok(s.big_gate) &&
                   hist_ok(s.control_round_trip) && hist_ok(s.row_peer_wait),
               tp);
  CHILD_EXPECT(s.row_gate.sum_ns > 0 && s.big_gate.sum_ns > 0, tp);
  // tcp and shm both tell the peer's arrival apart, for every gate.
  CHILD_EXPECT(s.split_gates == kRows + kBatches + kBigs, tp, "split_gates %llu",
               (unsigned long long)s.split_gates);
  CHILD_EXPECT(s.row_peer_wait.count == kRows, tp);
  CHILD_EXPECT(s.peer_wait_ns + s.transfer_ns <=
                   s.row_gate.sum_ns + s.batch_gate.sum_ns + s.big_gate.sum_ns,
               tp);
  CHILD_EXPECT(s.control_round_trip.count == (leader ? kControls : 0), tp, "round trips %llu",
               (unsigned long long)s.control_round_trip.count);
  CHILD_EXPECT(s.heartbeats_received >= 1, tp, "heartbeats %llu",
               (unsigned long long)s.heartbeats_received);
  CHILD_EXPECT(s.errors == 0 && s.timeouts == 0 && s.desyncs == 0, tp);

  // An older caller's smaller struct gets the prefix it knows.
  ds4tp_stats small{};
  small.size = 64;
  CHILD_EXPECT_OK(ds4tp_stats_read(tp, &small), tp);
  CHILD_EXPECT(small.size == 64 && small.row_gates == kRows && small.big_gate.count == 0, tp);
  small.size = 4;
  CHILD_EXPECT_RC(ds4tp_stats_read(tp, &small), DS4TP_EINVAL, tp);

  std::string text = prom(tp);
  std::string bad = check_exposition(text);
  CHILD_EXPECT(bad.empty(), tp, "prometheus: %s", bad.c_str());
  char want[160];
  std::snprintf(want, sizeof want, "ds4tp_gates_total{rank=\"%d\",transport=\"%s\",kind=\"row\"} %llu\n",
                ds4tp_rank(tp), ds4tp_transport_name(ds4tp_transport_active(tp)),
                (unsigned long long)kRows);
  CHILD_EXPECT(text.find(want) != std::string::npos, tp, "missing %s", want);
  char tiny[8];
  size_t need = 0;
  CHILD_EXPECT_RC(ds4tp_stats_prometheus(tp, tiny, sizeof tiny, &need), DS4TP_ENOMEM, tp);
  CHILD_EXPECT(need == text.size(), tp);

  if (!trace.empty()) CHILD_EXPECT_OK(ds4tp_trace_write(tp), tp);
  // Reset: later snapshots start at zero.
  CHILD_EXPECT_OK(ds4tp_stats_reset(tp), tp);
  CHILD_EXPECT_OK(ds4tp_stats_read(tp, &s), tp);
  CHILD_EXPECT(s.row_gates == 0 && s.bytes_sent == 0 && s.row_gate.count == 0, tp);
  CHILD_EXPECT_OK(ds4tp_gate_exchange(tp, uint32_t(kRows % l.slots) / 2, uint32_t(kRows % l.slots) % 2, kRows + 1), tp);
  CHILD_EXPECT_OK(ds4tp_stats_read(tp, &s), tp);
  CHILD_EXPECT(s.row_gates == 1 && s.bytes_sent == l.vec_bytes && s.row_gate.count == 1, tp);
  return 0;
}

int python(const std::string &code) {
  std::string cmd = "/usr/bin/python3 -c '" + code + "'";
  return std::system(cmd.c_str());
}

}  // namespace

TEST_CASE("histogram buckets are log-spaced and sum to the count", "[stats]") {
  CHECK(st::bucket_of(0) == 0);
  CHECK(st::bucket_of(256) == 0);
  CHECK(st::bucket_of(257) == 1);
  CHECK(st::bucket_of(512) == 1);
  CHECK(st::bucket_of(513) == 2);
  CHECK(st::bucket_of(st::bucket_le_ns(st::kFinite - 1)) == st::kFinite - 1);
  CHECK(st::bucket_of(st::bucket_le_ns(st::kFinite - 1) + 1) == st::kFinite);
  CHECK(st::bucket_of(UINT64_MAX) == st::kFinite);
  for (int i = 0; i < st::kFinite; i++) {
    INFO("bucket " << i);
    CHECK(st::bucket_of(st::bucket_le_ns(i)) == i);
    CHECK(ds4tp_stats_bucket_le_ns(i) == st::bucket_le_ns(i));
  }
  CHECK(ds4tp_stats_bucket_le_ns(st::kFinite) == UINT64_MAX);
  st::Stats s;
  uint64_t sum = 0;
  for (uint64_t v = 1; v < (uint64_t(1) << 40); v = v * 3 + 1) {
    s.gate_done(st::kRow, 0, 1, 100, 1, 0, DS4TP_OK);  // t0 1: timed
    s.control_done("x", 10, 10 + v);
    sum += v;
  }
  st::Snapshot snap;
  s.snapshot(snap);
  uint64_t total = 0;
  for (uint64_t b : snap.hist[st::hControl].bucket) total += b;
  CHECK(total == snap.hist[st::hControl].count);
  CHECK(snap.hist[st::hControl].sum_ns == sum);
  CHECK(snap.gates[st::kRow] == snap.hist[st::hControl].count);
  std::string text;
  st::prometheus(snap, "rank=\"0\",transport=\"tcp\"", false, text);
  INFO(text);
  CHECK(check_exposition(text) == "");
  text.clear();
  st::prometheus(snap, "rank=\"1\",transport=\"shm\"", true, text);
  CHECK(check_exposition(text) == "");
  s.reset();
  s.snapshot(snap);
  CHECK(snap.hist[st::hControl].count == 0);
  CHECK(snap.gates[st::kRow] == 0);
}

TEST_CASE("the exposition checker catches broken text", "[stats]") {
  CHECK(check_exposition("x_total{a=\"1\"} 3\n") != "");  // no HELP/TYPE
  CHECK(check_exposition("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\n"
                         "h_bucket{le=\"0.5\"} 2\nh_bucket{le=\"+Inf\"} 2\nh_sum{} 1\nh_count{} 2\n") != "");
  CHECK(check_exposition("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\n"
                         "h_bucket{le=\"+Inf\"} 3\nh_sum{} 1\nh_count{} 2\n") != "");
}

TEST_CASE("stats count gates, bytes and round trips exactly, and traces load and merge", "[stats]") {
  int transport = GENERATE(from_range(local_transports()));
  if (transport == DS4TP_TRANSPORT_RDMA) return;  // the fake provider has its own suite
  CAPTURE(ds4tp_transport_name(transport));
  char dir[] = "/tmp/ds4tp-stats-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string a = std::string(dir) + "/leader.json", b = std::string(dir) + "/worker.json",
                    both = std::string(dir) + "/both.json";
  RankSetup s;
  s.transport = transport;
  Work lw;
  Outcome o = run_pair(
      s, [&](ds4tp_pair *tp, Ctx &) { return work_and_check(tp, true, a, lw); },
      [&](ds4tp_pair *tp, Ctx &) {
        Work w;
        return work_and_check(tp, false, b, w);
      });
  REQUIRE_RANKS_OK(o);

  // Each trace: valid JSON, one X event per gate, pid = rank.
  const std::string check =
      "import json,sys; d=json.load(open(sys.argv[1])); ev=d[\"traceEvents\"]; "
      "g=[e for e in ev if e.get(\"cat\")==\"gate\"]; "
      "assert all(e[\"ph\"]==\"X\" and e[\"pid\"]==int(sys.argv[2]) for e in g), \"ph/pid\"; "
      "n={k:sum(1 for e in g if e[\"name\"]==k) for k in (\"row gate\",\"batch gate\",\"big gate\")}; "
      "assert n=={\"row gate\":65,\"batch gate\":10,\"big gate\":3}, n; "
      "assert sum(1 for e in ev if e.get(\"cat\")==\"control\") == int(sys.argv[3]), \"control\"";
  CHECK(python(check + "' " + a + " 0 3 '") == 0);
  CHECK(python(check + "' " + b + " 1 0 '") == 0);
  double off = -1, unc = -1;
  INFO(ds4tp_last_error());
  REQUIRE(ds4tp_trace_merge(a.c_str(), b.c_str(), both.c_str(), &off, &unc) == DS4TP_OK);
  CHECK(off == 0.0);  // one host: one CLOCK_MONOTONIC
  CHECK(python("import json,sys; d=json.load(open(sys.argv[1])); "
               "p={e[\"pid\"] for e in d[\"traceEvents\"] if e.get(\"cat\")==\"gate\"}; "
               "assert p=={0,1}, p' " + both + " '") == 0);
  std::string rm = std::string("rm -rf ") + dir;
  CHECK(std::system(rm.c_str()) == 0);
}

TEST_CASE("trace merge estimates the offset of another host's clock", "[stats]") {
  char dir[] = "/tmp/ds4tp-merge-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string a = std::string(dir) + "/a.json", b = std::string(dir) + "/b.json",
                    both = std::string(dir) + "/both.json";
  // Rank 1's clock runs 5000 us behind; gates overlap within a few us.
  auto write = [](const std::string &p, int rank, double shift, const char *host) {
    FILE *f = std::fopen(p.c_str(), "w");
    std::fprintf(f, "{\"otherData\":{\"ds4tp_rank\":%d,\"host_id\":\"%s\"},\n\"traceEvents\":[\n", rank, host);
    for (int i = 1; i <= 20; i++)
      std::fprintf(f, "%s{\"name\":\"row gate\",\"cat\":\"gate\",\"ph\":\"X\",\"pid\":%d,\"tid\":1,"
                      "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"seq\":%d,\"layer\":0,\"bytes\":4,\"wait_us\":1,\"rc\":0}}",
                   i > 1 ? ",\n" : "", rank, 1000.0 * i + (rank ? 2 : 0) - shift, rank ? 8.0 : 10.0, i);
    std::fprintf(f, "\n]}\n");
    std::fclose(f);
  };
  write(a, 0, 0, "aa");
  write(b, 1, 5000, "bb");
  double off = 0, unc = 0;
  INFO(ds4tp_last_error());
  REQUIRE(ds4tp_trace_merge(a.c_str(), b.c_str(), both.c_str(), &off, &unc) == DS4TP_OK);
  CHECK(off == Approx(5000).margin(unc + 0.001));
  CHECK(unc < 10);
  std::string rm = std::string("rm -rf ") + dir;
  CHECK(std::system(rm.c_str()) == 0);
}

// A group's Prometheus text, asked for once without room (the size it needs).
static std::string group_prometheus(ds4tp_group *g) {
  size_t need = 0;
  CHECK(ds4tp_group_stats_prometheus(g, nullptr, 0, &need) == DS4TP_ENOMEM);
  std::string text(need + 1, '\0');
  REQUIRE(ds4tp_group_stats_prometheus(g, text.data(), text.size(), &need) == DS4TP_OK);
  text.resize(need);
  return text;
}

TEST_CASE("group stats count collectives and bytes exactly", "[stats][group]") {
  constexpr int n = 3;
  constexpr uint64_t kCount = 5000, kReduces = 7, kBigCount = 20000;  // 80000 bytes
  ds4tp_group *gs[n] = {};
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.chunk_bytes = 16 * 1024;  // 20000-byte reduces take two chunks
  o.op_timeout_ms = 5000;
  REQUIRE(ds4tp_group_new_local(gs, n, &o, nullptr) == DS4TP_OK);
  int rcs[n] = {};
  std::vector<std::thread> ts;
  for (int r = 0; r < n; r++)
    ts.emplace_back([&, r] {
      std::vector<float> buf(kCount, 1.0f);
      for (uint64_t i = 0; i < kReduces && rcs[r] == 0; i++)
        rcs[r] = ds4tp_group_all_reduce(gs[r], buf.data(), kCount, DS4TP_DTYPE_F32, DS4TP_OP_SUM);
      // One large enough to run two-shot (64 KiB and up): counted the same.
      std::vector<float> big(kBigCount, 1.0f);
      if (rcs[r] == 0)
        rcs[r] = ds4tp_group_all_reduce(gs[r], big.data(), kBigCount, DS4TP_DTYPE_F32, DS4TP_OP_SUM);
      if (rcs[r] == 0) rcs[r] = ds4tp_group_barrier(gs[r]);
    });
  for (auto &t : ts) t.join();
  for (int r = 0; r < n; r++) {
    INFO("rank " << r << ": " << ds4tp_group_errmsg(gs[r]));
    REQUIRE(rcs[r] == DS4TP_OK);
    ds4tp_stats s{};
    s.size = sizeof s;
    REQUIRE(ds4tp_group_stats_read(gs[r], &s) == DS4TP_OK);
    CHECK(s.rank == r);
    CHECK(s.all_reduces == kReduces + 1);
    CHECK(s.barriers == 1);
    CHECK(s.all_reduce.count == kReduces + 1);
    CHECK(hist_ok(s.all_reduce));
    CHECK(s.bytes_sent == (kReduces * kCount + kBigCount) * 4);
    CHECK(s.bytes_received == (kReduces * kCount + kBigCount) * 4 * (n - 1));
    CHECK(s.row_gates == 0);
    const std::string text = group_prometheus(gs[r]);
    INFO(text);
    CHECK(check_exposition(text) == "");
    CHECK(text.find("ds4tp_collectives_total{rank=\"" + std::to_string(r) +
                    "\",transport=\"shm\",kind=\"all_reduce\"} 8\n") != std::string::npos);
    REQUIRE(ds4tp_group_stats_reset(gs[r]) == DS4TP_OK);
    REQUIRE(ds4tp_group_stats_read(gs[r], &s) == DS4TP_OK);
    CHECK(s.all_reduces == 0);
    CHECK(s.all_reduce.count == 0);
  }
  for (auto *g : gs) ds4tp_group_free(g);
}

TEST_CASE("group stats count and time every collective kind, and name them in Prometheus",
          "[stats][group]") {
  constexpr int n = 3;
  constexpr uint64_t kBytes = 96;  // per rank and piece
  ds4tp_group *gs[n] = {};
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.op_timeout_ms = 5000;
  REQUIRE(ds4tp_group_new_local(gs, n, &o, nullptr) == DS4TP_OK);
  int rcs[n] = {};
  std::vector<std::thread> ts;
  for (int r = 0; r < n; r++)
    ts.emplace_back([&, r] {
      std::vector<uint8_t> in(n * kBytes, 1), out(n * kBytes * 2);
      const uint64_t parts[n] = {kBytes, 0, 2 * kBytes};  // uneven, one empty
      uint64_t counts[n], offs[n];
      for (int q = 0; q < n; q++) counts[q] = kBytes, offs[q] = uint64_t(q) * kBytes;
      auto go = [&](int rc) { if (rcs[r] == 0) rcs[r] = rc; };
      ds4tp_group *g = gs[r];
      go(ds4tp_group_reduce_scatter(g, in.data(), out.data(), kBytes / 4, DS4TP_DTYPE_I32,
                                    DS4TP_OP_MAX));
      go(ds4tp_group_reduce(g, in.data(), kBytes / 4, DS4TP_DTYPE_F32, DS4TP_OP_SUM, 1));
      go(ds4tp_group_gather(g, in.data(), out.data(), kBytes, 2));
      go(ds4tp_group_scatter(g, in.data(), out.data(), kBytes, 0));
      go(ds4tp_group_all_gather_v(g, in.data(), out.data(), parts));
      go(ds4tp_group_all_gather_rows(g, in.data(), out.data(), 2, kBytes / 2));
      go(ds4tp_group_all_to_all_v(g, in.data(), counts, offs, out.data(), counts, offs));
      go(ds4tp_group_all_gather(g, in.data(), out.data(), kBytes));
      go(ds4tp_group_broadcast(g, in.data(), kBytes, 0));
    });
  for (auto &t : ts) t.join();
  const uint64_t others = kBytes * (n - 1);
  for (int r = 0; r < n; r++) {
    INFO("rank " << r << ": " << ds4tp_group_errmsg(gs[r]));
    REQUIRE(rcs[r] == DS4TP_OK);
    ds4tp_stats s{};
    s.size = sizeof s;
    REQUIRE(ds4tp_group_stats_read(gs[r], &s) == DS4TP_OK);
    for (int k : {DS4TP_COLL_ALL_GATHER, DS4TP_COLL_BROADCAST, DS4TP_COLL_REDUCE_SCATTER,
                  DS4TP_COLL_REDUCE, DS4TP_COLL_GATHER, DS4TP_COLL_SCATTER,
                  DS4TP_COLL_ALL_GATHER_V, DS4TP_COLL_ALL_GATHER_ROWS,
                  DS4TP_COLL_ALL_TO_ALL_V}) {
      INFO("collective kind " << k);
      CHECK(s.collectives[k] == 1);
      CHECK(s.collective[k].count == 1);
      CHECK(hist_ok(s.collective[k]));
    }
    CHECK(s.collectives[DS4TP_COLL_ALL_REDUCE] == 0);
    CHECK(s.collectives[DS4TP_COLL_BARRIER] == 0);
    CHECK(s.all_gathers == 1);  // the older fields repeat their kinds
    CHECK(s.broadcasts == 1);
    // Payload bytes, kind by kind: what this rank gave the others.
    const uint64_t part[n] = {kBytes, 0, 2 * kBytes};
    const uint64_t sent = others                                  // reduce_scatter
                          + (r == 1 ? 0 : kBytes)                 // reduce to rank 1
                          + (r == 2 ? 0 : kBytes)                 // gather to rank 2
                          + (r == 0 ? others : 0)                 // scatter from rank 0
                          + part[r] * (n - 1)                     // all_gather_v
                          + others                                // all_gather_rows
                          + others                                // all_to_all_v
                          + kBytes                                // all_gather
                          + (r == 0 ? kBytes : 0);                // broadcast from rank 0
    CHECK(s.bytes_sent == sent);
    const std::string text = group_prometheus(gs[r]);
    INFO(text);
    CHECK(check_exposition(text) == "");
    const std::string labels = "rank=\"" + std::to_string(r) + "\",transport=\"shm\"";
    for (const char *kind : {"reduce_scatter", "all_to_all_v", "all_gather_rows"}) {
      CHECK(text.find("ds4tp_collectives_total{" + labels + ",kind=\"" + kind + "\"} 1\n") !=
            std::string::npos);
      CHECK(text.find("ds4tp_collective_duration_seconds_count{" + labels + ",kind=\"" + kind +
                      "\"} 1\n") != std::string::npos);
    }
    // A kind the group never called has no histogram.
    CHECK(text.find("ds4tp_collective_duration_seconds_count{" + labels +
                    ",kind=\"barrier\"}") == std::string::npos);
  }
  for (auto *g : gs) ds4tp_group_free(g);
}
