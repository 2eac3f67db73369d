// Split-phase group calls (ds4tp_group_requests.h): several requests in
// flight on one group run in the order they were started and give the
// blocking calls' bits; a blocking call waits for them; a rank that fails
// or dies while requests are pending ends every one of them with an error
// naming it; refusals and a group freed with requests pending.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ds4tp/ds4tp.h"
#include "support/group_util.hpp"

using namespace ds4tp::test;

namespace {

constexpr int kN = 3;

struct Local {
  std::vector<ds4tp_group *> gs = std::vector<ds4tp_group *>(kN);
  Local() {
    ds4tp_group_options o;
    ds4tp_group_options_init(&o);
    o.op_timeout_ms = 10000;
    REQUIRE(ds4tp_group_new_local(gs.data(), kN, &o, nullptr) == DS4TP_OK);
  }
  ~Local() {
    for (auto *g : gs) ds4tp_group_free(g);
  }
};

// Runs body(rank, group) on one thread per rank.
template <typename Body>
void on_threads(Local &l, Body body) {
  std::vector<std::thread> ts;
  for (int r = 0; r < kN; r++) ts.emplace_back([&, r] { body(r, l.gs[size_t(r)]); });
  for (auto &t : ts) t.join();
}

}  // namespace

TEST_CASE("requests: several in flight run in issue order with the blocking calls' bits",
          "[group][requests]") {
  Local l;
  std::vector<std::string> whys(kN);
  on_threads(l, [&](int r, ds4tp_group *g) {
    std::string &why = whys[size_t(r)];
    // The same buffer twice, then a blocking call on it: only issue order
    // gives (r+1 summed) x 3 x 3 (6 -> 18 -> 54 for three ranks).
    std::vector<float> x(1000, float(r + 1));
    std::vector<int32_t> rs_in(kN * 64), rs_out(64);
    for (size_t i = 0; i < rs_in.size(); i++) rs_in[i] = int32_t(i) * (r + 1);
    std::vector<uint8_t> part(100, uint8_t(r)), all(kN * 100);
    uint64_t bytes[kN], offs[kN];
    for (int q = 0; q < kN; q++) bytes[q] = 8, offs[q] = uint64_t(q) * 8;
    std::vector<uint8_t> a2a_in(kN * 8), a2a_out(kN * 8);
    for (int q = 0; q < kN; q++) std::memset(a2a_in.data() + q * 8, 16 * r + q, 8);
    ds4tp_group_request *req[6] = {};
    int rc = ds4tp_group_all_reduce_start(g, x.data(), x.size(), DS4TP_DTYPE_F32, DS4TP_OP_SUM, &req[0]);
    if (rc == 0) rc = ds4tp_group_all_reduce_start(g, x.data(), x.size(), DS4TP_DTYPE_F32, DS4TP_OP_SUM, &req[1]);
    if (rc == 0)
      rc = ds4tp_group_reduce_scatter_start(g, rs_in.data(), rs_out.data(), 64, DS4TP_DTYPE_I32,
                                            DS4TP_OP_MAX, &req[2]);
    if (rc == 0) rc = ds4tp_group_all_gather_start(g, part.data(), all.data(), part.size(), &req[3]);
    // The counts array is the request's copy: overwriting ours now is fine.
    if (rc == 0)
      rc = ds4tp_group_all_to_all_v_start(g, a2a_in.data(), bytes, offs, a2a_out.data(), bytes,
                                          offs, &req[4]);
    for (int q = 0; q < kN; q++) bytes[q] = 0;
    if (rc == 0) rc = ds4tp_group_barrier_start(g, &req[5]);
    if (rc != 0) {
      why = fmt::format("a start failed: {}", ds4tp_group_errmsg(g));
      return;
    }
    // Blocking: runs after the six.
    if (ds4tp_group_all_reduce(g, x.data(), x.size(), DS4TP_DTYPE_F32, DS4TP_OP_SUM) != 0) {
      why = fmt::format("the blocking all_reduce: {}", ds4tp_group_errmsg(g));
      return;
    }
    for (int k = 0; k < 6; k++) {
      int done = 0;
      const int trc = ds4tp_group_test(req[k], &done);
      if (done != 1 || trc != 0)
        why += fmt::format("request {}: test says done {} rc {}; ", k, done, trc);
      if (int wrc = ds4tp_group_wait(req[k]))
        why += fmt::format("request {}: {} {}; ", k, wrc, ds4tp_group_request_errmsg(req[k]));
      ds4tp_group_request_free(req[k]);
    }
    for (float v : x)
      if (v != 54.0f) {
        why += fmt::format("x = {}, want 54 (issue order); ", v);
        break;
      }
    for (int i = 0; i < 64; i++)  // MAX of i*(q+1) over q: rank kN-1's
      if (rs_out[size_t(i)] != (r * 64 + i) * kN) {
        why += fmt::format("reduce_scatter [{}] = {}; ", i, rs_out[size_t(i)]);
        break;
      }
    for (int q = 0; q < kN; q++) {
      if (all[size_t(q) * 100] != q) why += fmt::format("all_gather part {} wrong; ", q);
      if (a2a_out[size_t(q) * 8] != 16 * q + r) why += fmt::format("all_to_all from {} wrong; ", q);
    }
  });
  for (int r = 0; r < kN; r++) {
    INFO("rank " << r << ": " << whys[size_t(r)]);
    CHECK(whys[size_t(r)].empty());
  }
}

TEST_CASE("requests: starts waited at once, and waits out of order, give the blocking bits",
          "[group][requests]") {
  // A wait that finds its request first in line runs it itself; one that
  // waits for a later request first leaves the earlier one to the thread.
  Local l;
  std::vector<std::string> whys(kN);
  on_threads(l, [&](int r, ds4tp_group *g) {
    std::string &why = whys[size_t(r)];
    float a[64], b[64];
    for (int it = 0; it < 200 && why.empty(); it++) {
      std::fill(a, a + 64, float(r + 1));
      std::fill(b, b + 64, float(2 * (r + 1)));
      ds4tp_group_request *r0 = nullptr, *ra = nullptr, *rb = nullptr;
      if (ds4tp_group_all_reduce_start(g, a, 64, DS4TP_DTYPE_F32, DS4TP_OP_SUM, &r0) != 0 ||
          ds4tp_group_wait(r0) != 0) {
        why = fmt::format("call {}: start+wait: {}", it, ds4tp_group_request_errmsg(r0));
      } else if (ds4tp_group_all_reduce_start(g, a, 64, DS4TP_DTYPE_F32, DS4TP_OP_SUM, &ra) != 0 ||
                 ds4tp_group_all_reduce_start(g, b, 64, DS4TP_DTYPE_F32, DS4TP_OP_SUM, &rb) != 0 ||
                 ds4tp_group_wait(rb) != 0 || ds4tp_group_wait(ra) != 0) {
        why = fmt::format("call {}: out of order: {}", it, ds4tp_group_errmsg(g));
      } else if (a[0] != 18.0f || a[63] != 18.0f || b[0] != 12.0f) {  // 6 then 18; 12
        why = fmt::format("call {}: a {} b {}", it, a[0], b[0]);
      }
      ds4tp_group_request_free(r0);
      ds4tp_group_request_free(ra);
      ds4tp_group_request_free(rb);
    }
  });
  for (int r = 0; r < kN; r++) {
    INFO("rank " << r << ": " << whys[size_t(r)]);
    CHECK(whys[size_t(r)].empty());
  }
}

TEST_CASE("requests: test polls without blocking until the request completes",
          "[group][requests]") {
  Local l;
  std::vector<int> polls(kN), rcs(kN, -1);
  on_threads(l, [&](int r, ds4tp_group *g) {
    float v[16] = {};
    ds4tp_group_request *req = nullptr;  // no Catch assertion off the main thread
    rcs[size_t(r)] = ds4tp_group_all_reduce_start(g, v, 16, DS4TP_DTYPE_F32, DS4TP_OP_SUM, &req);
    if (rcs[size_t(r)] != 0) return;
    int done = 0;
    while ((rcs[size_t(r)] = ds4tp_group_test(req, &done)) == 0 && !done) polls[size_t(r)]++;
    ds4tp_group_request_free(req);
  });
  for (int r = 0; r < kN; r++) CHECK(rcs[size_t(r)] == DS4TP_OK);
}

TEST_CASE("requests: a rank that fails ends every pending request with an error naming it",
          "[group][requests]") {
  Local l;
  std::vector<std::string> whys(kN);
  on_threads(l, [&](int r, ds4tp_group *g) {
    if (r == 2) {  // the others' requests are queued or under way: it fails
      ds4tp_group_mark_failed(g);
      return;
    }
    float v[3][64] = {};
    ds4tp_group_request *req[3] = {};
    for (int k = 0; k < 3; k++)
      if (ds4tp_group_all_reduce_start(g, v[k], 64, DS4TP_DTYPE_F32, DS4TP_OP_SUM, &req[k]) != 0) {
        whys[size_t(r)] += fmt::format("start {}: {}; ", k, ds4tp_group_errmsg(g));
        return;
      }
    for (int k = 0; k < 3; k++) {
      const int rc = ds4tp_group_wait(req[k]);
      const std::string msg = ds4tp_group_request_errmsg(req[k]);
      if (rc == 0 || msg.find("rank 2") == std::string::npos)
        whys[size_t(r)] += fmt::format("request {}: rc {} message '{}'; ", k, rc, msg);
      if (k > 0 && rc != DS4TP_EFAILED)
        whys[size_t(r)] += fmt::format("request {}: rc {}, not EFAILED; ", k, rc);
      ds4tp_group_request_free(req[k]);
    }
    // The group says so too.
    if (ds4tp_group_failed(g) == 0) whys[size_t(r)] += "the group is not failed; ";
  });
  for (int r = 0; r < 2; r++) {
    INFO("rank " << r << ": " << whys[size_t(r)]);
    CHECK(whys[size_t(r)].empty());
  }
}

TEST_CASE("requests: a rank killed while requests are pending over tcp: each ends naming it",
          "[group][requests]") {
  GroupRun run = run_group_procs(
      kN, DS4TP_TRANSPORT_TCP, [](ds4tp_group *g, int rank, uint64_t &, std::string &why) -> int {
        float v[4][256] = {};
        if (ds4tp_group_all_reduce(g, v[0], 256, DS4TP_DTYPE_F32, DS4TP_OP_SUM) != 0) {
          why = std::string("the first all_reduce: ") + ds4tp_group_errmsg(g);
          return 90;
        }
        if (rank == 2) raise(SIGKILL);
        ds4tp_group_request *req[3] = {};
        for (int k = 0; k < 3; k++)
          if (ds4tp_group_all_reduce_start(g, v[k + 1], 256, DS4TP_DTYPE_F32, DS4TP_OP_SUM,
                                           &req[k]) != 0) {
            why = std::string("start: ") + ds4tp_group_errmsg(g);
            return 91;
          }
        int bad = 0;
        for (int k = 0; k < 3; k++) {
          const int rc = ds4tp_group_wait(req[k]);
          const std::string msg = ds4tp_group_request_errmsg(req[k]);
          if (rc == 0 || msg.find("rank 2") == std::string::npos) {
            why += fmt::format("request {}: rc {} message '{}'; ", k, rc, msg);
            bad = 92;
          }
          ds4tp_group_request_free(req[k]);
        }
        return bad;
      });
  for (int r = 0; r < 2; r++) {
    INFO("rank " << r << ": " << run.msgs[size_t(r)]);
    CHECK(run.rcs[size_t(r)] == 0);
  }
}

TEST_CASE("requests: refusals, and a group freed with requests pending", "[group][requests]") {
  ds4tp_group_request *req = reinterpret_cast<ds4tp_group_request *>(&req);
  float v[4] = {};
  CHECK(ds4tp_group_all_reduce_start(nullptr, v, 4, DS4TP_DTYPE_F32, DS4TP_OP_SUM, &req) ==
        DS4TP_EINVAL);
  CHECK(req == nullptr);
  int done = 0;
  CHECK(ds4tp_group_test(nullptr, &done) == DS4TP_EINVAL);
  CHECK(ds4tp_group_wait(nullptr) == DS4TP_EINVAL);
  ds4tp_group_request_free(nullptr);
  std::vector<ds4tp_group *> gs(2);
  REQUIRE(ds4tp_group_new_local(gs.data(), 2, nullptr, nullptr) == DS4TP_OK);
  CHECK(ds4tp_group_barrier_start(gs[0], nullptr) == DS4TP_EINVAL);
  CHECK_THAT(ds4tp_group_errmsg(gs[0]), Catch::Contains("req"));
  // A bad argument is the request's status, checked when it runs; the
  // group goes on.
  REQUIRE(ds4tp_group_all_reduce_start(gs[0], v, 4, 99, DS4TP_OP_SUM, &req) == DS4TP_OK);
  CHECK(ds4tp_group_wait(req) == DS4TP_EINVAL);
  CHECK_THAT(ds4tp_group_request_errmsg(req), Catch::Contains("dtype 99"));
  CHECK(ds4tp_group_failed(gs[0]) == 0);
  ds4tp_group_request_free(req);
  // Rank 0 starts two all-reduces that rank 1 never joins, then frees the
  // group: both end (the one running aborted, the other never run).
  ds4tp_group_request *pending[2] = {};
  REQUIRE(ds4tp_group_all_reduce_start(gs[0], v, 4, DS4TP_DTYPE_F32, DS4TP_OP_SUM, &pending[0]) == 0);
  REQUIRE(ds4tp_group_all_reduce_start(gs[0], v, 4, DS4TP_DTYPE_F32, DS4TP_OP_SUM, &pending[1]) == 0);
  ds4tp_group_free(gs[0]);
  for (auto *p : pending) {
    INFO(ds4tp_group_request_errmsg(p));
    CHECK(ds4tp_group_wait(p) != DS4TP_OK);
    ds4tp_group_request_free(p);
  }
  CHECK(std::string(ds4tp_group_request_errmsg(nullptr)).find("NULL") != std::string::npos);
  ds4tp_group_free(gs[1]);
}
