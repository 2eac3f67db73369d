// RDMA rails (ds4tp_options.rdma_rails, link/rdma/rails.cpp) through
// the test verbs provider, whose devices fv0..fv2 are each cabled only to
// the same device of the other process: a pair over fv0 with fv1 as a
// rail splits its big gates across both, every payload bit for bit, and
// ds4tp_links reports each link's share, rate and round trip; a rail cut
// mid big gates leaves the pair on its other rdma links, a primary cut
// moves it to its standby; a rail with a clearly shorter round trip
// carries the row gates, and losing it leaves them to the primary; lists
// of different lengths,
// a rail that is no device and crossed rails are named. Every ctest name
// starts with "rdma rails".
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "support/failover_util.hpp"
#include "link/rdma/probe.hpp"

using namespace ds4tp::test;

namespace {

// Both ranks: the primary on fv0 (uc-apple: rdma_en5), these rails.
RankSetup rails_setup(const char *leader_rails, const char *worker_rails) {
  RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
  auto lead = s.leader_tweak, work = s.worker_tweak;
  s.leader_tweak = [lead, leader_rails](ds4tp_options &o) {
    lead(o);
    o.rdma_rails = leader_rails;
  };
  s.worker_tweak = [work, worker_rails](ds4tp_options &o) {
    work(o);
    o.rdma_rails = worker_rails;
  };
  return s;
}

// Row gates on the primary, whatever the round trips the leader measures
// (the provider's links tie, so noise would choose): most cases rely on it.
struct RowsOnPrimary {
  ScopedEnv env{"DS4TP_ROW_LINK", "0"};
};

// The links after attach: the primary and `rails` rails, all rdma, with
// shares that sum to 1000 and measured rates, the row gates on link
// `row`, then the idle standby.
int rdma_links(ds4tp_pair *tp, int rails = 1, int row = 0) {
  ds4tp_link_info li[8];
  const int n = ds4tp_links(tp, li, 8, sizeof li[0]);
  CHILD_EXPECT(n == rails + 2, tp, "links %d", n);
  uint32_t shares = 0;
  for (int k = 0; k <= rails; k++) {
    CHILD_EXPECT(li[k].transport == DS4TP_TRANSPORT_RDMA &&
                     li[k].role == (k == 0 ? DS4TP_LINK_DATA : DS4TP_LINK_RAIL) &&
                     li[k].state == 1 && li[k].row == (k == row) && li[k].share > 0 &&
                     li[k].rate_mbit > 0,
                 tp, "link %d: role %d state %d row %d share %u rate %u", k, li[k].role,
                 li[k].state, li[k].row, li[k].share, li[k].rate_mbit);
    shares += li[k].share;
  }
  CHILD_EXPECT(shares == 1000, tp, "shares sum to %u", shares);
  CHILD_EXPECT(li[rails + 1].role == DS4TP_LINK_STANDBY && li[rails + 1].state == 0, tp);
  return 0;
}

// Both ranks with big gates of 1.5 s.
RankSetup quick_bigs(RankSetup s) {
  s.leader_tweak = [t = s.leader_tweak](ds4tp_options &o) {
    t(o);
    o.big_gate_timeout_ms = 1500;
  };
  s.worker_tweak = [t = s.worker_tweak](ds4tp_options &o) {
    t(o);
    o.big_gate_timeout_ms = 1500;
  };
  return s;
}

}  // namespace

TEST_CASE("rdma rails: a rail device's text is parsed or refused") {
  ds4tp::rdma::ProbeRequest r;
  CHECK(ds4tp::rdma::parse_rail("mlx5_1", r));
  CHECK((r.device == "mlx5_1" && r.port == 1 && r.gid_index == -1));
  CHECK(ds4tp::rdma::parse_rail("rdma_en6:2:3", r));
  CHECK((r.device == "rdma_en6" && r.port == 2 && r.gid_index == 3));
  for (const char *bad : {"", ":1", "fv1:0", "fv1:256", "fv1:1:", "fv1:1:x", "fv1:1:70000"}) {
    INFO(bad);
    CHECK_FALSE(ds4tp::rdma::parse_rail(bad, r));
  }
}

TEST_CASE("rdma rails: big gates split over the primary and a rail, bit for bit") {
  RowsOnPrimary rows;
  // A second device (rc, uc-apple), the primary's port through its other
  // GID (the link-local one; the primary takes the RoCE v2 GID), and two
  // rails.
  struct Case {
    const char *profile, *rails;
    int count;
  };
  const Case cases[] = {
      {"rc", "fv1", 1}, {"uc-apple", "rdma_en6", 1}, {"rc", "fv0:1:0", 1}, {"rc", "fv1,fv2", 2}};
  for (const Case &c : cases) {
    INFO(c.profile << " rails " << c.rails);
    Provider p(c.profile);
    RankSetup s = rails_setup(c.rails, c.rails);
    const int count = c.count;
    Body b = [count](ds4tp_pair *tp, Ctx &) -> int {
      CHILD_EXPECT_OK(connect_attach(tp), tp);
      if (int rc = rdma_links(tp, count)) return rc;
      Seqs q;
      if (int rc = traffic(tp, q)) return rc;
      if (int rc = bigs(tp, 3, q)) return rc;
      CHILD_EXPECT(ds4tp_transport_active(tp) == DS4TP_TRANSPORT_RDMA, tp);
      CHILD_EXPECT(failovers(tp) == 0, tp);
      return final_barrier(tp);
    };
    Outcome o = run_pair(s, b, b);
    REQUIRE_RANKS_OK(o);
    CHECK(logged("rdma rails: big gates of 1024 KiB or more split") != "");
  }
}

TEST_CASE("rdma rails: a rail cut mid big gates leaves the pair on its other rdma links") {
  RowsOnPrimary rows;
  // From the rail's 7th send on, everything the worker sends on fv1 is
  // lost with good completions, so the leader's rail receives never
  // complete: at attach a rail sends 6 (a 2 MiB sample in 1 MiB messages,
  // four pings), so the 7th is in the first big gate. The leader names
  // rail 1 lost; both ranks make the rdma transport again without it.
  // With two rails the big gates go on striped over fv0 and fv2.
  for (const char *rails : {"fv1", "fv1,fv2"}) {
    INFO("rails " << rails);
    Provider p;
    RankSetup s = quick_bigs(rails_setup(rails, rails));
    const int count = rails[3] == ',' ? 2 : 1;
    Body b = [count](ds4tp_pair *tp, Ctx &c) -> int {
      ScopedEnv f("DS4TP_VERBS_PROVIDER_FAULT", c.rank == 1 ? "cut=7@1" : nullptr);
      CHILD_EXPECT_OK(connect_attach(tp), tp);
      if (int rc = rdma_links(tp, count)) return rc;
      Seqs q;
      if (int rc = traffic(tp, q)) return rc;
      if (int rc = bigs(tp, 2, q)) return rc;
      CHILD_EXPECT(ds4tp_transport_active(tp) == DS4TP_TRANSPORT_RDMA, tp, "log: %s",
                   logged(" lost at ").c_str());
      CHILD_EXPECT(failovers(tp) == 1, tp, "failovers %llu", (unsigned long long)failovers(tp));
      const std::string line = logged("rdma rail 1 lost at big gate (");
      CHILD_EXPECT(line.find("resuming over rdma over the other links") != std::string::npos,
                   tp, "log: %s", line.c_str());
      // The primary carries on (with fv2 beside it, sharing big gates),
      // rail 1 is lost, the standby is the data connection.
      ds4tp_link_info li[8];
      const int n = ds4tp_links(tp, li, 8, sizeof li[0]);
      CHILD_EXPECT(n == count + 2, tp, "links %d", n);
      CHILD_EXPECT(li[0].role == DS4TP_LINK_DATA && li[0].state == 1 && li[0].row, tp,
                   "primary state %d", li[0].state);
      CHILD_EXPECT(li[1].role == DS4TP_LINK_RAIL && li[1].state == -1 && li[1].share == 0, tp,
                   "rail 1 state %d share %u", li[1].state, li[1].share);
      CHILD_EXPECT(count == 1 || (li[2].state == 1 && li[2].share > 0 &&
                                  li[0].share + li[2].share == 1000),
                   tp, "rail 2 state %d share %u, primary share %u", li[2].state, li[2].share,
                   li[0].share);
      CHILD_EXPECT(li[n - 1].role == DS4TP_LINK_STANDBY && li[n - 1].state == 1, tp);
      return final_barrier(tp);
    };
    Outcome o = run_pair(s, b, b);
    REQUIRE_RANKS_OK(o);
  }
}

TEST_CASE("rdma rails: a primary cut beside a rail moves the pair to its standby") {
  RowsOnPrimary rows;
  Provider p;
  RankSetup s = quick_bigs(rails_setup("fv1", "fv1"));
  // The worker's fv0 loses what it sends from its 10th send on: attach
  // sends 7 there (a warm-up, a 2 MiB sample, four pings), so the third
  // row gate is lost. The wait names no rail: the pair goes to tcp.
  Body b = [](ds4tp_pair *tp, Ctx &c) -> int {
    ScopedEnv f("DS4TP_VERBS_PROVIDER_FAULT", c.rank == 1 ? "cut=10@0" : nullptr);
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    if (int rc = rdma_links(tp)) return rc;
    Seqs q;
    if (int rc = traffic(tp, q)) return rc;
    CHILD_EXPECT(ds4tp_transport_active(tp) == DS4TP_TRANSPORT_TCP, tp);
    CHILD_EXPECT(failovers(tp) == 1, tp, "failovers %llu", (unsigned long long)failovers(tp));
    const std::string line = logged("resuming over the standby tcp link");
    CHILD_EXPECT(line.find("row gate (") != std::string::npos, tp, "log: %s", line.c_str());
    ds4tp_link_info li[4];
    CHILD_EXPECT(ds4tp_links(tp, li, 4, sizeof li[0]) == 3 && li[0].state == -1 &&
                     li[1].state == -1 && li[2].state == 1 && li[2].row,
                 tp);
    return final_barrier(tp);
  };
  Outcome o = run_pair(s, b, b);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("rdma rails: a UC rail whose sample is lost is made again, as the primary is") {
  RowsOnPrimary rows;
  Provider p("uc-apple");
  RankSetup s = rails_setup("rdma_en6", "rdma_en6");
  // The worker's first queue pair on its rail never receives: the rail's
  // sample is lost one way, both ranks read so in the verdicts and make
  // the rail's queue pair again.
  Body b = [](ds4tp_pair *tp, Ctx &c) -> int {
    ScopedEnv f("DS4TP_VERBS_PROVIDER_FAULT", c.rank == 1 ? "dead=1@1" : nullptr);
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    if (int rc = rdma_links(tp)) return rc;
    Seqs q;
    if (int rc = bigs(tp, 2, q)) return rc;
    const std::string line = logged("rdma rail 1: sample attempt 1 failed");
    CHILD_EXPECT(line.find("peer -> this rank") != std::string::npos, tp, "log: %s",
                 line.c_str());
    return final_barrier(tp);
  };
  Outcome o = run_pair(s, b, b);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("rdma rails: lists of different lengths fail ds4tp_connect naming both counts") {
  Provider p;
  RankSetup s = rails_setup("fv1", nullptr);
  Body b = [](ds4tp_pair *tp, Ctx &c) -> int {
    CHILD_EXPECT_RC(ds4tp_connect(tp), DS4TP_EINVAL, tp);
    const std::string m = ds4tp_errmsg(tp);
    const char *want = c.rank == 0 ? "this rank (leader) lists 1, the worker 0"
                                   : "this rank (worker) lists 0, the leader 1";
    CHILD_EXPECT(m.find(want) != std::string::npos, tp, "message: %s", m.c_str());
    return 0;
  };
  Outcome o = run_pair(s, b, b);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("rdma rails: a rail that is no device fails ds4tp_connect naming it") {
  Provider p;
  RankSetup s = rails_setup("mlx5_9", "fv1");
  Body lead = [](ds4tp_pair *tp, Ctx &) -> int {
    CHILD_EXPECT_RC(ds4tp_connect(tp), DS4TP_EUNSUPPORTED, tp);
    const std::string m = ds4tp_errmsg(tp);
    CHILD_EXPECT(m.find("rdma rail 1 (mlx5_9): RDMA device 'mlx5_9' not found") !=
                     std::string::npos,
                 tp, "message: %s", m.c_str());
    return 0;
  };
  // The worker meets the leader's closed data connection, at connect or
  // at attach: it fails, whichever.
  Body work = [](ds4tp_pair *tp, Ctx &) -> int {
    CHILD_EXPECT(connect_attach(tp) != DS4TP_OK, tp);
    return 0;
  };
  Outcome o = run_pair(s, lead, work);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("rdma rails: crossed rails are named at attach on both ranks") {
  // The leader's rail is fv1, the worker's fv2: fv1's cable ends at the
  // worker's fv1, so nothing the rail sends arrives (rc: its sends fail;
  // uc-apple: they vanish, and the rail is made again before giving up).
  for (const char *profile : {"rc", "uc-apple"}) {
    INFO(profile);
    Provider p(profile);
    const bool apple = std::string(profile) == "uc-apple";
    RankSetup s = rails_setup(apple ? "rdma_en6" : "fv1", apple ? "rdma_en7" : "fv2");
    Body b = [](ds4tp_pair *tp, Ctx &) -> int {
      CHILD_EXPECT_OK(ds4tp_connect(tp), tp);
      CHILD_EXPECT_RC(ds4tp_attach_slab(tp, nullptr, 0), DS4TP_EIO, tp);
      const std::string m = ds4tp_errmsg(tp);
      CHILD_EXPECT(m.find("rdma rail 1 (") != std::string::npos &&
                       m.find("its sample did not cross") != std::string::npos &&
                       m.find("crossed") != std::string::npos,
                   tp, "message: %s", m.c_str());
      return 0;
    };
    Outcome o = run_pair(s, b, b);
    REQUIRE_RANKS_OK(o);
  }
}

TEST_CASE("rdma rails: links that cannot be made again after a rail's loss fail the pair, naming both") {
  RowsOnPrimary rows;
  Provider p;
  RankSetup s = quick_bigs(rails_setup("fv1", "fv1"));
  // The worker's rail goes silent in the first big gate (cut=7@1, as
  // above) and every queue pair its fv0 makes after the first never
  // receives: the primary made again fails its warm-up on both ranks.
  Body b = [](ds4tp_pair *tp, Ctx &c) -> int {
    ScopedEnv f("DS4TP_VERBS_PROVIDER_FAULT", c.rank == 1 ? "cut=7@1,dead_after=1@0" : nullptr);
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    std::vector<uint8_t> out(kBigBytes, uint8_t(1 + c.rank)), in(kBigBytes);
    const int rc = ds4tp_big_gate_exchange(tp, 3, 1, out.data(), in.data(), out.size());
    const std::string m = ds4tp_errmsg(tp);
    CHILD_EXPECT(rc != DS4TP_OK &&
                     m.find("failover to rdma over the other links failed") != std::string::npos,
                 tp, "rc %d message: %s", rc, m.c_str());
    CHILD_EXPECT_RC(ds4tp_big_gate_exchange(tp, 3, 2, out.data(), in.data(), out.size()),
                    DS4TP_EFAILED, tp);
    return 0;
  };
  Outcome o = run_pair(s, b, b);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("rdma rails: row gates run on a rail whose round trip is clearly shorter") {
  // Both ranks' fv0 hold every send 3 ms: the leader's pings find the
  // rail fv1 far quicker, so the plan puts the row and batch gates there
  // and big gates stay split over both. The worker's fv0 then loses what
  // it sends from its 8th send on (attach sends 7 there: a warm-up, a
  // 2 MiB sample, four pings): row and batch gates go on untouched, and
  // the first striped big gate finds the primary lost and moves the pair
  // to tcp, as a lost primary does whichever link carries the rows.
  Provider p;
  RankSetup s = quick_bigs(rails_setup("fv1", "fv1"));
  Body b = [](ds4tp_pair *tp, Ctx &c) -> int {
    ScopedEnv f("DS4TP_VERBS_PROVIDER_FAULT", c.rank == 1 ? "delay=3000@0,cut=8@0" : "delay=3000@0");
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    if (int rc = rdma_links(tp, 1, 1)) return rc;
    const std::string plan = logged("rdma rails: big gates of");
    CHILD_EXPECT(plan.find("row and batch gates on rail 1 (fv1") != std::string::npos, tp,
                 "log: %s", plan.c_str());
    Seqs q;
    if (int rc = rows(tp, kRows, q)) return rc;
    if (int rc = batches(tp, kBatches, q)) return rc;
    if (int rc = rows(tp, kTailRows, q)) return rc;
    CHILD_EXPECT(ds4tp_transport_active(tp) == DS4TP_TRANSPORT_RDMA && failovers(tp) == 0, tp,
                 "row and batch gates left the rail: failovers %llu, log: %s",
                 (unsigned long long)failovers(tp), logged(" lost at ").c_str());
    if (int rc = bigs(tp, kBigs, q)) return rc;
    if (int rc = rows(tp, kTailRows, q)) return rc;
    CHILD_EXPECT(ds4tp_transport_active(tp) == DS4TP_TRANSPORT_TCP && failovers(tp) == 1, tp,
                 "transport %d, failovers %llu", ds4tp_transport_active(tp),
                 (unsigned long long)failovers(tp));
    return final_barrier(tp);
  };
  Outcome o = run_pair(s, b, b);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("rdma rails: a rail that carries the row gates and is lost mid row gates leaves them to the primary") {
  // The row gates run on fv1 (DS4TP_ROW_LINK); from the rail's 7th
  // send on (attach sends 6 there: a 2 MiB sample, four pings) the
  // worker's fv1 loses what it sends, so the leader's first row gate
  // waits in vain while the worker's heartbeats put it in that gate: the
  // leader names rail 1 lost, and both ranks make the rdma transport
  // again over the primary alone, which then carries every gate.
  Provider p;
  ScopedEnv row("DS4TP_ROW_LINK", "1");
  RankSetup s = quick_bigs(rails_setup("fv1", "fv1"));
  Body b = [](ds4tp_pair *tp, Ctx &c) -> int {
    ScopedEnv f("DS4TP_VERBS_PROVIDER_FAULT", c.rank == 1 ? "cut=7@1" : nullptr);
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    if (int rc = rdma_links(tp, 1, 1)) return rc;
    Seqs q;
    if (int rc = traffic(tp, q)) return rc;
    CHILD_EXPECT(ds4tp_transport_active(tp) == DS4TP_TRANSPORT_RDMA && failovers(tp) == 1, tp,
                 "transport %d, failovers %llu, log: %s", ds4tp_transport_active(tp),
                 (unsigned long long)failovers(tp), logged(" lost at ").c_str());
    if (c.rank == 0) {
      const std::string line = logged("rdma rail 1 lost at gate (layer 0, gate 0, seq 1)");
      CHILD_EXPECT(line.find("resuming over rdma over the other links") != std::string::npos,
                   tp, "log: %s", logged(" lost at ").c_str());
    }
    ds4tp_link_info li[4];
    const int n = ds4tp_links(tp, li, 4, sizeof li[0]);
    CHILD_EXPECT(n == 3 && li[0].role == DS4TP_LINK_DATA && li[0].state == 1 && li[0].row &&
                     li[1].state == -1 && !li[1].row && li[2].role == DS4TP_LINK_STANDBY &&
                     li[2].state == 1,
                 tp, "links %d: primary state %d row %d, rail state %d row %d", n, li[0].state,
                 li[0].row, li[1].state, li[1].row);
    return final_barrier(tp);
  };
  Outcome o = run_pair(s, b, b);
  REQUIRE_RANKS_OK(o);
}
