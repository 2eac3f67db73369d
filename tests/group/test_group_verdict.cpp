// One verdict per call: once a rank has given up on the group, no other
// rank completes a further call, even one it sends nothing in (a
// broadcast's non-roots) or one whose bytes are already there.
#include <chrono>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "support/group_util.hpp"

using namespace ds4tp::test;

namespace {

int reduce_once(ds4tp_group *g) {
  std::vector<float> v(256, 1.0f);
  return ds4tp_group_all_reduce(g, v.data(), v.size(), DS4TP_DTYPE_F32, DS4TP_OP_SUM);
}

}  // namespace

TEST_CASE("group verdict: after one rank fails, a broadcast fails on every other rank (threads)",
          "[group]") {
  std::vector<ds4tp_group *> gs(3);
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.chunk_bytes = 64 * 1024;
  o.op_timeout_ms = 5000;
  REQUIRE(ds4tp_group_new_local(gs.data(), 3, &o, nullptr) == 0);
  std::vector<int> rcs(3, -999);
  {
    std::vector<std::thread> ts;
    for (int r = 0; r < 3; r++) ts.emplace_back([&, r] { rcs[size_t(r)] = reduce_once(gs[size_t(r)]); });
    for (auto &t : ts) t.join();
  }
  for (int r = 0; r < 3; r++) REQUIRE(rcs[size_t(r)] == 0);
  // Rank 1 gives up after the call; root 2 and rank 0 broadcast, and
  // root 2's bytes are there at once: neither may complete the call.
  ds4tp_group_mark_failed(gs[1]);
  std::vector<uint8_t> b0(64, 0), b2(64, 7);
  std::thread root([&] { rcs[2] = ds4tp_group_broadcast(gs[2], b2.data(), b2.size(), 2); });
  rcs[0] = ds4tp_group_broadcast(gs[0], b0.data(), b0.size(), 2);
  root.join();
  INFO("rank 0: " << ds4tp_group_errmsg(gs[0]));
  INFO("rank 2: " << ds4tp_group_errmsg(gs[2]));
  CHECK(rcs[0] == DS4TP_EFAILED);
  CHECK(rcs[2] == DS4TP_EFAILED);
  for (auto *g : gs) ds4tp_group_free(g);
}

TEST_CASE("group verdict: after one rank fails, a broadcast fails on every other rank (processes)",
          "[group]") {
  for (int transport : {DS4TP_TRANSPORT_SHM, DS4TP_TRANSPORT_TCP}) {
    INFO("transport " << ds4tp_transport_name(transport));
    GroupRun run = run_group_procs(
        3, transport, [](ds4tp_group *g, int rank, uint64_t &, std::string &why) {
          if (int rc = reduce_once(g)) {
            why = std::string("the first all-reduce: ") + ds4tp_group_errmsg(g);
            return rc;
          }
          if (rank == 1) {
            ds4tp_group_mark_failed(g);
            why = "marked failed";
            return int(DS4TP_EFAILED);
          }
          std::vector<uint8_t> b(64, uint8_t(rank));
          const int rc = ds4tp_group_broadcast(g, b.data(), b.size(), 2);
          why = rc ? ds4tp_group_errmsg(g) : "the broadcast completed after rank 1 failed";
          return rc ? rc : 1;  // success here is the failure under test
        });
    for (int r = 0; r < 3; r++) {
      INFO("rank " << r << ": " << run.msgs[size_t(r)]);
      CHECK(run.rcs[size_t(r)] < 0);
    }
  }
}

TEST_CASE("group verdict: a tiered broadcast's root host waits for the step across hosts",
          "[group][tiers]") {
  // Hosts {0, 2} and {1, 3}: root 2 is not its host's leader, so its host
  // has the bytes after its own step. Rank 1, host B's leader, fails the
  // group a little later than the others start the broadcast: root 2 must
  // not complete a call whose step across hosts never happened.
  GroupRun run = run_group_procs(
      4, DS4TP_TRANSPORT_AUTO,
      [](ds4tp_group *g, int rank, uint64_t &, std::string &why) {
        if (int rc = reduce_once(g)) {
          why = std::string("the first all-reduce: ") + ds4tp_group_errmsg(g);
          return rc;
        }
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          ds4tp_group_mark_failed(g);
          why = "marked failed";
          return int(DS4TP_EFAILED);
        }
        std::vector<uint8_t> b(64, uint8_t(rank));
        const int rc = ds4tp_group_broadcast(g, b.data(), b.size(), 2);
        why = rc ? ds4tp_group_errmsg(g) : "the broadcast completed after rank 1 failed";
        return rc ? rc : 1;  // success here is the failure under test
      },
      on_hosts({0, 1, 0, 1}));
  for (int r = 0; r < 4; r++) {
    INFO("rank " << r << ": " << run.msgs[size_t(r)]);
    CHECK(run.rcs[size_t(r)] < 0);
  }
}
