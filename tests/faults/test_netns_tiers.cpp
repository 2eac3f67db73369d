// A tiered group on the link model: two "hosts", each a network namespace
// (A at 10.77.1.1, B at 10.77.1.2, joined by a veth pair) holding two
// rank processes that claim its host id. Checked: every collective against
// the host-major reference with the same bits on every rank; then a cut
// of the veth, and the SIGKILL or SIGSTOP of a leader and of a non-leader
// mid-call: every surviving rank returns a named error within the
// liveness bound; the same with rdma between the leaders (the test verbs
// provider, whose messages go through shared memory, not the veth); and
// a rank that claims a host whose /dev/shm it cannot see (its own mount
// namespace stands for another machine's) gets a host of its own. Skips
// ("ds4tp-skip:") where namespaces, `ip` or `nsenter` are missing.
#include <catch2/catch.hpp>

#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "support/group_util.hpp"
#include "support/netns.hpp"
#include "support/procs.hpp"

using namespace ds4tp::test;

namespace {

constexpr int kOpMs = 1000, kSilenceMs = 1000, kGraceMs = 1500;
const char *const kAddr[2] = {"10.77.1.1", "10.77.1.2"};

// Ranks 0, 1 on host A, 2, 3 on host B: leaders 0 and 2.
int host_of(int rank) { return rank / 2; }

struct Hosts {
  std::unique_ptr<NetnsHolder> h[2];
  std::string why;  // empty: both up and linked
  Hosts() {
    h[0] = std::make_unique<NetnsHolder>();
    h[1] = std::make_unique<NetnsHolder>();
    if (!h[0]->ok() || !h[1]->ok()) {
      why = "cannot create network namespaces here (unshare(CLONE_NEWNET) refused)";
    } else if (!veth_between(h[0]->pid(), dev(0), kAddr[0], h[1]->pid(), dev(1), kAddr[1])) {
      why = "cannot make a veth pair between namespaces (needs `ip`, `nsenter` and CAP_NET_ADMIN)";
    }
  }
  std::string dev(int i) const { return (i ? "t4b" : "t4a") + std::to_string(h[i]->pid()); }
  // In a rank child: into its host's namespace, claiming its host id.
  bool enter(int rank) const {
    setenv("DS4TP_HOST_ID", host_of(rank) ? "netns-host-b" : "netns-host-a", 1);
    return h[host_of(rank)]->enter();
  }
};

// The leaders' medium: tcp, or rdma through the test verbs provider (the
// ranks inherit the environment). False when rdma is asked for but this
// build has no provider.
struct Across {
  explicit Across(bool rdma) {
#ifdef DS4TP_TEST_VERBS_PROVIDER
    if (rdma) setenv("DS4TP_VERBS_LIB", DS4TP_TEST_VERBS_PROVIDER, 1);
    ok = true;
#else
    ok = !rdma;
#endif
  }
  ~Across() { unsetenv("DS4TP_VERBS_LIB"); }
  bool ok = false;
};

void options_for(int rank, const Hosts &hosts, ds4tp_group_options &o) {
  o.rank = rank;
  o.group_size = 4;
  o.rendezvous_host = kAddr[0];
  o.transport = DS4TP_TRANSPORT_AUTO;
  o.connect_timeout_ms = 10000;
  o.op_timeout_ms = kOpMs;
  o.peer_silence_ms = kSilenceMs;
  o.chunk_bytes = 64 * 1024;
  (void)hosts;
}

}  // namespace

TEST_CASE("netns tiers: every collective over 2 hosts x 2 ranks", "[group][tiers][netns]") {
  const bool rdma = GENERATE(false, true);
  Across across(rdma);
  Hosts hosts;
  if (!hosts.why.empty() || !across.ok) {
    std::printf("ds4tp-skip: %s\n", across.ok ? hosts.why.c_str() : "no test verbs provider");
    return;
  }
  const HostOrder order = {{0, 1}, {2, 3}};
  const std::string want = rdma ? "rdma across hosts between leaders 0 and 2"
                                : "tcp across hosts between leaders 0 and 2";
  GroupRun run = run_group_procs(
      4, DS4TP_TRANSPORT_AUTO,
      [&order, &want](ds4tp_group *g, int, uint64_t &digest, std::string &why) {
        char plan[512];
        if (ds4tp_group_plan(g, plan, sizeof plan, nullptr) != 0 ||
            std::strstr(plan, want.c_str()) == nullptr) {
          why = std::string("not the tiered plan: ") + plan;
          return -1;
        }
        return group_checks(g, {1, 4096, 16384, 40001}, why, digest, BufferUse::Own, order);
      },
      [&hosts](int r, ds4tp_group_options &o, ds4tp_identity &) {
        if (!hosts.enter(r)) std::printf("rank %d could not enter its namespace\n", r);
        const int port = o.rendezvous_port;
        options_for(r, hosts, o);
        o.rendezvous_port = port;
      },
      60000);
  INFO(run.why);
  REQUIRE(run.rc == 0);
  for (size_t r = 1; r < run.digests.size(); r++) CHECK(run.digests[r] == run.digests[0]);
}

namespace {

enum class Fault { Cut, KillLeader, KillMember, StopLeader, StopMember };
const char *fault_name(Fault f) {
  switch (f) {
    case Fault::Cut: return "veth cut";
    case Fault::KillLeader: return "SIGKILL of host B's leader (rank 2)";
    case Fault::KillMember: return "SIGKILL of a non-leader (rank 3)";
    case Fault::StopLeader: return "SIGSTOP of host B's leader (rank 2)";
    case Fault::StopMember: return "SIGSTOP of a non-leader (rank 3)";
  }
  return "?";
}

// A rank: all-reduces 4096 floats until a call fails; READY after 32.
int looping_rank(int fd, int rank, int port, const Hosts &hosts) {
  if (!hosts.enter(rank)) {
    send_report(fd, kReportResult, 0, 77);
    return 0;
  }
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  options_for(rank, hosts, o);
  o.rendezvous_port = port;
  ds4tp_group *g = nullptr;
  int rc = ds4tp_group_new(&g, &o, nullptr);
  if (rc == 0 && rank == 0) send_report(fd, kReportPort, ds4tp_group_rendezvous_port(g));
  if (rc == 0) rc = ds4tp_group_connect(g);
  std::vector<float> v(4096, 1.0f);
  for (int i = 1; rc == 0; i++) {
    rc = ds4tp_group_all_reduce(g, v.data(), v.size(), DS4TP_DTYPE_F32, DS4TP_OP_SUM);
    if (rc == 0 && v[0] != 4.0f) rc = -999;
    std::fill(v.begin(), v.end(), 1.0f);
    if (i == 32) send_report(fd, kReportReady, 1);
  }
  Report r;
  r.kind = kReportResult;
  r.rc = rc;
  r.t_ns = mono_ns();
  std::snprintf(r.msg, sizeof r.msg, "%s",
                rc == -999 ? "wrong sum" : g ? ds4tp_group_errmsg(g) : ds4tp_last_error());
  (void)!write(fd, &r, sizeof r);
  ds4tp_group_free(g);
  return 0;
}

}  // namespace

TEST_CASE("netns tiers: a cut, a dead or a stopped rank ends every other rank in time",
          "[group][tiers][netns][fault]") {
  const Fault fault = GENERATE(Fault::Cut, Fault::KillLeader, Fault::KillMember,
                               Fault::StopLeader, Fault::StopMember);
  const bool rdma = GENERATE(false, true);
  Across across(rdma);
  Hosts hosts;
  if (!hosts.why.empty() || !across.ok) {
    std::printf("ds4tp-skip: %s\n", across.ok ? hosts.why.c_str() : "no test verbs provider");
    return;
  }
  std::vector<Child> kids;
  kids.push_back(Child::spawn([&](int fd) { return looping_rank(fd, 0, 0, hosts); }, "rank 0"));
  Report r;
  REQUIRE(kids[0].next_of(kReportPort, r, 10000));
  const int port = int(r.value);
  for (int k = 1; k < 4; k++)
    kids.push_back(Child::spawn([&, k](int fd) { return looping_rank(fd, k, port, hosts); }, "rank"));
  for (auto &k : kids) REQUIRE(k.next_of(kReportReady, r, 20000));
  const int victim = fault == Fault::Cut ? -1
                     : fault == Fault::KillLeader || fault == Fault::StopLeader ? 2
                                                                                 : 3;
  if (fault == Fault::Cut)
    REQUIRE(run_cmd(in_ns(hosts.h[1]->pid(), {"ip", "link", "set", hosts.dev(1), "down"})) == 0);
  else
    kids[size_t(victim)].signal(fault == Fault::KillLeader || fault == Fault::KillMember ? SIGKILL
                                                                                       : SIGSTOP);
  const uint64_t at = mono_ns();
  const int bound = kOpMs + kSilenceMs;  // the op deadline, or silence then the verdict
  std::string summary;
  for (int k = 0; k < 4; k++) {
    if (k == victim) continue;
    Report res;
    const bool got = kids[size_t(k)].next_of(kReportResult, res, bound + kGraceMs + 3000);
    const double ms = got ? double(res.t_ns - at) / 1e6 : -1;
    summary += " | rank " + std::to_string(k) + " " + (got ? ds4tp_err_name(res.rc) : "none") +
               " after " + std::to_string(int(ms)) + " ms";
    INFO(fault_name(fault) << ": rank " << k << ": " << res.msg);
    REQUIRE(got);
    CHECK(res.rc < 0);
    CHECK(std::string(ds4tp_err_name(res.rc)) != "DS4TP_UNKNOWN");
    CHECK(ms <= bound + kGraceMs);
    if (victim >= 0) CHECK(std::string(res.msg).find("rank " + std::to_string(victim)) != std::string::npos);
  }
  std::printf("fault-summary: netns tiered 2 x 2 (%s across), %s%s\n", rdma ? "rdma" : "tcp",
              fault_name(fault), summary.c_str());
  for (auto &k : kids) {
    k.signal(SIGKILL);
    k.reap(2000);
  }
}

// The link between the hosts shaped to 8 Mbit/s (each end's egress, a
// queue deeper than the bytes in flight, so nothing is dropped) and 4 MiB
// chunks: one chunk's all-reduce across hosts takes about 4 s, longer
// than the host ranks' deadline on their leader (op_timeout_ms 500 plus
// twice peer_silence_ms and the verdict: 2.7 s). The leaders' bytes keep
// moving, so every rank must complete the call, with the right sum.
TEST_CASE("netns tiers: a slow link that keeps moving is not taken for a stalled leader",
          "[group][tiers][netns]") {
  Hosts hosts;
  if (!hosts.why.empty()) {
    std::printf("ds4tp-skip: %s\n", hosts.why.c_str());
    return;
  }
  for (int i = 0; i < 2; i++)
    if (run_cmd(in_ns(hosts.h[i]->pid(), {"tc", "qdisc", "add", "dev", hosts.dev(i), "root",
                                          "tbf", "rate", "8mbit", "burst", "16kb", "limit",
                                          "8mb"})) != 0) {
      std::printf("ds4tp-skip: cannot shape the veth (needs `tc` with tbf)\n");
      return;
    }
  constexpr uint64_t kFloats = 1u << 20;  // 4 MiB: one chunk
  GroupRun run = run_group_procs(
      4, DS4TP_TRANSPORT_AUTO,
      [](ds4tp_group *g, int, uint64_t &ms, std::string &why) {
        std::vector<float> v(kFloats, 1.0f);
        const uint64_t t0 = mono_ns();
        const int rc = ds4tp_group_all_reduce(g, v.data(), v.size(), DS4TP_DTYPE_F32, DS4TP_OP_SUM);
        ms = (mono_ns() - t0) / 1000000;
        if (rc != 0) {
          why = std::string(ds4tp_err_name(rc)) + ": " + ds4tp_group_errmsg(g);
          return rc;
        }
        for (uint64_t i = 0; i < kFloats; i++)
          if (v[i] != 4.0f) {
            why = "element " + std::to_string(i) + " is " + std::to_string(v[i]) + ", not 4";
            return -1;
          }
        return 0;
      },
      [&hosts](int r, ds4tp_group_options &o, ds4tp_identity &) {
        if (!hosts.enter(r)) std::printf("rank %d could not enter its namespace\n", r);
        const int port = o.rendezvous_port;
        options_for(r, hosts, o);
        o.rendezvous_port = port;
        o.op_timeout_ms = 500;
        o.chunk_bytes = 4u << 20;
      },
      60000);
  INFO(run.why);
  REQUIRE(run.rc == 0);
  std::printf("slow-link-summary: a 4 MiB all-reduce over an 8 Mbit/s link between 2 hosts x 2 "
              "ranks took %llu ms on rank 3 (op_timeout_ms 500)\n",
              (unsigned long long)run.digests[3]);
}

namespace {

// A fresh /dev/shm of this process's own, as on another machine: true
// when it could be made (needs CAP_SYS_ADMIN).
bool private_shm() {
  return unshare(CLONE_NEWNS) == 0 && mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
         mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=64m") == 0;
}

}  // namespace

TEST_CASE("netns tiers: a rank claiming a host whose memory it cannot share gets a host of its own",
          "[group][tiers][netns]") {
#ifdef DS4TP_TEST_PORTABLE_POSIX
  std::printf("ds4tp-skip: the portable-POSIX layer's host id does not include the /dev/shm a "
              "rank sees (such a rank fails bring-up instead of getting a host of its own)\n");
  return;
#endif
  Hosts hosts;
  if (!hosts.why.empty()) {
    std::printf("ds4tp-skip: %s\n", hosts.why.c_str());
    return;
  }
  {
    Child probe = Child::spawn(
        [](int fd) {
          send_report(fd, kReportResult, 0, private_shm() ? 0 : 1);
          return 0;
        },
        "mount probe");
    Report r;
    const bool can = probe.next_of(kReportResult, r, 5000) && r.rc == 0;
    probe.reap(2000);
    if (!can) {
      std::printf("ds4tp-skip: cannot give a rank a /dev/shm of its own (unshare(CLONE_NEWNS) "
                  "or the tmpfs mount refused)\n");
      return;
    }
  }
  // Rank 2 runs in host B's namespace with a /dev/shm of its own but
  // claims host A (DS4TP_HOST_ID), where ranks 0 and 1 run. A host id
  // includes the identity of the /dev/shm a rank sees, so the claim cannot
  // put it on host A: it becomes a host of its own, and every result keeps
  // the bits of that layout's host-major order.
  const HostOrder order = {{0, 1}, {2}, {3}};
  GroupRun run = run_group_procs(
      4, DS4TP_TRANSPORT_AUTO,
      [&order](ds4tp_group *g, int, uint64_t &digest, std::string &why) {
        char plan[512] = "";
        ds4tp_group_plan(g, plan, sizeof plan, nullptr);
        if (std::strstr(plan, "plan: 3 hosts (2 + 1 + 1 ranks)") == nullptr) {
          why = std::string("not the layout of a rank on a host of its own: ") + plan;
          return -1;
        }
        return group_checks(g, {1, 4096, 40001}, why, digest, BufferUse::Own, order);
      },
      [&hosts](int r, ds4tp_group_options &o, ds4tp_identity &) {
        if (!hosts.enter(r)) std::printf("rank %d could not enter its namespace\n", r);
        if (r == 2) {
          setenv("DS4TP_HOST_ID", "netns-host-a", 1);
          if (!private_shm()) std::printf("rank 2 has no /dev/shm of its own\n");
        }
        const int port = o.rendezvous_port;
        options_for(r, hosts, o);
        o.rendezvous_port = port;
      },
      60000);
  INFO(run.why);
  REQUIRE(run.rc == 0);
  for (size_t r = 1; r < run.digests.size(); r++) CHECK(run.digests[r] == run.digests[0]);
}
