// The real RDMA loading and probing path on this host, and what a pair
// does with its answer: transport=auto falls back and logs the reason,
// transport=rdma fails on both ranks naming it. On a host without RDMA
// (this project's CI) the probe must say precisely why; on a host with an
// active RDMA port the cases that need its absence are skipped with a note.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "support/env.hpp"
#include "support/ranks.hpp"
#include "link/rdma/probe.hpp"

using namespace ds4tp;
using namespace ds4tp::test;

namespace {

bool host_has_rdma(std::string &why) {
  rdma::ProbeResult r = rdma::probe(rdma::ProbeRequest{});
  why = r.reason;
  return r.usable;
}

// Leader log lines (the leader runs in this process).
std::mutex g_log_mu;
std::vector<std::string> g_log;
void capture(void *, int, const char *msg) {
  std::lock_guard<std::mutex> l(g_log_mu);
  g_log.emplace_back(msg);
}

int gates(ds4tp_pair *tp, int n) {
  for (int s = 1; s <= n; s++) {
    uint32_t slot = uint32_t((s - 1) % 8);
    int rc = ds4tp_gate_exchange(tp, slot / 2, slot % 2, uint64_t(s));
    CHILD_EXPECT_OK(rc, tp, "gate");
  }
  return 0;
}

}  // namespace

TEST_CASE("the probe names why this host has no usable RDMA port") {
  std::string why;
  if (host_has_rdma(why)) {
    WARN("this host has a usable RDMA port (" << why << "); absence checks skipped");
    return;
  }
  INFO(why);
  CHECK(!why.empty());
  if (!rdma::built_with_verbs()) {
    CHECK_THAT(why, Catch::Contains("built without RDMA support"));
  } else {
    // One of the named reasons, never a bare failure.
    CHECK_THAT(why, Catch::Contains("libibverbs is not installed") ||
                        Catch::Contains("libibverbs found no RDMA devices") ||
                        Catch::Contains("no usable RDMA port") ||
                        Catch::Contains("not found (devices here"));
  }
  // The C API reports the same answer.
  char buf[512];
  CHECK(ds4tp_transport_available(DS4TP_TRANSPORT_RDMA, buf, sizeof buf) == 0);
  CHECK(std::string(buf) == why);
}

TEST_CASE("a missing or wrong verbs library is named by the probe") {
  if (!rdma::built_with_verbs()) {
    WARN("built without the verbs binding; loader checks skipped");
    return;
  }
  SECTION("no such library") {
    rdma::ProbeRequest req;
    req.library = "libds4tp-test-no-such-verbs.so.1";
    rdma::ProbeResult r = rdma::probe(req);
    CHECK_FALSE(r.usable);
    CHECK_THAT(r.reason, Catch::Contains("libibverbs is not installed or cannot be loaded") &&
                             Catch::Contains("libds4tp-test-no-such-verbs.so.1"));
  }
  SECTION("DS4TP_VERBS_LIB names a library that is not libibverbs") {
    ScopedEnv env("DS4TP_VERBS_LIB", "libm.so.6");
    rdma::ProbeResult r = rdma::probe(rdma::ProbeRequest{});
    CHECK_FALSE(r.usable);
    CHECK_THAT(r.reason, Catch::Contains("libm.so.6 lacks ibv_get_device_list"));
  }
  SECTION("a named device that does not exist") {
    std::string why;
    if (host_has_rdma(why)) return;
    rdma::ProbeRequest req;
    req.device = "mlx5_test_nonexistent";
    rdma::ProbeResult r = rdma::probe(req);
    CHECK_FALSE(r.usable);
    CHECK(!r.reason.empty());
  }
}

TEST_CASE("transport=auto without RDMA falls back and logs the reason once") {
  std::string why;
  if (host_has_rdma(why)) {
    WARN("this host has RDMA (" << why << "); fallback case skipped");
    return;
  }
  {
    std::lock_guard<std::mutex> l(g_log_mu);
    g_log.clear();
  }
  RankSetup s;
  s.transport = DS4TP_TRANSPORT_AUTO;
  s.leader_tweak = [](ds4tp_options &o) {
    o.log_fn = capture;
    o.log_level = DS4TP_LOG_INFO;
  };
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    int rc = ds4tp_connect(tp);
    CHILD_EXPECT_OK(rc, tp, "connect");
    CHILD_EXPECT(ds4tp_transport_active(tp) != DS4TP_TRANSPORT_RDMA, tp);
    rc = ds4tp_attach_slab(tp, nullptr, 0);
    CHILD_EXPECT_OK(rc, tp, "attach");
    return gates(tp, 16);
  };
  Outcome o = run_pair(s, body, body);
  INFO(o.describe());
  CHECK(o.leader == 0);
  CHECK(o.worker_exit == 0);
  std::lock_guard<std::mutex> l(g_log_mu);
  int mentions = 0;
  for (auto &line : g_log)
    if (line.find("rdma not offered") != std::string::npos) {
      mentions++;
      CHECK_THAT(line, Catch::Contains(why));
    }
  CHECK(mentions == 1);
}

TEST_CASE("transport=rdma without RDMA fails on both ranks, each naming its reason") {
  std::string why;
  if (host_has_rdma(why)) {
    WARN("this host has RDMA (" << why << "); refusal case skipped");
    return;
  }
  bool no_library = false;
  SECTION("this host's reason") {}
  SECTION("libibverbs missing at run time") { no_library = rdma::built_with_verbs(); }
  std::unique_ptr<ScopedEnv> env;
  if (no_library) env = std::make_unique<ScopedEnv>("DS4TP_VERBS_LIB", "/nonexistent/libibverbs.so.1");
  RankSetup s;
  s.leader_tweak = [](ds4tp_options &o) { o.transport = DS4TP_TRANSPORT_RDMA; };
  s.worker_tweak = [](ds4tp_options &o) { o.transport = DS4TP_TRANSPORT_AUTO; };
  auto body = [no_library](ds4tp_pair *tp, Ctx &ctx) -> int {
    int rc = ds4tp_connect(tp);
    CHILD_EXPECT_RC(rc, DS4TP_EUNSUPPORTED, tp);
    std::string msg = ds4tp_errmsg(tp);
    std::string want = std::string("transport rdma was requested but this rank (") +
                       (ctx.rank == 0 ? "leader" : "worker") + ") has no RDMA device: ";
    CHILD_EXPECT(msg.find(want) != std::string::npos, tp);
    CHILD_EXPECT(!no_library || msg.find("libibverbs is not installed") != std::string::npos, tp);
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  INFO(o.describe());
  CHECK(o.leader == 0);
  CHECK(o.worker_exit == 0);
}

TEST_CASE("without libibverbs at run time the library still pairs over tcp") {
  if (!rdma::built_with_verbs()) return;
  ScopedEnv env("DS4TP_VERBS_LIB", "/nonexistent/libibverbs.so.1");
  RankSetup s;
  s.transport = DS4TP_TRANSPORT_AUTO;
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    return gates(tp, 8);
  };
  Outcome o = run_pair(s, body, body);
  INFO(o.describe());
  CHECK(o.leader == 0);
  CHECK(o.worker_exit == 0);
}

TEST_CASE("rdma options are validated at ds4tp_new") {
  ds4tp_options o;
  ds4tp_options_init(&o);
  CHECK(o.rdma_port == 1);
  CHECK(o.rdma_gid_index == -1);
  o.role = DS4TP_ROLE_LEADER;
  ds4tp_identity id = small_identity();
  ds4tp_pair *tp = nullptr;
  o.rdma_port = 0;
  CHECK(ds4tp_new(&tp, &o, &id) == DS4TP_EINVAL);
  CHECK_THAT(std::string(ds4tp_last_error()), Catch::Contains("rdma_port 0"));
  o.rdma_port = 1;
  o.rdma_gid_index = -2;
  CHECK(ds4tp_new(&tp, &o, &id) == DS4TP_EINVAL);
  CHECK_THAT(std::string(ds4tp_last_error()), Catch::Contains("rdma_gid_index -2"));
  CHECK(tp == nullptr);
}
