// Failover (multipath/failover.hpp): a pair over rdma (the test verbs
// provider), shm or tcp rails (loopback) keeps a standby tcp link; when
// the primary fails mid row, batch or big gate, on one rank or both, or a
// message is lost so that one rank is a gate ahead, the pair goes on over
// tcp, every payload bit for bit, and says so (ds4tp_transport_active,
// stats, a log line). A peer that exits or stops still fails the pair
// with a named error, and a pair without a standby (one rank turns it
// off, or it cannot be opened) says why at bring-up and fails as before.
// The timing, the random fault matrix and the failovers that must not
// happen are in test_failover_matrix.cpp. Every ctest name starts with
// "failover".
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include "support/failover_util.hpp"

using namespace ds4tp::test;

TEST_CASE("failover: an error completion mid row gates moves the pair to tcp, bit for bit") {
  Provider p;
  RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
  // The worker's 20th send completes with IBV_WC_RETRY_EXC_ERR.
  Body b = survives(DS4TP_TRANSPORT_RDMA, "rdma link lost at gate (");
  Outcome o = run_pair(s, b, with_fault("wc=12@20", 1, b));
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("failover: the link lost on both ranks at once") {
  Provider p;
  RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
  Body b = with_fault("wc=12@20", -1, survives(DS4TP_TRANSPORT_RDMA, "rdma link lost at gate ("));
  Outcome o = run_pair(s, b, b);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("failover: a link that dies silently both ways, in the same gate, fails over") {
  Provider p;
  RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
  // From their 30th send on, both ranks' messages are lost with good
  // completions (UC's way of losing a link): neither rank sees an error,
  // each waits for the other's data; their heartbeats say both entered
  // the gate, so each wait ends at the gate deadline and both fail over.
  Body b = with_fault("cut=30", -1, survives(DS4TP_TRANSPORT_RDMA, "timed out: nothing completed"));
  Outcome o = run_pair(s, b, b);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("failover: an error completion mid batch gates") {
  Provider p;
  RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
  Body b = survives(DS4TP_TRANSPORT_RDMA, "rdma link lost at batch gate (");
  // The leader's 60th send falls in the fourth batch gate (the log line
  // the body checks says so, should the count of set-up sends change).
  Outcome o = run_pair(s, with_fault("wc=12@60", 0, b), b);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("failover: an error completion mid a big gate runs the whole gate again") {
  Provider p;
  RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
  Body b = survives(DS4TP_TRANSPORT_RDMA, "rdma link lost at big gate (");
  // The worker's 112th send is the third message of the first big gate.
  Outcome o = run_pair(s, b, with_fault("wc=12@112", 1, b));
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("failover: a lost message leaves one rank a gate ahead, which sends that gate again") {
  Provider p;
  RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
  // The worker's 20th message is lost with a good completion: the worker
  // completes that gate and goes on, the leader never gets its partial.
  Body lead = survives(DS4TP_TRANSPORT_RDMA, "which the peer completed");
  Body work = with_fault("drop=20", 1, survives(DS4TP_TRANSPORT_RDMA, "which the peer never received"));
  Outcome o = run_pair(s, lead, work);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("failover: the primary lost during a control frame, and the session goes on over tcp") {
  Provider p;
  RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
  // The worker gives the primary up at its 11th gate: the first after a
  // control exchange, which the leader reaches already inside it.
  auto body = [](ds4tp_pair *tp, Ctx &c) -> int {
    ScopedEnv drop("DS4TP_FAILOVER_DRILL", c.rank == 1 ? "11" : nullptr);
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    Seqs q;
    if (int rc = rows(tp, 10, q)) return rc;
    uint64_t mine = 0x1234567800ull + uint64_t(c.rank), theirs = 0;
    CHILD_EXPECT_OK(ds4tp_small_exchange(tp, &mine, &theirs, sizeof mine), tp);
    CHILD_EXPECT(theirs == 0x1234567800ull + uint64_t(1 - c.rank), tp);
    if (int rc = traffic(tp, q)) return rc;
    CHILD_EXPECT_OK(ds4tp_small_exchange(tp, &mine, &theirs, sizeof mine), tp);
    CHILD_EXPECT(ds4tp_transport_active(tp) == DS4TP_TRANSPORT_TCP, tp);
    CHILD_EXPECT(failovers(tp) == 1, tp);
    return final_barrier(tp);
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
  CHECK(logged("rdma link lost at gate (layer 1, gate 0, seq 11)") != "");
}

TEST_CASE("failover: a shm pair moves to tcp when its primary is given up") {
  RankSetup s = failover_setup(DS4TP_TRANSPORT_SHM);
  Body b = survives(DS4TP_TRANSPORT_SHM, "shm link lost at batch gate (");
  Body w = [b](ds4tp_pair *tp, Ctx &c) -> int {
    ScopedEnv drop("DS4TP_FAILOVER_DRILL", "43");  // the third batch gate
    return b(tp, c);
  };
  Outcome o = run_pair(s, b, w);
  REQUIRE_RANKS_OK(o);
}

// A tcp pair with rails on loopback (`rails`: 127.0.0.2, ...), its row
// gates on rail 1 (a test option), whose worker gives its links up at
// gate `at` (DS4TP_FAILOVER_DRILL): it shuts the data connection
// and the row rail down, the leader's wait on them ends, and both go on
// over the standby. `b` runs on both ranks.
// A tcp pair over loopback with these rails, its ranks capturing their log.
RankSetup loopback_rails(const char *rails) {
  RankSetup s = failover_setup(DS4TP_TRANSPORT_TCP);
  s.leader_tweak = s.worker_tweak = [rails](ds4tp_options &o) {
    o.log_fn = capture;
    o.rails = rails;
  };
  return s;
}

void rails_given_up_at(const char *rails, const char *at, Body b) {
  RankSetup s = loopback_rails(rails);
  Body l = [b](ds4tp_pair *tp, Ctx &c) -> int {
    ScopedEnv row("DS4TP_ROW_LINK", "1");
    return b(tp, c);
  };
  Body w = [b, at](ds4tp_pair *tp, Ctx &c) -> int {
    ScopedEnv drop("DS4TP_FAILOVER_DRILL", at);
    return b(tp, c);
  };
  Outcome o = run_pair(s, l, w);
  REQUIRE_RANKS_OK(o);
}

void rails_given_up_at(const char *at, const char *said) {
  rails_given_up_at("127.0.0.2", at, survives(DS4TP_TRANSPORT_TCP, said, /*rails=*/true));
}

TEST_CASE("failover: a tcp pair's rails given up mid row gates on the rail go on over the standby") {
  rails_given_up_at("20", "tcp rails lost at gate (layer 1, gate 1, seq 20)");
}

TEST_CASE("failover: a tcp pair's rails given up mid a striped big gate go on over the standby") {
  // Gate 50: the second 4 MiB big gate (40 rows and 8 batch gates before it).
  rails_given_up_at("50", "tcp rails lost at big gate (layer 3, seq 2, 4194304 bytes)");
}

// Two rails, the row gates on rail 1, given up by the worker at gate
// `at`: rail 2 stays beside the standby, so the later big gates still
// split over two links. With a striped big gate in flight the leader may
// have written part of its share on rail 2, which the worker reads out
// (the rail counts) before the gate runs again.
void two_rails_given_up_at(const char *at) {
  Body b = [](ds4tp_pair *tp, Ctx &) -> int {
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    ds4tp_link_info li[5];
    CHILD_EXPECT(ds4tp_links(tp, li, 5, sizeof li[0]) == 4 && li[1].row == 1 &&
                     li[3].role == DS4TP_LINK_STANDBY && li[3].state == 0,
                 tp);
    Seqs q;
    if (int rc = traffic(tp, q)) return rc;
    CHILD_EXPECT(failovers(tp) == 1, tp, "failovers %llu", (unsigned long long)failovers(tp));
    CHILD_EXPECT(ds4tp_links(tp, li, 5, sizeof li[0]) == 4, tp);
    // The data connection and the row rail are lost; rail 2 carries a
    // share beside the standby.
    CHILD_EXPECT(li[0].state == -1 && li[1].state == -1 && li[3].state == 1, tp);
    CHILD_EXPECT(li[2].state == 1 && li[2].share > 0 && li[3].share > 0 &&
                     li[2].share + li[3].share == 1000 && li[2].row == 0 && li[3].row == 1,
                 tp, "rail 2: state %d share %u row %d; standby: share %u row %d", li[2].state,
                 li[2].share, li[2].row, li[3].share, li[3].row);
    const std::string line = logged("kept beside the standby link");
    CHILD_EXPECT(line.find("rails: link 2 (") != std::string::npos, tp, "log: %s",
                 logged("rails: ").c_str());
    return final_barrier(tp);
  };
  rails_given_up_at("127.0.0.2,127.0.0.3", at, b);
}

TEST_CASE("failover: a row rail given up mid row gates leaves the other rail striping beside the standby") {
  two_rails_given_up_at("20");
}

TEST_CASE("failover: two rails given up mid a striped big gate leave the other rail striping beside the standby") {
  two_rails_given_up_at("50");
}

TEST_CASE("failover: the data connection lost mid a striped big gate leaves both rails striping beside the standby") {
  // Two rails on loopback, the row gates on the data connection; the
  // worker shuts the data connection down once it sent 256 KiB of its
  // share of the first striped big gate (a test hook), while
  // both ranks' rails are part-way through theirs. The ranks trade what
  // each wrote on the rails, read out the rest, and run the gate again
  // over the standby and both rails; every later gate too, bit for bit.
  RankSetup s = loopback_rails("127.0.0.2,127.0.0.3");
  ScopedEnv row("DS4TP_ROW_LINK", "0");
  Body b = [](ds4tp_pair *tp, Ctx &c) -> int {
    ScopedHooks hooks;
    if (c.rank == 1) hooks->cut_striped_after = 262144;
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    Seqs q;
    if (int rc = rows(tp, kRows, q)) return rc;
    if (int rc = batches(tp, kBatches, q)) return rc;
    timespec a{}, z{};
    clock_gettime(CLOCK_MONOTONIC, &a);
    if (int rc = bigs(tp, 1, q)) return rc;  // the gate that loses the data connection
    clock_gettime(CLOCK_MONOTONIC, &z);
    if (int rc = bigs(tp, 3, q)) return rc;
    if (int rc = rows(tp, kTailRows, q)) return rc;
    CHILD_EXPECT(ds4tp_transport_active(tp) == DS4TP_TRANSPORT_TCP && failovers(tp) == 1, tp,
                 "failovers %llu", (unsigned long long)failovers(tp));
    const std::string lost = logged("tcp rails lost at big gate (layer 3, seq 1,");
    CHILD_EXPECT(!lost.empty(), tp, "log: %s", logged(" lost at ").c_str());
    const std::string kept = logged("kept beside the standby link");
    CHILD_EXPECT(kept.find("rails: links 1 (") != std::string::npos &&
                     kept.find(", 2 (") != std::string::npos,
                 tp, "log: %s | %s", kept.c_str(), logged("not kept").c_str());
    ds4tp_link_info li[5];
    CHILD_EXPECT(ds4tp_links(tp, li, 5, sizeof li[0]) == 4 && li[0].state == -1 &&
                     li[1].state == 1 && li[1].share > 0 && li[2].state == 1 &&
                     li[2].share > 0 && li[3].state == 1 && li[3].row == 1 &&
                     li[1].share + li[2].share + li[3].share == 1000,
                 tp, "links: %d/%u %d/%u %d/%u", li[1].state, li[1].share, li[2].state,
                 li[2].share, li[3].state, li[3].share);
    if (c.rank == 0) {
      std::printf("rails-sync-summary: a 4 MiB striped big gate whose data connection was cut "
                  "took %.1f ms on the leader, resumed over the standby and both rails\n",
                  double(z.tv_sec - a.tv_sec) * 1e3 + double(z.tv_nsec - a.tv_nsec) / 1e6);
      std::fflush(stdout);
    }
    return final_barrier(tp);
  };
  Outcome o = run_pair(s, b, b);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("failover: a peer that exits still fails the pair at once, naming both links") {
  Provider p;
  RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
  auto lead = [](ds4tp_pair *tp, Ctx &) -> int {
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    Seqs q;
    const Clock::time_point t0 = Clock::now();
    CHILD_EXPECT(rows_until_failure(tp, kRows, q) != DS4TP_OK, tp);
    CHILD_EXPECT(ms_since(t0) < 5000, tp, "took %.0f ms", ms_since(t0));
    const char *m = ds4tp_errmsg(tp);
    // The standby link's end or the control connection's, whichever shows first.
    CHILD_EXPECT(ds4tp_failed(tp) &&
                     (std::strstr(m, "failover to the standby tcp link failed: the peer closed the") ||
                      std::strstr(m, "the worker closed the control connection")),
                 tp);
    CHILD_EXPECT(ds4tp_transport_active(tp) == DS4TP_TRANSPORT_RDMA, tp);
    return 0;
  };
  auto work = [](ds4tp_pair *tp, Ctx &) -> int {
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    Seqs q;
    if (int rc = rows(tp, 12, q)) return rc;
    _exit(0);
  };
  Outcome o = run_pair(s, lead, work);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("failover: a stopped peer still fails the pair within peer_silence_ms") {
  Provider p;
  RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
  s.leader_tweak = [](ds4tp_options &o) {
    o.log_fn = capture;
    o.peer_silence_ms = 500;
  };
  auto lead = [](ds4tp_pair *tp, Ctx &c) -> int {
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    Seqs q;
    const Clock::time_point t0 = Clock::now();
    const int failed = rows_until_failure(tp, kRows, q);
    const double ms = ms_since(t0);
    kill(c.worker_pid, SIGKILL);
    CHILD_EXPECT(failed != DS4TP_OK, tp);
    CHILD_EXPECT(ms < 500 + 3000, tp, "took %.0f ms", ms);
    const char *m = ds4tp_errmsg(tp);
    CHILD_EXPECT(std::strstr(m, "silent") && !std::strstr(m, "failover"), tp);
    return 0;
  };
  auto work = [](ds4tp_pair *tp, Ctx &) -> int {
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    Seqs q;
    if (int rc = rows(tp, 12, q)) return rc;
    raise(SIGSTOP);
    return 0;
  };
  Outcome o = run_pair(s, lead, work);
  INFO(o.describe());
  CHECK(o.leader == 0);
  CHECK(o.worker_signal == SIGKILL);
}

// Without a standby the fault fails the pair as it always did: `said` is
// in the leader's bring-up log.
void fails_as_before(RankSetup &s, const char *said) {
  auto body = [](ds4tp_pair *tp, Ctx &c) -> int {
    ScopedEnv f("DS4TP_VERBS_PROVIDER_FAULT", c.rank == 1 ? "wc=12@20" : nullptr);
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    Seqs q;
    CHILD_EXPECT(rows_until_failure(tp, kRows, q) != DS4TP_OK, tp);
    CHILD_EXPECT(ds4tp_failed(tp), tp);
    CHILD_EXPECT(std::strstr(ds4tp_errmsg(tp), "failover") == nullptr, tp);
    CHILD_EXPECT(failovers(tp) == 0, tp);
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
  INFO(said);
  INFO(logged("no failover"));
  CHECK(logged(said) != "");
}

TEST_CASE("failover: off on one rank, no standby link, and the log says why") {
  Provider p;
  RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
  s.worker_tweak = [](ds4tp_options &o) { o.failover = 0; };
  fails_as_before(s, "no failover: the peer does not offer a standby link");
}

TEST_CASE("failover: a standby link that cannot be opened, and both ranks say why at bring-up") {
  Provider p;
  ScopedHooks hooks;
  hooks->standby_host = "127.0.0.254";  // where nothing listens
  RankSetup s = failover_setup(DS4TP_TRANSPORT_RDMA);
  fails_as_before(s, "no failover: the standby tcp link could not be opened: the worker "
                     "could not reach the standby listener: could not connect to 127.0.0.254:");
}
