// Tiered groups (group/layout.hpp, group/tiered.cpp): ranks that span
// hosts and share some run shm within a host and tcp between the hosts'
// leaders. Hosts are claimed with DS4TP_TEST_HOST_ID (every rank here runs
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
#include "group_util.hpp"

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

namespace {

// Every collective, around each threshold (chunk 64 KiB; two-shot
// across hosts from 64 KiB), against `order`'s reference; broadcast from
// every root; and the plan, which must contain `want`.
GroupBody tiered_body(const HostOrder &order, const std::string &want) {
  return [order, want](ds4tp_group *g, int me, uint64_t &digest, std::string &why) {
    char plan[512];
    if (ds4tp_group_plan(g, plan, sizeof plan, nullptr) != DS4TP_OK ||
        std::string(plan).find(want) == std::string::npos) {
      why = std::string("plan \"") + plan + "\" does not say \"" + want + "\"";
      return int(DS4TP_EIO);
    }
    // ds4tp_group_topology tells every rank's host and place, and whether
    // the group runs tiered (more than one host in `order`).
    for (size_t h = 0; h < order.size(); h++)
      for (size_t l = 0; l < order[h].size(); l++) {
        int host = -1, local = -1, tiered = -1;
        const int r = order[h][l];
        if (ds4tp_group_topology(g, r, &host, &local, &tiered) != DS4TP_OK ||
            (order.size() > 1 && (host != int(h) || local != int(l))) ||
            tiered != (order.size() > 1 ? 1 : 0)) {
          why = "topology of rank " + std::to_string(r) + ": host " + std::to_string(host) +
                " place " + std::to_string(local) + " tiered " + std::to_string(tiered) +
                ", expected host " + std::to_string(h) + " place " + std::to_string(l) + ": " +
                ds4tp_group_errmsg(g);
          return int(DS4TP_EIO);
        }
      }
    if (ds4tp_group_topology(g, ds4tp_group_size(g), nullptr, nullptr, nullptr) != DS4TP_EINVAL) {
      why = "topology of a rank outside the group was not refused";
      return int(DS4TP_EIO);
    }
    const std::vector<uint64_t> counts = {1, 5, 4096, 16383, 16384, 16389, 40001};
    if (int rc = group_checks(g, counts, why, digest, BufferUse::Own, order)) return rc;
    uint64_t d2 = 0;
    if (int rc = group_checks(g, {16384, 3000}, why, d2, BufferUse::Group, order)) return rc;
    // The step histograms: a tiered rank's collectives timed in the host's
    // steps (a host of several ranks) and, on a leader, across hosts.
    ds4tp_stats st;
    st.size = sizeof st;
    if (ds4tp_group_stats_read(g, &st) != DS4TP_OK) {
      why = std::string("stats: ") + ds4tp_group_errmsg(g);
      return int(DS4TP_EIO);
    }
    int host = 0, local = 0, tiered = 0;
    ds4tp_group_topology(g, me, &host, &local, &tiered);
    const bool shares = tiered && order[size_t(host)].size() > 1;
    const bool leads = tiered && local == 0;
    if ((st.group_host_step.count > 0) != shares || (st.group_across_step.count > 0) != leads) {
      why = "step histograms: host " + std::to_string(st.group_host_step.count) + ", across " +
            std::to_string(st.group_across_step.count) + " calls on rank " + std::to_string(me);
      return int(DS4TP_EIO);
    }
    const int n = ds4tp_group_size(g);
    for (int root = 0; root < n; root++) {
      std::vector<uint8_t> b(70001, 0);
      if (me == root)
        for (size_t i = 0; i < b.size(); i++) b[i] = uint8_t(root * 13 + i);
      if (int rc = ds4tp_group_broadcast(g, b.data(), b.size(), root)) {
        why = "broadcast from " + std::to_string(root) + ": " + ds4tp_group_errmsg(g);
        return rc;
      }
      for (size_t i = 0; i < b.size(); i++)
        if (b[i] != uint8_t(root * 13 + i)) {
          why = "broadcast from " + std::to_string(root) + ": byte " + std::to_string(i);
          return int(DS4TP_EIO);
        }
    }
    return 0;
  };
}

// Ranks on the hosts `host_of` names ("host-0", "host-1", ...).
GroupEdit on_hosts(const std::vector<int> &host_of, const std::vector<int> &local = {}) {
  return [host_of, local](int r, ds4tp_group_options &, ds4tp_identity &) {
    setenv("DS4TP_TEST_HOST_ID", ("host-" + std::to_string(host_of[size_t(r)])).c_str(), 1);
    if (!local.empty()) setenv("LOCAL_RANK", std::to_string(local[size_t(r)]).c_str(), 1);
  };
}

void check_run(const GroupRun &run) {
  INFO(run.why);
  REQUIRE(run.rc == 0);
  for (size_t r = 1; r < run.digests.size(); r++) CHECK(run.digests[r] == run.digests[0]);
}

}  // namespace

TEST_CASE("group tiers: every collective over ranks on two hosts", "[group][tiers]") {
  SECTION("2 hosts x 2 ranks") {
    check_run(run_group_procs(4, DS4TP_TRANSPORT_AUTO,
                              tiered_body({{0, 1}, {2, 3}},
                                          "plan: 2 hosts x 2 ranks; shm within a host, tcp "
                                          "across hosts between leaders 0 and 2"),
                              on_hosts({0, 0, 1, 1})));
  }
  SECTION("2 + 3 ranks, interleaved") {
    check_run(run_group_procs(5, DS4TP_TRANSPORT_AUTO,
                              tiered_body({{0, 3}, {1, 2, 4}},
                                          "plan: 2 hosts (2 + 3 ranks); shm within a host, tcp "
                                          "across hosts between leaders 0 and 1"),
                              on_hosts({0, 1, 1, 0, 1})));
  }
  SECTION("a host of one rank beside a host of two") {
    check_run(run_group_procs(3, DS4TP_TRANSPORT_AUTO,
                              tiered_body({{0}, {1, 2}}, "between leaders 0 and 1"),
                              on_hosts({0, 1, 1})));
  }
  SECTION("LOCAL_RANK makes rank 1 its host's leader") {
    check_run(run_group_procs(4, DS4TP_TRANSPORT_AUTO,
                              tiered_body({{1, 0}, {2, 3}}, "between leaders 1 and 2"),
                              on_hosts({0, 0, 1, 1}, {1, 0, 0, 1})));
  }
}

TEST_CASE("group tiers: flat where asked for or where no host has two ranks", "[group][tiers]") {
  SECTION("4 hosts x 1 rank: the tcp mesh, rank order") {
    check_run(run_group_procs(4, DS4TP_TRANSPORT_AUTO,
                              tiered_body({{0, 1, 2, 3}}, "plan: 4 hosts x 1 rank; tcp between "
                                                          "every two ranks (flat)"),
                              on_hosts({0, 1, 2, 3})));
  }
  SECTION("transport tcp keeps 2 x 2 flat") {
    check_run(run_group_procs(4, DS4TP_TRANSPORT_TCP,
                              tiered_body({{0, 1, 2, 3}}, "tcp between every two ranks (flat)"),
                              on_hosts({0, 0, 1, 1})));
  }
  SECTION("DS4TP_GROUP_FLAT=1 at rank 0 keeps 2 x 2 flat") {
    auto edit = on_hosts({0, 0, 1, 1});
    check_run(run_group_procs(
        4, DS4TP_TRANSPORT_AUTO,
        tiered_body({{0, 1, 2, 3}}, "tcp between every two ranks (flat)"),
        [edit](int r, ds4tp_group_options &o, ds4tp_identity &id) {
          edit(r, o, id);
          if (r == 0) setenv("DS4TP_GROUP_FLAT", "1", 1);
        }));
  }
}
