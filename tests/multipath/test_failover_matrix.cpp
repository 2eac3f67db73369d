// Failover (multipath/failover.hpp), measured and at random: the time
// from the primary's loss to the first gate done over tcp, and from an
// rdma rail's loss to the gate done over the other links, faults at
// random places of the traffic on either rank or both, and the two cases
// where the ranks must not fail over (a partial that is gone, a desync).
// Every ctest name starts with "failover".
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "support/failover_util.hpp"

using namespace ds4tp::test;

namespace {

int trials_or(int fallback) {
  const char *t = std::getenv("DS4TP_FAILOVER_TRIALS");
  return t != nullptr ? std::max(1, std::atoi(t)) : fallback;
}

// Per rank, the start and end (CLOCK_MONOTONIC ns) of the gate timed,
// shared across the fork; and each trial's span.
struct GateMarks {
  uint64_t *at = nullptr;
  std::vector<double> ms;
  GateMarks() {
    void *p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    at = p == MAP_FAILED ? nullptr : static_cast<uint64_t *>(p);
  }
  ~GateMarks() {
    if (at != nullptr) munmap(at, 4096);
  }
  GateMarks(const GateMarks &) = delete;
  GateMarks &operator=(const GateMarks &) = delete;
  static void mark(uint64_t *at, int rank, const timespec &a, const timespec &b) {
    at[2 * rank] = uint64_t(a.tv_sec) * 1000000000ull + uint64_t(a.tv_nsec);
    at[2 * rank + 1] = uint64_t(b.tv_sec) * 1000000000ull + uint64_t(b.tv_nsec);
  }
  // From `start` to the later of the two ranks' ends.
  double span_ms(uint64_t start) {
    ms.push_back(double(std::max(at[1], at[3]) - start) / 1e6);
    return ms.back();
  }
  void summary(const char *what) {
    std::sort(ms.begin(), ms.end());
    std::printf("failover-summary: %s: %zu trials, median %.1f ms, worst %.1f ms\n", what,
                ms.size(), ms[ms.size() / 2], ms.back());
  }
};

}  // namespace

// The time from the primary's loss to the first gate completed over tcp:
// from the start of the gate whose send fails on the worker (the loss) to
// the later of the two ranks' returns from it. DS4TP_FAILOVER_TRIALS sets
// the trials (default 3); a "failover-summary:" line gives the median and
// worst, which docs/RELIABILITY.md reports. The bound checked is the
// liveness one: the peer's silence window plus scheduling slack.
TEST_CASE("failover: time from the primary's loss to the first gate done over tcp") {
  Provider p;
  const int trials = trials_or(3);
  GateMarks marks;  // the gate that moved the pair to tcp
  REQUIRE(marks.at != nullptr);
  for (int i = 0; i < trials; i++) {
    std::memset(marks.at, 0, 4 * sizeof(uint64_t));
    RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
    auto body = [at = marks.at](ds4tp_pair *tp, Ctx &c) -> int {
      ScopedEnv f("DS4TP_VERBS_PROVIDER_FAULT", c.rank == 1 ? "wc=12@20" : nullptr);
      CHILD_EXPECT_OK(connect_attach(tp), tp);
      const ds4tp_slab_layout l = layout_of(tp);
      for (uint64_t seq = 1; seq <= 40; seq++) {
        const uint32_t g = uint32_t((seq - 1) % l.slots);
        timespec a{}, b{};
        clock_gettime(CLOCK_MONOTONIC, &a);
        CHILD_EXPECT_OK(ds4tp_gate_exchange(tp, g / 2, g % 2, seq), tp);
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (ds4tp_transport_active(tp) == DS4TP_TRANSPORT_TCP && at[2 * c.rank] == 0)
          GateMarks::mark(at, c.rank, a, b);
      }
      CHILD_EXPECT(failovers(tp) == 1, tp);
      return final_barrier(tp);
    };
    Outcome o = run_pair(s, body, body);
    REQUIRE_RANKS_OK(o);
    REQUIRE(marks.at[0] != 0);
    REQUIRE(marks.at[2] != 0);
    CHECK(marks.span_ms(marks.at[2]) < 1000 + 1500);
  }
  marks.summary("rdma error completion mid row gates -> first gate over tcp");
}

// The time from a rail's loss to the big gate done over the other rdma
// links: the worker's rail fv1 goes silent from its 7th send (inside the
// first big gate; attach sends 6 there); the leader's wait names the rail
// at big_gate_timeout_ms (1000 here), both ranks make the rdma transport
// again without it and run the gate again. Measured from the gate's start
// to the later return; what passes the deadline is the agreement, the
// remaking and the gate run again. A "failover-summary:" line gives the
// median and worst, which docs/RELIABILITY.md reports.
TEST_CASE("failover: time from an rdma rail's loss to the big gate done over the other links") {
  Provider p;
  ScopedEnv rows("DS4TP_ROW_LINK", "0");  // on the primary, which owes nothing
  const int trials = trials_or(3);
  GateMarks marks;  // the first big gate, which finds the rail lost
  REQUIRE(marks.at != nullptr);
  for (int i = 0; i < trials; i++) {
    RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
    for (auto *tweak : {&s.leader_tweak, &s.worker_tweak})
      *tweak = [t = *tweak](ds4tp_options &o) {
        t(o);
        o.rdma_rails = "fv1";
        o.big_gate_timeout_ms = 1000;
      };
    auto body = [at = marks.at](ds4tp_pair *tp, Ctx &c) -> int {
      ScopedEnv f("DS4TP_VERBS_PROVIDER_FAULT", c.rank == 1 ? "cut=7@1" : nullptr);
      CHILD_EXPECT_OK(connect_attach(tp), tp);
      Seqs q;
      timespec a{}, b{};
      clock_gettime(CLOCK_MONOTONIC, &a);
      if (int rc = bigs(tp, 1, q)) return rc;
      clock_gettime(CLOCK_MONOTONIC, &b);
      GateMarks::mark(at, c.rank, a, b);
      CHILD_EXPECT(failovers(tp) == 1 && ds4tp_transport_active(tp) == DS4TP_TRANSPORT_RDMA, tp,
                   "failovers %llu, transport %d", (unsigned long long)failovers(tp),
                   ds4tp_transport_active(tp));
      if (int rc = bigs(tp, 2, q)) return rc;
      return final_barrier(tp);
    };
    Outcome o = run_pair(s, body, body);
    REQUIRE_RANKS_OK(o);
    // The rail is found at the deadline, not before; no upper bound:
    // making the links again samples each one (under the sanitizers,
    // seconds), which no liveness bound covers.
    CHECK(marks.span_ms(std::min(marks.at[0], marks.at[2])) >= 1000);
  }
  marks.summary("rdma rail silent mid big gate (deadline 1000 ms) -> the gate done over the "
                "other links");
}

// Faults at random places of the whole traffic (row gates, shape changes
// and their drains, batch gates and their predicted receives, big-gate
// rounds and credits), on a random rank or both: every trial must go on
// over tcp with every payload bit for bit. DS4TP_FAILOVER_TRIALS sets the
// trials (default 8); the seed is printed so a failure can be replayed
// (DS4TP_FAILOVER_SEED).
TEST_CASE("failover: faults anywhere in the traffic, on either rank or both") {
  Provider p;
  const int trials = trials_or(8);
  unsigned seed = unsigned(time(nullptr));
  if (const char *s = std::getenv("DS4TP_FAILOVER_SEED")) seed = unsigned(std::atoi(s));
  std::printf("failover matrix: seed %u, %d trials\n", seed, trials);
  srand(seed);
  for (int i = 0; i < trials; i++) {
    // Sends 4..120 of each rank carry the traffic after the warm-up (about
    // 130 in all); wc= fails one, drop=
    // loses one with a good completion.
    const int at = 4 + rand() % 117, who = rand() % 3 - 1;  // -1: both ranks
    // A message lost in a big gate's last round cannot be sent again (the
    // case after this one): lost messages fall before the big gates.
    const bool drop = rand() % 3 == 0 && who >= 0 && at < 100;
    const std::string fault = (drop ? "drop=" : "wc=12@") + std::to_string(at);
    INFO("trial " << i << ": " << fault << " on " << (who < 0 ? "both ranks" : who == 0 ? "the leader" : "the worker"));
    RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
    Body b = survives(DS4TP_TRANSPORT_RDMA, "resuming over the standby tcp link from");
    Outcome o = run_pair(s, with_fault(fault.c_str(), who, b), with_fault(fault.c_str(), who, b));
    REQUIRE_RANKS_OK(o);
  }
}

TEST_CASE("failover: a big gate's last message lost leaves a named error on both ranks") {
  Provider p;
  RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
  // The worker's last message of the first big gate is lost with a good
  // completion: the worker completes that gate, the leader never does,
  // and the worker's partial is the caller's memory, already reused.
  auto body = [](ds4tp_pair *tp, Ctx &c) -> int {
    ScopedEnv f("DS4TP_VERBS_PROVIDER_FAULT", c.rank == 1 ? "drop=112" : nullptr);
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    Seqs q;
    if (int rc = rows(tp, kRows, q)) return rc;
    if (int rc = batches(tp, kBatches, q)) return rc;
    std::vector<uint8_t> out(kBigBytes, uint8_t(c.rank)), in(kBigBytes);
    int rc = DS4TP_OK;
    for (uint64_t seq = 1; seq <= 2 && rc == DS4TP_OK; seq++)
      rc = ds4tp_big_gate_exchange(tp, 3, seq, out.data(), in.data(), kBigBytes);
    CHILD_EXPECT(rc != DS4TP_OK && ds4tp_failed(tp), tp);
    CHILD_EXPECT(std::strstr(ds4tp_errmsg(tp), "no longer holds its partial of that gate"), tp);
    CHILD_EXPECT(failovers(tp) == 0, tp);
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("failover: ranks at different gates stay a named desync, not a failover") {
  Provider p;
  RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
  // The leader calls a row gate where the worker calls a batch gate: the
  // primary's header barrier finds it, and the resume messages agree.
  auto body = [](ds4tp_pair *tp, Ctx &c) -> int {
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    Seqs q;
    if (int rc = rows(tp, 4, q)) return rc;
    const int rc = c.rank == 0 ? ds4tp_gate_exchange(tp, 2, 0, 5)
                               : ds4tp_batch_gate_exchange(tp, 0, 1, 1);
    CHILD_EXPECT_RC(rc, DS4TP_EDESYNC, tp);
    CHILD_EXPECT(std::strstr(ds4tp_errmsg(tp), "failover to the standby tcp link failed: the "
                                               "ranks are at different gates") != nullptr,
                 tp);
    CHILD_EXPECT(failovers(tp) == 0, tp);
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}
