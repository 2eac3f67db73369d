// Rails between two network namespaces joined by two veth pairs, each
// shaped by tc tbf to its own rate: a tcp pair given the second link as
// a rail measures both, splits big gates in proportion (the faster link
// takes the larger share), and every payload arrives bit for bit; its
// "rails-summary:" line gives the striped rate against the two links'
// (bench/README.md reports it; no speed is asserted here). Ranks that
// list their rails in another order fail bring-up naming the crossing.
// A rail cut mid big gates is recovered; the row gates' rail cut fails
// the pair over to its standby, keeping a third link's rail beside it.
// Skips (printing "ds4tp-skip:") where namespaces, `ip` or `tc` are not
// available.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include "support/netns.hpp"
#include "support/procs.hpp"
#include "support/ranks.hpp"

using namespace ds4tp::test;

namespace {

constexpr int kFastMbit = 400, kSlowMbit = 200;
constexpr uint64_t kBigBytes = 16u << 20;

std::string g_rails_line, g_lost_line, g_kept_line;
void keep_rails_line(void *, int, const char *msg) {
  if (std::strstr(msg, "resuming over the standby tcp link") != nullptr) g_lost_line = msg;
  if (std::strstr(msg, "rails:") == nullptr) return;
  if (std::strstr(msg, " lost ") != nullptr) g_lost_line = msg;
  else if (std::strstr(msg, "kept beside the standby") != nullptr) g_kept_line = msg;
  else if (g_rails_line.empty()) g_rails_line = msg;
}

// Row gates on rail 1 (the leader's plan puts them there: a test
// option), 300 before READY(1), then after a second go byte 300 more, the
// first of which finds the rail cut: each checked bit for bit. Then the
// pair runs over its standby tcp link, with a second rail beside it where
// it has one, and says so.
int row_gates_over_the_rail(int fd, int go_fd, ds4tp_pair *tp, double &moved_ms) {
  const int rank = ds4tp_rank(tp);
  auto *slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
  const ds4tp_slab_layout l = layout_of(tp);
  ds4tp_link_info li[5] = {};
  const int n = ds4tp_links(tp, li, 5, sizeof li[0]);
  CHILD_EXPECT((n == 3 || n == 4) && li[1].row == 1 && li[n - 1].role == DS4TP_LINK_STANDBY &&
                   li[n - 1].state == 0,
               tp);
  for (uint64_t seq = 1; seq <= 600; seq++) {
    const uint32_t g = uint32_t((seq - 1) % l.slots);
    auto *out = reinterpret_cast<uint32_t *>(slab + ds4tp_slab_out_offset(tp, g / 2, g % 2));
    auto *in = reinterpret_cast<uint32_t *>(slab + ds4tp_slab_in_offset(tp, g / 2, g % 2));
    for (uint64_t i = 0; i < l.vec_bytes / 4; i++) out[i] = uint32_t(i * 40503u + seq) ^ uint32_t(rank);
    const uint64_t t0 = mono_ns();
    CHILD_EXPECT_OK(ds4tp_gate_exchange(tp, g / 2, g % 2, seq), tp, "row seq %llu",
                    (unsigned long long)seq);
    if (seq == 301) moved_ms = double(mono_ns() - t0) / 1e6;
    for (uint64_t i = 0; i < l.vec_bytes / 4; i++)
      CHILD_EXPECT(in[i] == (uint32_t(i * 40503u + seq) ^ uint32_t(1 - rank)), tp,
                   "row seq %llu word %llu", (unsigned long long)seq, (unsigned long long)i);
    if (seq == 300) {
      send_report(fd, kReportReady, 1);
      CHILD_EXPECT(await_go(go_fd), tp);
    }
  }
  CHILD_EXPECT(ds4tp_transport_active(tp) == DS4TP_TRANSPORT_TCP, tp);
  ds4tp_stats st{};
  st.size = sizeof st;
  CHILD_EXPECT(ds4tp_stats_read(tp, &st) == DS4TP_OK && st.failovers == 1, tp);
  CHILD_EXPECT(ds4tp_links(tp, li, 5, sizeof li[0]) == n && li[0].state == -1 &&
                   li[1].state == -1 && li[n - 1].state == 1,
               tp);
  // Rail 2 is kept, taking a share of the big gates that follow.
  CHILD_EXPECT(n == 3 ? li[2].row == 1 : li[2].state == 1 && li[2].share > 0 && li[3].row == 1,
               tp, "rail 2: state %d share %u", li[2].state, li[2].share);
  return DS4TP_OK;
}

// A rank in its own namespace: READY(0) once unshared; after the go
// byte, pairs over tcp with `rails` and runs `gates` big gates, each
// checked bit for bit, with READY(1) after the second (or, with `rows`,
// row_gates_over_the_rail). RESULT: rc, value = the best big gate's
// Mbit/s per direction (rows: how long the gate that failed over took,
// in us), msg = its "rails:" log line (and the lost link's, if one was
// lost) or the error.
int ns_rank(int fd, int go_fd, int role, const char *rails, int gates = 3, bool rows = false) {
  if (unshare(CLONE_NEWNET) != 0) {
    send_report(fd, kReportResult, 0, 77);
    return 0;
  }
  send_report(fd, kReportReady, 0);
  if (!await_go(go_fd)) return 0;
  ds4tp_options o = rank_options(role, 7081);
  o.transport = DS4TP_TRANSPORT_TCP;
  o.listen_host = "10.78.1.1";
  o.leader_host = "10.78.1.1";
  o.connect_timeout_ms = 10000;
  o.big_gate_timeout_ms = 20000;
  o.rails = rails;
  o.log_fn = keep_rails_line;
  o.log_level = DS4TP_LOG_INFO;
  if (rows) {
    o.gate_timeout_ms = 1000;  // the cut rail's gate fails over within it
    setenv("DS4TP_ROW_LINK", "1", 1);
  }
  ds4tp_identity id = small_identity(4, 1024);
  ds4tp_pair *tp = nullptr;
  int rc = ds4tp_new(&tp, &o, &id);
  if (rc == 0) rc = ds4tp_connect(tp);
  if (rc == 0) rc = ds4tp_attach_slab(tp, nullptr, 0);
  // The data connection and one rail per address, all measured, their
  // shares summing to the whole, and the standby.
  ds4tp_link_info li[5] = {};
  const int links = 2 + int(std::count(rails, rails + std::strlen(rails), ','));
  int shares = 0;
  if (rc == 0 && (ds4tp_links(tp, li, 5, sizeof li[0]) != links + 1 || li[0].rate_mbit == 0 ||
                  li[1].rate_mbit == 0 || li[1].role != DS4TP_LINK_RAIL ||
                  li[links].role != DS4TP_LINK_STANDBY))
    rc = DS4TP_EPROTO;
  for (int k = 0; k < links; k++) shares += int(li[k].share);
  if (rc == 0 && shares != 1000) rc = DS4TP_EPROTO;
  double moved_ms = 0;  // rows: the gate the cut rail's loss moved to the standby
  if (rc == 0 && rows) rc = row_gates_over_the_rail(fd, go_fd, tp, moved_ms);
  double best = 0;
  const int rank = role == DS4TP_ROLE_LEADER ? 0 : 1;
  std::vector<uint32_t> out(kBigBytes / 4), in(kBigBytes / 4);
  for (uint64_t seq = 1; rc == 0 && seq <= uint64_t(gates); seq++) {
    // Odd gates end off a 4 KiB boundary: after a rail is dropped their
    // tail must still reach the peer (the last live link's remainder).
    const uint64_t bytes = kBigBytes - (seq % 2) * 12344;
    for (size_t i = 0; i < out.size(); i++) out[i] = uint32_t(i * 2654435761u + seq) ^ uint32_t(rank);
    const uint64_t t0 = mono_ns();
    rc = ds4tp_big_gate_exchange(tp, 1, seq, out.data(), in.data(), bytes);
    const double s = double(mono_ns() - t0) / 1e9;
    for (size_t i = 0; rc == 0 && i < bytes / 4; i++)
      CHILD_EXPECT(in[i] == (uint32_t(i * 2654435761u + seq) ^ uint32_t(1 - rank)), tp,
                   "big seq %llu word %zu", (unsigned long long)seq, i);
    if (rc == 0) best = std::max(best, double(bytes) * 8 / s / 1e6);
    if (seq == 2) send_report(fd, kReportReady, 1);
  }
  // Neither rank leaves while the other still reads its last bytes.
  if (rc == 0 && final_barrier(tp) != 0) rc = DS4TP_EIO;
  Report r;
  r.kind = kReportResult;
  r.rc = rc;
  r.value = rows ? int64_t(moved_ms * 1000) : int64_t(best);
  r.t_ns = mono_ns();
  const std::string &said = g_kept_line.empty() ? g_rails_line : g_kept_line;
  std::snprintf(r.msg, sizeof r.msg, "%s%s%s",
                rc == 0 ? said.c_str() : tp ? ds4tp_errmsg(tp) : ds4tp_last_error(),
                g_lost_line.empty() ? "" : " | ", g_lost_line.c_str());
  (void)!write(fd, &r, sizeof r);
  ds4tp_free(tp);
  return 0;
}

// The two ranks, joined by two veth links shaped by tbf: 10.78.1.0/24
// (the fast one, bring-up) and 10.78.2.0/24.
struct Ranks : NsRanks {
  Ranks(const char *leader_rails, const char *worker_rails, int gates = 3, bool rows = false,
        bool third = false)
      : NsRanks([=](int fd, int go_fd, int role) {
          return ns_rank(fd, go_fd, role,
                         role == DS4TP_ROLE_LEADER ? leader_rails : worker_rails, gates, rows);
        }) {
    if (!skipped().empty()) return;
    const pid_t pl = leader.pid(), pw = worker.pid();
    const std::string p = std::to_string(pl);
    const std::string a_l = "ra" + p + "l", a_w = "ra" + p + "w", b_l = "rb" + p + "l",
                      b_w = "rb" + p + "w", c_l = "rc" + p + "l", c_w = "rc" + p + "w";
    rail_dev = b_l;
    if (!veth_between(pl, a_l, "10.78.1.1", pw, a_w, "10.78.1.2") ||
        !veth_between(pl, b_l, "10.78.2.1", pw, b_w, "10.78.2.2") ||
        (third && !veth_between(pl, c_l, "10.78.3.1", pw, c_w, "10.78.3.2"))) {
      skip("cannot make veth pairs between namespaces (needs `ip`, `nsenter`, CAP_NET_ADMIN)");
      return;
    }
    auto shape = [](pid_t pid, const std::string &dev, int mbit) {
      return run_cmd(in_ns(pid, {"tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                                 std::to_string(mbit) + "mbit", "burst", "256kb", "latency",
                                 "20ms"})) == 0;
    };
    if (!shape(pl, a_l, kFastMbit) || !shape(pw, a_w, kFastMbit) || !shape(pl, b_l, kSlowMbit) ||
        !shape(pw, b_w, kSlowMbit) ||
        (third && (!shape(pl, c_l, kSlowMbit) || !shape(pw, c_w, kSlowMbit))))
      skip("cannot shape the veth links (needs `tc` with tbf)");
  }
  std::string rail_dev;  // the leader's end of the rail's veth
};

// "link K <rate> Mbit/s <share>/1000" from a rails: log line; -1 when absent.
int share_of(const char *line, int k) {
  const std::string key = "link " + std::to_string(k) + " ";
  const char *at = std::strstr(line, key.c_str());
  if (at == nullptr) return -1;
  unsigned mbit = 0;
  int share = -1;
  return std::sscanf(at + key.size(), "%u Mbit/s %d/1000", &mbit, &share) == 2 ? share : -1;
}

}  // namespace

TEST_CASE("netns rails: big gates split over two links of different rates, bit for bit") {
  Ranks r("10.78.2.1", "10.78.2.1");
  if (!r.runnable()) return;
  r.go();
  Report rl, rw;
  const bool gl = r.leader.next_of(kReportResult, rl, 60000);
  const bool gw = r.worker.next_of(kReportResult, rw, 60000);
  INFO(r.describe(rl, rw));
  REQUIRE(gl);
  REQUIRE(gw);
  REQUIRE(rl.rc == 0);
  REQUIRE(rw.rc == 0);
  // Both ranks split alike: the leader's plan, in both logs.
  CHECK(std::strcmp(rl.msg, rw.msg) == 0);
  const int fast = share_of(rl.msg, 0), slow = share_of(rl.msg, 1);
  CHECK(fast > slow);
  CHECK(slow > 0);
  std::printf("rails-summary: links of %d and %d Mbit/s, shares %d/%d per mille: striped big "
              "gate (16 MiB) %lld Mbit/s per direction, %.2f of the sum\n",
              kFastMbit, kSlowMbit, fast, slow, (long long)std::min(rl.value, rw.value),
              double(std::min(rl.value, rw.value)) / (kFastMbit + kSlowMbit));
}

TEST_CASE("netns rails: ranks that list their rails in another order fail, naming it") {
  Ranks r("10.78.1.1,10.78.2.1", "10.78.2.1,10.78.1.1");
  if (!r.runnable()) return;
  r.go();
  Report rl, rw;
  const bool gl = r.leader.next_of(kReportResult, rl, 20000);
  const bool gw = r.worker.next_of(kReportResult, rw, 20000);
  INFO(r.describe(rl, rw));
  REQUIRE(gl);
  REQUIRE(gw);
  CHECK(rl.rc == DS4TP_EUNSUPPORTED);
  CHECK(rw.rc == DS4TP_EUNSUPPORTED);
  CHECK(std::strstr(rl.msg, "the worker's rail 0 reached this leader's rail 1 (10.78.2.1)"));
  CHECK(std::strstr(rw.msg, "the ranks list their rails in another order (crossed)"));
}

TEST_CASE("netns rails: a rail cut mid big gates, the gate completes on the other link") {
  Ranks r("10.78.2.1", "10.78.2.1", 8);
  if (!r.runnable()) return;
  r.go();
  Report rl, rw;
  REQUIRE(r.leader.next_of(kReportReady, rl, 30000));  // two big gates done
  REQUIRE(r.worker.next_of(kReportReady, rw, 30000));
  // The rail's veth goes down under the third or fourth big gate.
  REQUIRE(run_cmd(in_ns(r.leader.pid(), {"ip", "link", "set", r.rail_dev, "down"})) == 0);
  const bool gl = r.leader.next_of(kReportResult, rl, 60000);
  const bool gw = r.worker.next_of(kReportResult, rw, 60000);
  INFO(r.describe(rl, rw));
  REQUIRE(gl);
  REQUIRE(gw);
  CHECK(rl.rc == 0);  // every big gate done, bit for bit
  CHECK(rw.rc == 0);
  CHECK(std::strstr(rl.msg, "rails: link 1 lost in a big gate, which completed over link 0"));
  CHECK(std::strstr(rw.msg, "rails: link 1 lost in a big gate, which completed over link 0"));
}

TEST_CASE("netns rails: the row gates' rail cut, the pair fails over to its standby link") {
  Ranks r("10.78.2.1", "10.78.2.1", 0, /*rows=*/true);
  if (!r.runnable()) return;
  r.go();
  Report rl, rw;
  REQUIRE(r.leader.next_of(kReportReady, rl, 30000));  // 300 row gates done on the rail
  REQUIRE(r.worker.next_of(kReportReady, rw, 30000));
  REQUIRE(run_cmd(in_ns(r.leader.pid(), {"ip", "link", "set", r.rail_dev, "down"})) == 0);
  r.go();
  const bool gl = r.leader.next_of(kReportResult, rl, 60000);
  const bool gw = r.worker.next_of(kReportResult, rw, 60000);
  INFO(r.describe(rl, rw));
  REQUIRE(gl);
  REQUIRE(gw);
  CHECK(rl.rc == 0);  // every row gate done, bit for bit, the last 300 over the standby
  CHECK(rw.rc == 0);
  std::printf("rails-failover-summary: the row gates' rail cut, the gate that moved to the "
              "standby took %.1f ms on the leader and %.1f ms on the worker (gate_timeout_ms "
              "1000)\n",
              double(rl.value) / 1000, double(rw.value) / 1000);
  // The first gate after the cut (seq 301: slot 300 % 8, layer 2 gate 0) moved.
  CHECK(std::strstr(rl.msg, "tcp rails lost at gate (layer 2, gate 0, seq 301)"));
  CHECK(std::strstr(rw.msg, "tcp rails lost at gate (layer 2, gate 0, seq 301)"));
  // The rank that gave up first names the rail (the other may only say
  // that the peer found it).
  CHECK((std::strstr(rl.msg, "rail 1 link") || std::strstr(rw.msg, "rail 1 link")));
}

TEST_CASE("netns rails: the row gates' rail cut with a second rail, big gates go on over the second rail and the standby") {
  Ranks r("10.78.2.1,10.78.3.1", "10.78.2.1,10.78.3.1", 3, /*rows=*/true, /*third=*/true);
  if (!r.runnable()) return;
  r.go();
  Report rl, rw;
  REQUIRE(r.leader.next_of(kReportReady, rl, 30000));  // 300 row gates done on rail 1
  REQUIRE(r.worker.next_of(kReportReady, rw, 30000));
  REQUIRE(run_cmd(in_ns(r.leader.pid(), {"ip", "link", "set", r.rail_dev, "down"})) == 0);
  r.go();
  const bool gl = r.leader.next_of(kReportResult, rl, 90000);
  const bool gw = r.worker.next_of(kReportResult, rw, 90000);
  INFO(r.describe(rl, rw));
  REQUIRE(gl);
  REQUIRE(gw);
  CHECK(rl.rc == 0);  // every row and big gate done, bit for bit
  CHECK(rw.rc == 0);
  // Both ranks keep rail 2 with the same share.
  CHECK(std::strstr(rl.msg, "rails: link 2 ("));
  CHECK(std::strncmp(rl.msg, rw.msg, std::strcspn(rl.msg, "|")) == 0);
  CHECK(std::strstr(rl.msg, "tcp rails lost at gate (layer 2, gate 0, seq 301)"));
}
