// The ring all-reduce (group/ring.cpp) over real rank processes: a flat tcp
// mesh of 3 and 4 ranks, a flat rdma mesh through the test verbs provider
// (rc and uc-apple), and the leaders of three hosts of a tiered group.
// DS4TP_GROUP_RING_BYTES moves the crossover down to 16 KiB, so every
// dtype runs below it (one-shot / two-shot, rank-order bits) and above it
// (the ring's bits: each segment summed along the ring, rounded per hop),
// in one step and in several; every rank must hold the same bits, and the
// plan must say where the ring starts.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "ds4tp/ds4tp.h"
#include "support/group_util.hpp"

using namespace ds4tp::test;

namespace {

constexpr uint64_t kChunk = 64 * 1024;
constexpr uint64_t kRingFrom = 16 * 1024;

struct RingEnv {
  RingEnv() { setenv("DS4TP_GROUP_RING_BYTES", std::to_string(kRingFrom).c_str(), 1); }
  ~RingEnv() { unsetenv("DS4TP_GROUP_RING_BYTES"); }
};

// Every dtype at counts below the crossover and above it (one chunk,
// several chunks, a count that does not split evenly), against the
// reference of the algorithm the size gets.
GroupBody ring_body(const HostOrder &order, const std::string &want_plan) {
  return [order, want_plan](ds4tp_group *g, int me, uint64_t &digest, std::string &why) {
    if (int rc = check_plan(g, want_plan, why)) return rc;
    digest = 1469598103934665603ull;
    uint64_t salt = 0;
    for (int dt : {DS4TP_DTYPE_F32, DS4TP_DTYPE_F16, DS4TP_DTYPE_BF16}) {
      for (uint64_t count : {uint64_t(2), uint64_t(1000), uint64_t(4096), uint64_t(8192),
                             uint64_t(16389), uint64_t(40001), uint64_t(70001)}) {
        salt++;
        const size_t esz = group_esize(dt), bytes = size_t(count) * esz;
        std::vector<uint8_t> buf(bytes), want(bytes);
        group_fill(dt, me, count, salt, buf.data());
        if (int rc = ds4tp_group_all_reduce(g, buf.data(), count, dt, DS4TP_OP_SUM)) {
          why = "all_reduce of " + std::to_string(count) + ": " + ds4tp_group_errmsg(g);
          return rc;
        }
        const bool ring = bytes >= kRingFrom && count >= order.size();
        if (ring)
          group_reference_ring(dt, order, count, kChunk, salt, want.data());
        else
          group_reference_hosts(dt, order, count, salt, want.data());
        for (size_t i = 0; i < bytes; i++)
          if (buf[i] != want[i]) {
            why = std::string("dtype ") + std::to_string(dt) + ", count " + std::to_string(count) +
                  (ring ? " (ring)" : " (below the ring)") + ": element " +
                  std::to_string(i / esz) + " differs from the reference on rank " +
                  std::to_string(me);
            return int(DS4TP_EIO);
          }
        for (uint8_t b : buf) digest = (digest ^ b) * 1099511628211ull;
      }
    }
    return 0;
  };
}

GroupEdit chunked(const GroupEdit &inner = {}) {
  return [inner](int r, ds4tp_group_options &o, ds4tp_identity &id) {
    o.chunk_bytes = kChunk;
    if (inner) inner(r, o, id);
  };
}

HostOrder each_alone(int n) {
  HostOrder o;
  o.resize(size_t(n));
  for (int r = 0; r < n; r++) o[size_t(r)] = {r};
  return o;
}

}  // namespace

TEST_CASE("group ring: a flat tcp mesh of 3 and 4 ranks", "[group][ring]") {
  RingEnv env;
  for (int n : {3, 4}) {
    INFO(n << " ranks");
    check_run(run_group_procs(n, DS4TP_TRANSPORT_TCP,
                              ring_body(each_alone(n), "tcp between every two ranks (flat); all-reduce one-shot below 16 KiB, ring from 16 KiB"), chunked()));
  }
}

TEST_CASE("group ring: the leaders of three hosts, tiered", "[group][ring]") {
  RingEnv env;
  // Ranks 0 and 3 share host 0; ranks 1 and 2 are alone on hosts 1 and 2.
  const HostOrder order = {{0, 3}, {1}, {2}};
  check_run(run_group_procs(4, DS4TP_TRANSPORT_AUTO,
                            ring_body(order, "across hosts one-shot below 16 KiB, ring from 16 KiB"),
                            chunked(on_hosts({0, 1, 2, 0}))));
}

// Ranks other than 0 whose environment says otherwise: never the ring,
// two-shot from 1 byte. Rank 0's crossovers must hold for them all.
GroupEdit dissenting(const GroupEdit &inner = {}) {
  return chunked([inner](int r, ds4tp_group_options &o, ds4tp_identity &id) {
    if (r != 0) {
      setenv("DS4TP_GROUP_RING_BYTES", "0", 1);
      setenv("DS4TP_GROUP_TWO_SHOT_BYTES", "1", 1);
    }
    if (inner) inner(r, o, id);
  });
}

TEST_CASE("group ring: rank 0's crossovers hold on every rank, whatever their environment",
          "[group][ring]") {
  RingEnv env;
  SECTION("a flat tcp mesh of 3") {
    check_run(run_group_procs(3, DS4TP_TRANSPORT_TCP,
                              ring_body(each_alone(3), "all-reduce one-shot below 16 KiB, ring from 16 KiB"),
                              dissenting()));
  }
  SECTION("the leaders of three hosts") {
    const HostOrder order = {{0, 3}, {1}, {2}};
    check_run(run_group_procs(4, DS4TP_TRANSPORT_AUTO,
                              ring_body(order, "across hosts one-shot below 16 KiB, ring from 16 KiB"),
                              dissenting(on_hosts({0, 1, 2, 0}))));
  }
}

#ifdef DS4TP_TEST_VERBS_PROVIDER
TEST_CASE("group ring: a flat rdma mesh of 3 ranks (rc and uc-apple)", "[group][ring][rdma]") {
  RingEnv env;
  for (const char *profile : {"rc", "uc-apple"}) {
    INFO("profile " << profile);
    setenv("DS4TP_VERBS_LIB", DS4TP_TEST_VERBS_PROVIDER, 1);
    setenv("DS4TP_VERBS_PROVIDER_PROFILE", profile, 1);
    check_run(run_group_procs(3, DS4TP_TRANSPORT_RDMA,
                              ring_body(each_alone(3), "rdma between every two ranks (flat); all-reduce one-shot "
                                                        "below 16 KiB, ring from 16 KiB"),
                              chunked()));
    unsetenv("DS4TP_VERBS_LIB");
    unsetenv("DS4TP_VERBS_PROVIDER_PROFILE");
  }
}
#endif
