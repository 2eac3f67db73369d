// Where a handle's waits went (ds4tp_stats: waits, wait_spin_ns,
// wait_yield_ns, wait_sleep_ns, and their Prometheus counters): a peer
// held back a known time makes the other rank wait, and each spin_us
// policy puts that time in its phase. Lower bounds only (a sleep makes
// them so); no speed is asserted.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "ds4tp/ds4tp.h"
#include "support/expect.hpp"
#include "support/ranks.hpp"

using namespace ds4tp::test;

namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr int kLateMs = 30;  // how late the held-back rank comes

// A 2-rank local group with `spin_us`: rank 1 comes kLateMs late to each
// of `calls` all-reduces; rank 0's stats after them.
ds4tp_stats late_group(int32_t spin_us, int calls, std::string &prometheus) {
  ds4tp_group *gs[2] = {};
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.spin_us = spin_us;
  o.op_timeout_ms = 10000;
  REQUIRE(ds4tp_group_new_local(gs, 2, &o, nullptr) == DS4TP_OK);
  int rcs[2] = {};
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; r++)
    ts.emplace_back([&, r] {
      std::vector<float> buf(1024, 1.0f);
      for (int i = 0; i < calls && rcs[r] == 0; i++) {
        if (r == 1) usleep(kLateMs * 1000);
        rcs[r] = ds4tp_group_all_reduce(gs[r], buf.data(), buf.size(), DS4TP_DTYPE_F32,
                                        DS4TP_OP_SUM);
      }
    });
  for (auto &t : ts) t.join();
  for (int r = 0; r < 2; r++) {
    INFO("rank " << r << ": " << ds4tp_group_errmsg(gs[r]));
    REQUIRE(rcs[r] == DS4TP_OK);
  }
  ds4tp_stats st{};
  st.size = sizeof st;
  REQUIRE(ds4tp_group_stats_read(gs[0], &st) == DS4TP_OK);
  size_t need = 0;
  REQUIRE(ds4tp_group_stats_prometheus(gs[0], nullptr, 0, &need) == DS4TP_ENOMEM);
  prometheus.assign(need + 1, '\0');
  REQUIRE(ds4tp_group_stats_prometheus(gs[0], prometheus.data(), prometheus.size(), &need) ==
          DS4TP_OK);
  prometheus.resize(need);
  REQUIRE(ds4tp_group_stats_reset(gs[0]) == DS4TP_OK);
  ds4tp_stats after{};
  after.size = sizeof after;
  REQUIRE(ds4tp_group_stats_read(gs[0], &after) == DS4TP_OK);
  CHECK(after.waits == 0);
  CHECK(after.wait_sleep_ns + after.wait_spin_ns + after.wait_yield_ns == 0);
  for (auto *g : gs) ds4tp_group_free(g);
  return st;
}

uint64_t sum(const ds4tp_stats &s) { return s.wait_spin_ns + s.wait_yield_ns + s.wait_sleep_ns; }

}  // namespace

TEST_CASE("group waits: DS4TP_SPIN_NEVER sleeps the whole wait", "[stats][group]") {
  std::string text;
  const ds4tp_stats s = late_group(DS4TP_SPIN_NEVER, 3, text);
  INFO("waits " << s.waits << " spin " << s.wait_spin_ns << " yield " << s.wait_yield_ns
                << " sleep " << s.wait_sleep_ns);
  CHECK(s.waits >= 3);
  CHECK(s.wait_sleep_ns >= 3 * (kLateMs - 10) * kMs);
  CHECK(s.wait_yield_ns == 0);
  CHECK(s.wait_spin_ns < kMs);  // the polls between sleeps, no busy-polling
  INFO(text);
  CHECK(text.find("ds4tp_wait_seconds_total{rank=\"0\",transport=\"shm\",phase=\"sleep\"} ") !=
        std::string::npos);
  CHECK(text.find("ds4tp_waits_total{rank=\"0\",transport=\"shm\"} ") != std::string::npos);
}

TEST_CASE("group waits: DS4TP_SPIN_ALWAYS spins the whole wait", "[stats][group]") {
  std::string text;
  const ds4tp_stats s = late_group(DS4TP_SPIN_ALWAYS, 2, text);
  INFO("waits " << s.waits << " spin " << s.wait_spin_ns << " yield " << s.wait_yield_ns
                << " sleep " << s.wait_sleep_ns);
  CHECK(s.waits >= 2);
  CHECK(s.wait_spin_ns >= 2 * (kLateMs - 10) * kMs);
  CHECK(s.wait_yield_ns == 0);
  CHECK(s.wait_sleep_ns == 0);
}

TEST_CASE("group waits: no spin, the yield phase, then sleep", "[stats][group]") {
  std::string text;
  const ds4tp_stats s = late_group(0, 2, text);  // spin_us 0: the 200 us yield stays
  INFO("waits " << s.waits << " spin " << s.wait_spin_ns << " yield " << s.wait_yield_ns
                << " sleep " << s.wait_sleep_ns);
  CHECK(s.waits >= 2);
  CHECK(s.wait_yield_ns >= 100'000);  // most of 200 us, unless a wait began descheduled
  CHECK(s.wait_sleep_ns >= 2 * (kLateMs - 10) * kMs);
  CHECK(sum(s) >= 2 * (kLateMs - 10) * kMs);
}

TEST_CASE("pair waits: a late peer's wait is counted by phase", "[stats]") {
  int transport = GENERATE(from_range(local_transports()));
  if (transport == DS4TP_TRANSPORT_RDMA) return;  // the fake provider has its own suite
  CAPTURE(ds4tp_transport_name(transport));
  RankSetup s;
  s.transport = transport;
  s.spin_us = DS4TP_SPIN_NEVER;
  s.gate_timeout_ms = 10000;
  auto gates = [](ds4tp_pair *tp, bool late) -> int {
    for (uint64_t seq = 1; seq <= 3; seq++) {  // the schedule: attn, ffn of layer 0, ...
      if (late) usleep(kLateMs * 1000);
      const uint32_t layer = uint32_t((seq - 1) / 2), gate = uint32_t((seq - 1) % 2);
      CHILD_EXPECT_OK(ds4tp_gate_exchange(tp, layer, gate, seq), tp);
    }
    return 0;
  };
  Outcome o = run_pair(
      s,
      [&](ds4tp_pair *tp, Ctx &) -> int {
        if (int rc = connect_attach(tp)) return rc;
        if (int rc = gates(tp, false)) return rc;
        ds4tp_stats st{};
        st.size = sizeof st;
        CHILD_EXPECT_OK(ds4tp_stats_read(tp, &st), tp);
        CHILD_EXPECT(st.waits >= 3, tp, "waits %llu", (unsigned long long)st.waits);
        CHILD_EXPECT(st.wait_sleep_ns >= 3 * (kLateMs - 10) * kMs, tp, "sleep %llu ns",
                     (unsigned long long)st.wait_sleep_ns);
        CHILD_EXPECT(st.wait_yield_ns == 0, tp, "yield %llu ns",
                     (unsigned long long)st.wait_yield_ns);
        CHILD_EXPECT(st.wait_spin_ns < kMs, tp, "spin %llu ns",
                     (unsigned long long)st.wait_spin_ns);
        // An older caller's struct, which ends before the fields, gets none.
        ds4tp_stats old{};
        old.size = offsetof(ds4tp_stats, waits);
        old.waits = 12345;
        CHILD_EXPECT_OK(ds4tp_stats_read(tp, &old), tp);
        CHILD_EXPECT(old.size == offsetof(ds4tp_stats, waits) && old.waits == 12345, tp);
        return 0;
      },
      [&](ds4tp_pair *tp, Ctx &) -> int {
        if (int rc = connect_attach(tp)) return rc;
        return gates(tp, true);
      });
  REQUIRE_RANKS_OK(o);
}
