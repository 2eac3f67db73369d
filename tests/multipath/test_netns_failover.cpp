// Failover across two network namespaces joined by a veth pair: the pair
// runs rdma through the test verbs provider (its rings are shared memory,
// which the namespaces share) with its control and standby links on the
// veth. An error completion on the worker moves the pair to the standby
// link over the veth, every payload bit for bit; the same fault with the
// veth cut first (every link lost) ends both ranks with a named error
// within the liveness bound. Skips (printing "ds4tp-skip:") where
// namespaces or `ip` are not available.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include "support/env.hpp"
#include "support/netns.hpp"
#include "support/procs.hpp"
#include "support/ranks.hpp"

using namespace ds4tp::test;

namespace {

constexpr int kSilenceMs = 1000, kSlackMs = 1500;
constexpr uint64_t kGates = 400;

// A rank in its own network namespace over rdma: READY(0) once unshared;
// after the go byte, pairs over the veth and runs gates with a pattern
// checked bit for bit. READY(1) after 64 gates; with `pause`, it then
// waits for a second go byte. RESULT: the first failing call's status
// (value 2) or 0 after every gate (value 3: the pair ended on tcp).
int ns_rank(int fd, int go_fd, int role, bool pause, const char *fault) {
  if (unshare(CLONE_NEWNET) != 0) {
    send_report(fd, kReportResult, 0, 77);
    return 0;
  }
  send_report(fd, kReportReady, 0);
  if (!await_go(go_fd)) return 0;
  if (fault != nullptr) setenv("DS4TP_VERBS_PROVIDER_FAULT", fault, 1);
  ds4tp_options o = rank_options(role, 7079);
  o.transport = DS4TP_TRANSPORT_RDMA;
  o.listen_host = "10.77.0.1";
  o.leader_host = "10.77.0.1";
  o.connect_timeout_ms = 5000;
  o.peer_silence_ms = kSilenceMs;
  ds4tp_identity id = small_identity(4, 1024);
  ds4tp_pair *tp = nullptr;
  int rc = ds4tp_new(&tp, &o, &id);
  if (rc == 0) rc = ds4tp_connect(tp);
  if (rc == 0) rc = ds4tp_attach_slab(tp, nullptr, 0);
  if (rc) {
    send_report(fd, kReportResult, 1, rc, tp);
    ds4tp_free(tp);
    return 0;
  }
  const int rank = ds4tp_rank(tp);
  auto *slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
  for (uint64_t seq = 1; seq <= kGates; seq++) {
    const uint32_t g = uint32_t((seq - 1) % 8);
    auto *out = reinterpret_cast<float *>(slab + ds4tp_slab_out_offset(tp, g / 2, g % 2));
    auto *in = reinterpret_cast<float *>(slab + ds4tp_slab_in_offset(tp, g / 2, g % 2));
    for (uint64_t i = 0; i < 1024; i++) out[i] = pattern(rank, seq, i);
    rc = ds4tp_gate_exchange(tp, g / 2, g % 2, seq);
    if (rc) {
      send_report(fd, kReportResult, 2, rc, tp);
      ds4tp_free(tp);
      return 0;
    }
    for (uint64_t i = 0; i < 1024; i++) {
      const float want = pattern(1 - rank, seq, i);
      CHILD_EXPECT(std::memcmp(&in[i], &want, 4) == 0, tp, "seq %llu float %llu",
                   (unsigned long long)seq, (unsigned long long)i);
    }
    if (seq == 64) {
      send_report(fd, kReportReady, 1);
      if (pause && !await_go(go_fd)) return 0;
    }
  }
  send_report(fd, kReportResult, ds4tp_transport_active(tp) == DS4TP_TRANSPORT_TCP ? 3 : 4, 0,
              tp);
  ds4tp_free(tp);
  return 0;
}

// The provider for both ranks (the forked ranks inherit the environment).
struct ScopedVerbs {
  ScopedEnv lib{"DS4TP_VERBS_LIB", DS4TP_TEST_VERBS_PROVIDER};
  ScopedEnv prof{"DS4TP_VERBS_PROVIDER_PROFILE", "rc"};
  ScopedEnv flt{"DS4TP_VERBS_PROVIDER_FAULT", nullptr};
};

// The two ranks over rdma, joined by a veth (their control and standby
// links). The worker's first send after the 64th gate fails (wc=12:
// IBV_WC_RETRY_EXC_ERR); about 70 sends precede it (warm-up, gates).
// `cut`: the ranks wait after 64 gates for a second go.
struct Pair : NsRanks {
  explicit Pair(bool cut)
      : NsRanks([cut](int fd, int go_fd, int role) {
          return ns_rank(fd, go_fd, role, cut, role == DS4TP_ROLE_WORKER ? "wc=12@80" : nullptr);
        }) {
    if (!skipped().empty()) return;
    dev = "f4l" + std::to_string(leader.pid());
    if (!veth_between(leader.pid(), dev, "10.77.0.1", worker.pid(),
                      "f4w" + std::to_string(worker.pid()), "10.77.0.2"))
      skip("cannot make a veth pair between namespaces (needs `ip`, `nsenter` and "
           "CAP_NET_ADMIN)");
  }
  std::string dev;  // the leader's end of the veth
};

}  // namespace

TEST_CASE("netns failover: the rdma link lost, the pair goes on over the veth, bit for bit") {
  ScopedVerbs verbs;
  Pair p(false);
  if (!p.runnable()) return;
  p.go();
  Report rl, rw;
  const bool gl = p.leader.next_of(kReportResult, rl, 20000);
  const bool gw = p.worker.next_of(kReportResult, rw, 20000);
  INFO(p.describe(rl, rw));
  REQUIRE(gl);
  REQUIRE(gw);
  CHECK(rl.rc == 0);
  CHECK(rw.rc == 0);
  CHECK(rl.value == 3);  // every gate done, the pair on tcp
  CHECK(rw.value == 3);
}

TEST_CASE("netns failover: the rdma link and the veth both lost end both ranks in time") {
  ScopedVerbs verbs;
  Pair p(true);
  if (!p.runnable()) return;
  p.go();
  Report rl, rw;
  REQUIRE(p.leader.next_of(kReportReady, rl, 15000));
  REQUIRE(p.worker.next_of(kReportReady, rw, 15000));
  // Both ranks wait after gate 64: cut the veth, then let them go on into
  // the worker's failing send.
  REQUIRE(run_cmd(in_ns(p.leader.pid(), {"ip", "link", "set", p.dev, "down"})) == 0);
  const uint64_t cut = mono_ns();
  p.go();
  const bool gl = p.leader.next_of(kReportResult, rl, kSilenceMs + kSlackMs + 3000);
  const bool gw = p.worker.next_of(kReportResult, rw, kSilenceMs + kSlackMs + 3000);
  const double ml = gl ? double(rl.t_ns - cut) / 1e6 : -1, mw = gw ? double(rw.t_ns - cut) / 1e6 : -1;
  std::printf("fault-summary: rdma lost and the veth cut | leader %s after %.1f ms | worker %s "
              "after %.1f ms\n",
              ds4tp_err_name(rl.rc), ml, ds4tp_err_name(rw.rc), mw);
  INFO(p.describe(rl, rw));
  REQUIRE(gl);
  REQUIRE(gw);
  // The leader's wait ends on the worker's silence; the worker's own
  // error (the failed send) stands, with why the standby did not help.
  CHECK(rl.rc == DS4TP_ETIMEDOUT);
  CHECK((rw.rc == DS4TP_EIO || rw.rc == DS4TP_ETIMEDOUT));
  CHECK(rl.failed == 1);
  CHECK(rw.failed == 1);
  CHECK(std::strstr(rl.msg, "silent") != nullptr);
  CHECK(std::strstr(rw.msg, "failover to the standby tcp link failed") != nullptr);
  CHECK(ml <= kSilenceMs + kSlackMs);
  CHECK(mw <= kSilenceMs + kSlackMs);
}
