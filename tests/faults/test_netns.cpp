// TCP across two network namespaces joined by a veth pair, made by the test
// itself (addresses exist only inside those namespaces), with the link cut
// in the middle of the gates: both ranks must end with a named error within
// the gate deadline. Each rank is a child that unshares its own network
// namespace, so everything vanishes with the children. A tcp group on a
// rate-limited loopback (tc tbf, in a namespace of its own) checks that a
// slow step that keeps moving outlasts op_timeout_ms. Skips (printing
// "ds4tp-skip:") where namespaces, `ip` or `tc` are not available.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/group_util.hpp"
#include "support/netns.hpp"
#include "support/procs.hpp"
#include "support/ranks.hpp"

using namespace ds4tp::test;

namespace {

constexpr int kGateMs = 1000, kGraceMs = 1500;
const char kKey[] = "netns-suite-key-0123456789abcdef";

// Joins processes a (10.77.0.1, device da) and b (10.77.0.2, device db).
bool veth_between(pid_t a, const std::string &da, pid_t b, const std::string &db) {
  return ds4tp::test::veth_between(a, da, "10.77.0.1", b, db, "10.77.0.2");
}
int run(const std::vector<std::string> &argv) { return run_cmd(argv); }

// A rank in its own network namespace: reports READY(0) once unshared,
// waits for the go byte, then pairs over the veth and runs gates until a
// call fails. READY(1) after the first 64 gates.
int ns_rank(int fd, int go_fd, int role) {
  if (unshare(CLONE_NEWNET) != 0) {
    send_report(fd, kReportResult, 0, 77);
    return 0;
  }
  send_report(fd, kReportReady, 0);
  if (!await_go(go_fd)) return 0;
  ds4tp_options o = rank_options(role, 7077);
  o.listen_host = "10.77.0.1";
  o.leader_host = "10.77.0.1";
  o.connect_timeout_ms = 5000;
  o.gate_timeout_ms = kGateMs;
  o.psk = kKey;
  o.psk_bytes = sizeof kKey - 1;
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
  for (uint64_t seq = 1;; seq++) {
    uint32_t slot = uint32_t((seq - 1) % 8);
    rc = ds4tp_gate_exchange(tp, slot / 2, slot % 2, seq);
    if (rc) break;
    if (seq == 64) send_report(fd, kReportReady, 1);
  }
  send_report(fd, kReportResult, 2, rc, tp);
  ds4tp_free(tp);
  return 0;
}

// A 2-rank tcp group's rank in its own namespace, like ns_rank: rank 0
// at 10.77.0.1; all-reduces until a call fails, READY(1) after 64.
int ns_group_rank(int fd, int go_fd, int rank) {
  if (unshare(CLONE_NEWNET) != 0) {
    send_report(fd, kReportResult, 0, 77);
    return 0;
  }
  send_report(fd, kReportReady, 0);
  if (!await_go(go_fd)) return 0;
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.rank = rank;
  o.group_size = 2;
  o.rendezvous_host = "10.77.0.1";
  o.rendezvous_port = 7078;
  o.transport = DS4TP_TRANSPORT_TCP;
  o.connect_timeout_ms = 5000;
  o.op_timeout_ms = kGateMs;
  o.peer_silence_ms = kGateMs;
  o.psk = kKey;
  o.psk_bytes = sizeof kKey - 1;
  ds4tp_identity id;
  ds4tp_identity_init(&id);
  ds4tp_group *g = nullptr;
  int rc = ds4tp_group_new(&g, &o, &id);
  if (rc == 0) rc = ds4tp_group_connect(g);
  Report r;
  r.kind = kReportResult;
  r.value = 1;
  if (rc == 0) {
    r.value = 2;
    std::vector<float> v(1024, 1.0f);
    for (int i = 1; rc == 0; i++) {
      rc = ds4tp_group_all_reduce(g, v.data(), v.size(), DS4TP_DTYPE_F32, DS4TP_OP_SUM);
      if (i == 64) send_report(fd, kReportReady, 1);
    }
  }
  r.rc = rc;
  r.failed = g ? ds4tp_group_failed(g) != 0 : 0;
  r.t_ns = mono_ns();
  std::snprintf(r.msg, sizeof r.msg, "%s", g ? ds4tp_group_errmsg(g) : ds4tp_last_error());
  (void)!write(fd, &r, sizeof r);
  ds4tp_group_free(g);
  return 0;
}

}  // namespace

TEST_CASE("a link cut between two network namespaces ends both ranks in time") {
  const char *cut_side = GENERATE("leader", "worker");
  int go_l[2], go_w[2];
  REQUIRE(pipe(go_l) == 0);
  REQUIRE(pipe(go_w) == 0);
  Child leader =
      Child::spawn([&](int fd) { return ns_rank(fd, go_l[0], DS4TP_ROLE_LEADER); }, "leader");
  Child worker =
      Child::spawn([&](int fd) { return ns_rank(fd, go_w[0], DS4TP_ROLE_WORKER); }, "worker");
  close(go_l[0]);
  close(go_w[0]);
  Report rl, rw;
  bool ready = leader.next(rl, 5000) && worker.next(rw, 5000) && rl.kind == kReportReady &&
               rw.kind == kReportReady;
  auto skip = [&](const std::string &why) {
    leader.signal(SIGKILL);
    worker.signal(SIGKILL);
    std::printf("ds4tp-skip: %s\n", why.c_str());
  };
  if (!ready) {
    skip("cannot create network namespaces here (unshare(CLONE_NEWNET) refused)");
    return;
  }
  pid_t pl = leader.pid(), pw = worker.pid();
  // Names unique per run, in case the kernel checks them in this namespace.
  const std::string dl = "d4l" + std::to_string(pl), dw = "d4w" + std::to_string(pw);
  if (!veth_between(pl, dl, pw, dw)) {
    skip("cannot make a veth pair between namespaces (needs `ip`, `nsenter` and CAP_NET_ADMIN)");
    return;
  }
  (void)!write(go_l[1], "g", 1);
  (void)!write(go_w[1], "g", 1);
  close(go_l[1]);
  close(go_w[1]);
  REQUIRE(leader.next_of(kReportReady, rl, 15000));
  REQUIRE(worker.next_of(kReportReady, rw, 15000));
  // Cut the link mid-run, from one side.
  usleep(20000);
  bool cut_leader = std::strcmp(cut_side, "leader") == 0;
  std::string dev = cut_leader ? dl : dw;
  REQUIRE(run(in_ns(cut_leader ? pl : pw, {"ip", "link", "set", dev, "down"})) == 0);
  uint64_t cut = mono_ns();
  bool gl = leader.next_of(kReportResult, rl, kGateMs + kGraceMs + 3000);
  bool gw = worker.next_of(kReportResult, rw, kGateMs + kGraceMs + 3000);
  leader.signal(SIGKILL);
  worker.signal(SIGKILL);
  leader.reap(2000);
  worker.reap(2000);
  double ml = gl ? double(rl.t_ns - cut) / 1e6 : -1, mw = gw ? double(rw.t_ns - cut) / 1e6 : -1;
  std::printf("fault-summary: netns link cut on the %s side | leader %s after %.1f ms | worker "
              "%s after %.1f ms\n",
              cut_side, ds4tp_err_name(rl.rc), ml, ds4tp_err_name(rw.rc), mw);
  INFO("leader: " << rl.msg << "\n"
                  << leader.failures() << "worker: " << rw.msg << "\n"
                  << worker.failures());
  REQUIRE(gl);
  REQUIRE(gw);
  REQUIRE(rl.rc < 0);
  REQUIRE(rw.rc < 0);
  REQUIRE(std::string(ds4tp_err_name(rl.rc)) != "DS4TP_UNKNOWN");
  REQUIRE(std::string(ds4tp_err_name(rw.rc)) != "DS4TP_UNKNOWN");
  REQUIRE(rl.failed == 1);
  REQUIRE(rw.failed == 1);
  REQUIRE(ml <= kGateMs + kGraceMs);
  REQUIRE(mw <= kGateMs + kGraceMs);
}

// A 1 MiB all-reduce (two-shot over tcp: two steps of 512 KiB each way)
// over a loopback shaped to 8 Mbit/s (both directions share lo's qdisc:
// about 2 s), with op_timeout_ms 500. Bytes arrive all the while, so the
// call must complete: a deadline that only counted from a step's first
// wait would cut it off as a stopped rank.
TEST_CASE("a tcp all-reduce on a slow link that keeps moving outlasts op_timeout_ms") {
  constexpr int kOpMs = 500;
  Child shaped = Child::spawn(
      [](int fd) {
        // An Ethernet-sized MTU (tbf drops packets larger than its burst)
        // and a queue deeper than the bytes in flight: a drop would stall
        // TCP for a retransmission timeout, which is no longer "moving".
        if (unshare(CLONE_NEWNET) != 0 ||
            run({"ip", "link", "set", "lo", "mtu", "1500", "up"}) != 0 ||
            run({"tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "8mbit", "burst",
                 "16kb", "limit", "8mb"}) != 0) {
          send_report(fd, kReportResult, 77);
          return 0;
        }
        GroupRun run = run_group_procs(
            2, DS4TP_TRANSPORT_TCP,
            [](ds4tp_group *g, int, uint64_t &ms, std::string &why) {
              std::vector<float> v(1u << 18, 1.0f);  // 1 MiB
              const uint64_t t0 = mono_ns();
              int rc = ds4tp_group_all_reduce(g, v.data(), v.size(), DS4TP_DTYPE_F32,
                                              DS4TP_OP_SUM);
              ms = (mono_ns() - t0) / 1'000'000;
              why = rc ? ds4tp_group_errmsg(g) : "";
              if (rc == 0 && (v.front() != 2.0f || v.back() != 2.0f)) {
                why = "wrong sum";
                return -1;
              }
              return rc;
            },
            [](int, ds4tp_group_options &o, ds4tp_identity &) {
              o.op_timeout_ms = kOpMs;
              o.peer_silence_ms = 5000;  // heartbeats queue behind the data
              o.chunk_bytes = 1u << 20;
            },
            30000);
        Report r;  // by hand: the message is the run's, not a pair's
        r.kind = kReportResult;
        r.rc = run.rc;
        r.value = int64_t(run.digests[0]);
        std::snprintf(r.msg, sizeof r.msg, "%s", run.why.c_str());
        (void)!write(fd, &r, sizeof r);
        return 0;
      },
      "shaped");
  Report r;
  const bool got = shaped.next_of(kReportResult, r, 40000);
  shaped.reap(5000);
  REQUIRE(got);
  if (r.value == 77) {
    std::printf("ds4tp-skip: cannot shape a loopback in a namespace (needs unshare, ip, tc)\n");
    return;
  }
  INFO("status " << r.rc << ": " << r.msg << "; rank 0 took " << r.value << " ms");
  CHECK(r.rc == 0);
  // The link must really have been slower than the deadline, or this proves nothing.
  CHECK(r.value > 2 * kOpMs);
  std::printf("fault-summary: 1 MiB tcp all-reduce on an 8 Mbit/s loopback | %s after %lld ms "
              "| op_timeout_ms %d\n", ds4tp_err_name(r.rc), (long long)r.value, kOpMs);
}

// The same cut under a 2-rank tcp group: both ranks name it within the
// op deadline or the heartbeat's silence limit (1 s each here).
TEST_CASE("a link cut between two namespaces ends both ranks of a tcp group in time") {
  const int cut_rank = GENERATE(0, 1);
  int go[2][2];
  REQUIRE(pipe(go[0]) == 0);
  REQUIRE(pipe(go[1]) == 0);
  Child ranks[2] = {
      Child::spawn([&](int fd) { return ns_group_rank(fd, go[0][0], 0); }, "rank 0"),
      Child::spawn([&](int fd) { return ns_group_rank(fd, go[1][0], 1); }, "rank 1")};
  close(go[0][0]);
  close(go[1][0]);
  Report r0, r1;
  const bool ready = ranks[0].next(r0, 5000) && ranks[1].next(r1, 5000) &&
                     r0.kind == kReportReady && r1.kind == kReportReady;
  const pid_t p0 = ranks[0].pid(), p1 = ranks[1].pid();
  const std::string d0 = "g4a" + std::to_string(p0), d1 = "g4b" + std::to_string(p1);
  if (!ready || !veth_between(p0, d0, p1, d1)) {
    for (auto &c : ranks) c.signal(SIGKILL);
    std::printf("ds4tp-skip: cannot make a veth pair between namespaces (needs unshare, `ip`, "
                "`nsenter` and CAP_NET_ADMIN)\n");
    return;
  }
  for (auto &g : go) {
    (void)!write(g[1], "g", 1);
    close(g[1]);
  }
  REQUIRE(ranks[0].next_of(kReportReady, r0, 15000));
  REQUIRE(ranks[1].next_of(kReportReady, r1, 15000));
  usleep(20000);
  REQUIRE(run(in_ns(cut_rank == 0 ? p0 : p1, {"ip", "link", "set", cut_rank == 0 ? d0 : d1,
                                              "down"})) == 0);
  const uint64_t cut = mono_ns();
  const bool g0 = ranks[0].next_of(kReportResult, r0, kGateMs + kGraceMs + 3000);
  const bool g1 = ranks[1].next_of(kReportResult, r1, kGateMs + kGraceMs + 3000);
  for (auto &c : ranks) {
    c.signal(SIGKILL);
    c.reap(2000);
  }
  const double m0 = g0 ? double(r0.t_ns - cut) / 1e6 : -1, m1 = g1 ? double(r1.t_ns - cut) / 1e6 : -1;
  std::printf("fault-summary: netns link cut under a tcp group, rank %d's side | rank 0 %s after "
              "%.1f ms | rank 1 %s after %.1f ms\n",
              cut_rank, ds4tp_err_name(r0.rc), m0, ds4tp_err_name(r1.rc), m1);
  INFO("rank 0: " << r0.msg << "\nrank 1: " << r1.msg);
  REQUIRE(g0);
  REQUIRE(g1);
  CHECK(r0.rc < 0);
  CHECK(r1.rc < 0);
  CHECK(std::string(ds4tp_err_name(r0.rc)) != "DS4TP_UNKNOWN");
  CHECK(std::string(ds4tp_err_name(r1.rc)) != "DS4TP_UNKNOWN");
  CHECK(r0.failed == 1);
  CHECK(r1.failed == 1);
  CHECK(m0 <= kGateMs + kGraceMs);
  CHECK(m1 <= kGateMs + kGraceMs);
}
