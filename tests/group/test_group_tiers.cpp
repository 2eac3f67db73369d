// Tiered groups (group/layout.hpp, group/tiered.cpp): ranks that span
// hosts and share some run shm within a host and tcp between the hosts'
// leaders. Hosts are claimed with DS4TP_HOST_ID (every rank here runs
// on this machine, so a host's ranks really share its memory). Checked:
// the layout and its words, every collective over 2 x 2, 2 + 3 and
// interleaved layouts against the host-major reference, the same bits on
// every rank, LOCAL_RANK choosing the leader, and the flat modes.
#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

#include "ds4tp/ds4tp.h"
#include "group/layout.hpp"
#include "group/plan.hpp"
#include "group/wire.hpp"
#include "support/group_util.hpp"

using namespace ds4tp;
using namespace ds4tp::test;

namespace {

std::vector<group::RosterPeer> peers_on(const std::vector<uint32_t> &host_of,
                                        const std::vector<uint32_t> &local = {}) {
  std::vector<group::RosterPeer> out;
  for (size_t r = 0; r < host_of.size(); r++)
    out.push_back({"", 0, host_of[r], 0, r < local.size() ? local[r] : group::kNoLocalRank});
  return out;
}

}  // namespace

TEST_CASE("group tiers: the layout groups ranks by host, leader first", "[group][tiers]") {
  const auto l = group::layout_of(peers_on({0, 1, 0, 1, 1}), 3);
  REQUIRE(l.hosts() == 2);
  CHECK(l.ranks_of[0] == std::vector<int>{0, 2});
  CHECK(l.ranks_of[1] == std::vector<int>{1, 3, 4});
  CHECK(l.host == 1);
  CHECK(l.local == 1);
  CHECK_FALSE(l.leader());
  CHECK(l.leaders() == std::vector<int>{0, 1});
  CHECK(l.most_on_a_host() == 3);
  // A launcher's local ranks order a host's ranks; ranks without one last.
  const auto m = group::layout_of(peers_on({0, 0, 1, 1}, {1, 0, group::kNoLocalRank, 0}), 1);
  CHECK(m.ranks_of[0] == std::vector<int>{1, 0});
  CHECK(m.ranks_of[1] == std::vector<int>{3, 2});
  CHECK(m.leader());
  CHECK(m.leaders() == std::vector<int>{1, 3});
}

TEST_CASE("group tiers: only ranks that span hosts and share one are tiered", "[group][tiers]") {
  CHECK(group::tiers_help({0, 0, 1, 1}));
  CHECK(group::tiers_help({0, 1, 1}));
  CHECK_FALSE(group::tiers_help({0, 0, 0}));     // one host: shm
  CHECK_FALSE(group::tiers_help({0, 1, 2, 3}));  // one rank a host: the tcp mesh
}

TEST_CASE("group tiers: the local rank comes from the launcher's variable", "[group][tiers]") {
  for (const char *v : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) unsetenv(v);
  CHECK(group::local_rank_from_env() == group::kNoLocalRank);
  setenv("SLURM_LOCALID", "3", 1);
  CHECK(group::local_rank_from_env() == 3);
  setenv("LOCAL_RANK", "1", 1);  // the first name wins
  CHECK(group::local_rank_from_env() == 1);
  setenv("LOCAL_RANK", "x", 1);  // not a number: the next name
  CHECK(group::local_rank_from_env() == 3);
  for (const char *v : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) unsetenv(v);
}

TEST_CASE("group tiers: the roster carries tiers, pids and local ranks", "[group][tiers]") {
  group::Roster ro;
  ro.transport = DS4TP_TRANSPORT_TCP;
  ro.tiers = group::Tiers::Hosts;
  ro.size = 3;
  ro.peers = {{"", 1, 0, 100, 0}, {"10.0.0.2", 2, 1, 200, group::kNoLocalRank},
              {"", 3, 0, 300, 1}};
  uint8_t b[group::kRosterBytes];
  group::encode_roster(ro, b);
  group::Roster back;
  Error err;
  REQUIRE(group::decode_roster(b, sizeof b, back, err) == DS4TP_OK);
  CHECK(back.tiers == group::Tiers::Hosts);
  for (size_t i = 0; i < 3; i++) {
    CHECK(back.peers[i].pid == ro.peers[i].pid);
    CHECK(back.peers[i].local_rank == ro.peers[i].local_rank);
  }
  ro.transport = DS4TP_TRANSPORT_SHM;  // tiers run tcp between hosts
  group::encode_roster(ro, b);
  CHECK(group::decode_roster(b, sizeof b, back, err) == DS4TP_EPROTO);
  CHECK(err.message.find("tiers") != std::string::npos);
}

TEST_CASE("group tiers: the plan names the leaders and the host-major sum", "[group][tiers]") {
  group::PlanFacts f;
  f.host_of = {0, 0, 1, 1};
  f.transport = DS4TP_TRANSPORT_TCP;
  f.two_shot_bytes = 64 * 1024;
  f.chunk_bytes = 1 << 20;
  f.leaders = {0, 2};
  CHECK(group::describe_plan(f) ==
        "plan: 2 hosts x 2 ranks; shm within a host, tcp across hosts between leaders 0 and 2; "
        "all-reduce host-major, across hosts one-shot below 64 KiB, two-shot from 64 KiB; steps "
        "of at most 1 MiB");
  f.host_of = {0, 1, 1, 0, 2};
  f.leaders = {0, 1, 4};
  CHECK(group::describe_plan(f).find("between leaders 0, 1 and 4") != std::string::npos);
}


TEST_CASE("group tiers: every collective over ranks on two hosts", "[group][tiers]") {
  SECTION("2 hosts x 2 ranks") {
    check_run(run_group_procs(4, DS4TP_TRANSPORT_AUTO,
                              collectives_body({{0, 1}, {2, 3}},
                                          "plan: 2 hosts x 2 ranks; shm within a host, tcp "
                                          "across hosts between leaders 0 and 2"),
                              on_hosts({0, 0, 1, 1})));
  }
  SECTION("2 + 3 ranks, interleaved") {
    check_run(run_group_procs(5, DS4TP_TRANSPORT_AUTO,
                              collectives_body({{0, 3}, {1, 2, 4}},
                                          "plan: 2 hosts (2 + 3 ranks); shm within a host, tcp "
                                          "across hosts between leaders 0 and 1"),
                              on_hosts({0, 1, 1, 0, 1})));
  }
  SECTION("a host of one rank beside a host of two") {
    check_run(run_group_procs(3, DS4TP_TRANSPORT_AUTO,
                              collectives_body({{0}, {1, 2}}, "between leaders 0 and 1"),
                              on_hosts({0, 1, 1})));
  }
  SECTION("LOCAL_RANK makes rank 1 its host's leader") {
    check_run(run_group_procs(4, DS4TP_TRANSPORT_AUTO,
                              collectives_body({{1, 0}, {2, 3}}, "between leaders 1 and 2"),
                              on_hosts({0, 0, 1, 1}, {1, 0, 0, 1})));
  }
}

TEST_CASE("group tiers: flat where asked for or where no host has two ranks", "[group][tiers]") {
  SECTION("4 hosts x 1 rank: the tcp mesh, rank order") {
    check_run(run_group_procs(4, DS4TP_TRANSPORT_AUTO,
                              collectives_body({{0, 1, 2, 3}}, "plan: 4 hosts x 1 rank; tcp between "
                                                          "every two ranks (flat)"),
                              on_hosts({0, 1, 2, 3})));
  }
  SECTION("transport tcp keeps 2 x 2 flat") {
    check_run(run_group_procs(4, DS4TP_TRANSPORT_TCP,
                              collectives_body({{0, 1, 2, 3}}, "tcp between every two ranks (flat)"),
                              on_hosts({0, 0, 1, 1})));
  }
  SECTION("DS4TP_GROUP_FLAT=1 at rank 0 keeps 2 x 2 flat") {
    auto edit = on_hosts({0, 0, 1, 1});
    check_run(run_group_procs(
        4, DS4TP_TRANSPORT_AUTO,
        collectives_body({{0, 1, 2, 3}}, "tcp between every two ranks (flat)"),
        [edit](int r, ds4tp_group_options &o, ds4tp_identity &id) {
          edit(r, o, id);
          if (r == 0) setenv("DS4TP_GROUP_FLAT", "1", 1);
        }));
  }
}
