// Every stall names its culprit: a rank made late on purpose (it sleeps
// before one chosen call) is the rank the per-rank stats, the Prometheus
// series and the flight recorder name, in every plan (shm, tcp, tiered
// across two hosts, whose second host aligns its clock with rank 0's);
// the recorder is written on demand, on a signal and when a call fails.
#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "ds4tp/ds4tp.h"
#include "group/clock_align.hpp"
#include "group/flight.hpp"
#include "support/files.hpp"
#include "support/group_util.hpp"

using namespace ds4tp;
using namespace ds4tp::test;

namespace {

constexpr int kCalls = 8;
constexpr int kLateCall = 4;        // the call (1..kCalls) the late rank sleeps before
constexpr int kLateMs = 200;        // how long it sleeps
constexpr int32_t kSeenUs = 100000;  // the least lateness any rank may see (half the sleep)

// The recorder's line for call `index`: its "last" column and arrivals.
bool call_line(const std::string &text, int index, std::string &last, std::string &arrivals) {
  std::istringstream in(text);
  const std::regex line("^\\s*" + std::to_string(index) + "\\s.*\\s(\\d+|-)  (0:.*)$");
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_match(l, m, line)) {
      last = m[1];
      arrivals = m[2];
      return true;
    }
  }
  return false;
}

// Rank `r`'s lateness in "0:+0 1:+3 2:+200123" (-1: not heard).
long arrival_of(const std::string &arrivals, int r) {
  const std::string key = std::to_string(r) + ":+";
  const size_t at = arrivals.find(key);
  if (at == std::string::npos || (at > 0 && arrivals[at - 1] != ' ')) return -1;
  return std::strtol(arrivals.c_str() + at + key.size(), nullptr, 10);
}

// kCalls all-reduces whose sizes walk the plan's algorithms; rank `late`
// sleeps before call kLateCall. Then: on ranks that hear it, the late
// rank's lateness histogram holds the sleep and the recorder's line for
// that call names it; `all_heard` (flat groups): it is counted last.
// `across` (tiered): rank 0, the other host's leader, sees that host's
// leader (rank `across`) late instead.
GroupBody late_body(int late, const std::vector<int> &hearing, bool all_heard,
                    const std::string &dir, int across = -1, int transport = -1) {
  return [=](ds4tp_group *g, int rank, uint64_t &, std::string &why) -> int {
    if (transport >= 0 && ds4tp_group_transport(g) != transport)
      return why = std::string("the group runs ") +
                   ds4tp_transport_name(ds4tp_group_transport(g)),
             DS4TP_EIO;
    const uint64_t counts[] = {256, 32768, 300000, 1024};  // 1 KiB .. 1.2 MB of f32
    for (int i = 1; i <= kCalls; i++) {
      std::vector<float> v(counts[i % 4], float(rank));
      if (rank == late && i == kLateCall) usleep(kLateMs * 1000);
      if (int rc = ds4tp_group_all_reduce(g, v.data(), v.size(), DS4TP_DTYPE_F32, DS4TP_OP_SUM)) {
        why = std::string("all_reduce: ") + ds4tp_group_errmsg(g);
        return rc;
      }
    }
    const bool hears = std::find(hearing.begin(), hearing.end(), rank) != hearing.end();
    ds4tp_stats st{};
    st.size = sizeof st;
    if (int rc = ds4tp_group_stats_read(g, &st)) return why = "stats_read", rc;
    const ds4tp_stats_hist &lateness = st.lateness[late];
    if (hears && (lateness.count != kCalls || lateness.sum_ns < kSeenUs * 1000ull))
      return why = "the late rank's lateness histogram holds " +
                   std::to_string(st.lateness[late].count) + " calls, " +
                   std::to_string(st.lateness[late].sum_ns) + " ns",
             DS4TP_EIO;
    if (all_heard && st.arrived_last[late] < 1)
      return why = "the late rank was never counted last", DS4TP_EIO;
    const std::string path = dir + "/flight-%r";
    if (int rc = ds4tp_group_dump(g, path.c_str()))
      return why = std::string("group_dump: ") + ds4tp_last_error(), rc;
    const std::string mine = dir + "/flight-" + std::to_string(rank);
    const std::string text = read_file(mine), trace = read_file(mine + ".json");
    std::string last, arrivals;
    if (!call_line(text, kLateCall, last, arrivals))
      return why = "no line for call " + std::to_string(kLateCall) + " in:\n" + text, DS4TP_EIO;
    if (hears && arrival_of(arrivals, late) < kSeenUs)
      return why = "call " + std::to_string(kLateCall) + "'s arrivals do not show rank " +
                   std::to_string(late) + " late: " + arrivals,
             DS4TP_EIO;
    if (across >= 0 && rank == 0 && arrival_of(arrivals, across) < kSeenUs)
      return why = "rank 0 does not see the late rank's leader late: " + arrivals, DS4TP_EIO;
    if (all_heard && last != std::to_string(late))
      return why = "call " + std::to_string(kLateCall) + " names rank " + last + " last", DS4TP_EIO;
    if (trace.find("\"traceEvents\"") == std::string::npos ||
        trace.find("\"arrival_us\"") == std::string::npos)
      return why = "the trace lacks its events:\n" + trace, DS4TP_EIO;
    if (!all_heard && rank >= 2 && text.find("measured at bring-up") == std::string::npos)
      return why = "a rank off rank 0's host did not measure its clock:\n" + text, DS4TP_EIO;
    return DS4TP_OK;
  };
}

}  // namespace

TEST_CASE("flight: arrivals from marks, and who came last", "[unit][group][flight]") {
  link::Marks a, b;
  a.take(1, 1000 + 7);
  a.take(2, 1000 + 250000);
  int32_t out[4];
  const link::Marks *lanes[2] = {&a, nullptr};
  group::arrivals_of(0, 1000, lanes, 2, 3, out);
  CHECK(out[0] == 0);
  CHECK(out[1] == 7);
  CHECK(out[2] == 250000);
  CHECK(group::last_arrival(out, 3) == 2);
  // An earlier rank moves the base; a mark past the 32-bit wrap still counts.
  b.take(3, 0xfffffff0u);
  const link::Marks *wrap[2] = {&b, nullptr};
  group::arrivals_of(0, 5, wrap, 2, 4, out);
  CHECK(out[3] == 0);
  CHECK(out[0] == 21);
  CHECK(out[1] == group::kUnknownArrival);
  CHECK(group::last_arrival(out, 4) == -1);  // rank 1 unheard
  const int32_t tie[3] = {0, 5, 5};
  CHECK(group::last_arrival(tie, 3) == -1);
}

TEST_CASE("flight: the clock offset from the round least held up", "[unit][group][flight]") {
  // Rank 0's clock runs 5 ms ahead; rounds take 40 us on the wire, one
  // 2 ms one way only (a queue), which the estimate must not take.
  std::vector<ClockRound> rounds;
  for (uint64_t i = 0, t = 1'000'000; i < 4; i++, t += 1'000'000) {
    const uint64_t up = i == 1 ? 2'000'000 : 20'000;
    rounds.push_back({t, t + up + 5'000'000, t + up + 5'000'000 + 3'000, t + up + 3'000 + 20'000});
  }
  const ClockOffset c = clock_offset(rounds);
  CHECK(c.measured);
  CHECK(c.offset_ns == 5'000'000);
  CHECK(c.uncertainty_ns == 20'000);
  CHECK_FALSE(clock_offset(std::vector<ClockRound>{}).measured);
}

TEST_CASE("flight: a late rank is named in every plan", "[group][flight]") {
  const TempDir tmp("ds4tp-flight");
  REQUIRE(!tmp.path().empty());
  const std::string &dir = tmp.path();
  SECTION("shm, 3 ranks") {
    check_run(run_group_procs(3, DS4TP_TRANSPORT_SHM, late_body(2, {0, 1, 2}, true, dir)));
  }
  SECTION("tcp, 3 ranks (one-shot, two-shot and the ring)") {
    check_run(run_group_procs(3, DS4TP_TRANSPORT_TCP, late_body(1, {0, 1, 2}, true, dir)));
  }
#ifdef DS4TP_TEST_VERBS_PROVIDER
  SECTION("rdma (the test verbs provider), 3 ranks") {
    setenv("DS4TP_VERBS_LIB", DS4TP_TEST_VERBS_PROVIDER, 1);  // the forked ranks inherit it
    setenv("DS4TP_VERBS_PROVIDER_PROFILE", "rc", 1);
    const GroupRun run = run_group_procs(
        3, DS4TP_TRANSPORT_RDMA, late_body(0, {0, 1, 2}, true, dir, -1, DS4TP_TRANSPORT_RDMA));
    unsetenv("DS4TP_VERBS_LIB");
    unsetenv("DS4TP_VERBS_PROVIDER_PROFILE");
    check_run(run);
  }
#endif
  SECTION("tiered, 2 hosts x 2 ranks: the late rank's host names it, the other its leader") {
    check_run(run_group_procs(4, DS4TP_TRANSPORT_AUTO, late_body(3, {2, 3}, false, dir, 2),
                              on_hosts({0, 0, 1, 1})));
  }
}

TEST_CASE("flight: Prometheus series per rank", "[unit][group][flight]") {
  ds4tp_group *gs[2] = {};
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  REQUIRE(ds4tp_group_new_local(gs, 2, &o, nullptr) == DS4TP_OK);
  std::vector<std::thread> ts;
  int rcs[2] = {};
  for (int r = 0; r < 2; r++)
    ts.emplace_back([&, r] {
      float v[64] = {};
      for (int i = 0; i < 3 && rcs[r] == 0; i++) {
        if (r == 1 && i == 1) usleep(kLateMs * 1000);
        rcs[r] = ds4tp_group_all_reduce(gs[r], v, 64, DS4TP_DTYPE_F32, DS4TP_OP_SUM);
      }
    });
  for (auto &t : ts) t.join();
  REQUIRE(rcs[0] == DS4TP_OK);
  REQUIRE(rcs[1] == DS4TP_OK);
  size_t need = 0;
  REQUIRE(ds4tp_group_stats_prometheus(gs[0], nullptr, 0, &need) == DS4TP_ENOMEM);
  std::string text(need + 1, '\0');
  REQUIRE(ds4tp_group_stats_prometheus(gs[0], text.data(), text.size(), &need) == DS4TP_OK);
  INFO(text);
  CHECK(text.find("ds4tp_group_lateness_seconds_count{rank=\"0\",transport=\"shm\","
                  "peer_rank=\"1\"} 3") != std::string::npos);
  CHECK(std::regex_search(text, std::regex("ds4tp_group_arrived_last_total\\{rank=\"0\",transport="
                                           "\"shm\",peer_rank=\"1\"\\} [1-3]\\n")));
  for (auto *g : gs) ds4tp_group_free(g);
}

TEST_CASE("flight: written when a call fails, on demand and on a signal", "[unit][group][flight]") {
  const TempDir tmp("ds4tp-flight");
  REQUIRE(!tmp.path().empty());
  const std::string &dir = tmp.path();
  ds4tp_group *gs[2] = {};
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.op_timeout_ms = 5000;
  const std::string failed = dir + "/failed-%r";
  setenv("DS4TP_GROUP_DUMP", failed.c_str(), 1);
  const int made = ds4tp_group_new_local(gs, 2, &o, nullptr);
  unsetenv("DS4TP_GROUP_DUMP");
  REQUIRE(made == DS4TP_OK);

  SECTION("a path is needed") {
    CHECK(ds4tp_group_dump(gs[0], nullptr) == DS4TP_EINVAL);
    CHECK(std::string(ds4tp_last_error()).find("DS4TP_GROUP_DUMP") != std::string::npos);
    CHECK(ds4tp_group_dump(gs[0], "/nonexistent-dir/x") == DS4TP_EIO);
    CHECK(std::string(ds4tp_last_error()).find("/nonexistent-dir/x") != std::string::npos);
    CHECK(ds4tp_group_dump_on_signal(gs[0], SIGKILL, "x") == DS4TP_EINVAL);
  }
  SECTION("a signal the engine picks") {
    const std::string path = dir + "/signal-%r";
    REQUIRE(ds4tp_group_dump_on_signal(gs[1], SIGUSR2, path.c_str()) == DS4TP_OK);
    REQUIRE(raise(SIGUSR2) == 0);
    std::string text;
    for (int i = 0; i < 500 && text.find("flight recorder") == std::string::npos; i++) {
      usleep(10000);
      text = read_file(dir + "/signal-1");
    }
    CHECK(text.find("ds4tp group flight recorder: rank 1 of 2") != std::string::npos);
    CHECK(ds4tp_group_dump_on_signal(gs[1], 0, nullptr) == DS4TP_OK);
  }
  SECTION("a call that fails writes it with its error") {
    int rcs[2] = {};
    std::thread t([&] {  // rank 1 in another collective: both fail EDESYNC
      float in[16] = {}, out[32] = {};
      rcs[1] = ds4tp_group_all_gather(gs[1], in, out, sizeof in);
    });
    float v[16] = {};
    rcs[0] = ds4tp_group_all_reduce(gs[0], v, 16, DS4TP_DTYPE_F32, DS4TP_OP_SUM);
    t.join();
    CHECK(rcs[0] == DS4TP_EDESYNC);
    const std::string text = read_file(dir + "/failed-0");
    INFO(text);
    CHECK(text.find("failed: DS4TP_EDESYNC") != std::string::npos);
    CHECK(text.find("all_gather") != std::string::npos);  // the error names the other call
  }
  for (auto *g : gs) ds4tp_group_free(g);
}
