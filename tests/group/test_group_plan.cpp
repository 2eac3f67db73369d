// The plan a group reports (ds4tp_group_plan, group/plan.hpp): its words
// for each layout and set of thresholds, the roster's host numbering that
// feeds it, and the same text on every rank of a real group whose ranks
// claim different hosts (DS4TP_HOST_ID).
#include <cstdlib>
#include <functional>
#include <string>

#include <catch2/catch.hpp>

#include "ds4tp/ds4tp.h"
#include "group/plan.hpp"
#include "group/wire.hpp"
#include "support/group_util.hpp"
#include "tools/ds4tp/sum_order.hpp"

using namespace ds4tp;
using namespace ds4tp::test;

TEST_CASE("group plan: the words say the layout, the medium and each size's algorithm", "[group]") {
  group::PlanFacts f;
  f.host_of = {0, 0, 0, 0};
  f.transport = DS4TP_TRANSPORT_SHM;
  f.two_shot_bytes = 64 * 1024;
  f.home_bytes = 4 * 1024;
  f.chunk_bytes = 1 << 20;
  CHECK(group::describe_plan(f) ==
        "plan: 1 host x 4 ranks; shm within the host; all-reduce one-shot below 4 KiB, in the "
        "shared buffer from 4 KiB to 1 MiB, two-shot above 1 MiB; steps of at most 1 MiB");
  f.home_bytes = 256 * 1024;  // ranks outnumber the cores
  CHECK(group::describe_plan(f) ==
        "plan: 1 host x 4 ranks; shm within the host; all-reduce one-shot below 64 KiB, "
        "two-shot from 64 KiB, in the shared buffer from 256 KiB to 1 MiB, two-shot above 1 MiB; "
        "steps of at most 1 MiB");
  f.transport = DS4TP_TRANSPORT_TCP;
  f.home_bytes = UINT64_MAX;
  f.host_of = {0, 0, 1, 1};
  CHECK(group::describe_plan(f) ==
        "plan: 2 hosts x 2 ranks; tcp between every two ranks (flat); all-reduce one-shot below "
        "64 KiB, two-shot from 64 KiB; steps of at most 1 MiB");
  f.host_of = {0, 1, 0, 1, 1};
  f.two_shot_bytes = 0;  // DS4TP_GROUP_TWO_SHOT_BYTES=0: always two-shot
  CHECK(group::describe_plan(f) ==
        "plan: 2 hosts (2 + 3 ranks); tcp between every two ranks (flat); all-reduce two-shot; "
        "steps of at most 1 MiB");
  f.two_shot_bytes = 64 * 1024;
  f.ring_bytes = 1 << 20;  // the ring from the chunk size on
  CHECK(group::describe_plan(f) ==
        "plan: 2 hosts (2 + 3 ranks); tcp between every two ranks (flat); all-reduce one-shot "
        "below 64 KiB, two-shot from 64 KiB, ring from 1 MiB; steps of at most 1 MiB");
  f.ring_bytes = 1;
  CHECK(group::describe_plan(f) ==
        "plan: 2 hosts (2 + 3 ranks); tcp between every two ranks (flat); all-reduce ring; "
        "steps of at most 1 MiB");
  CHECK(group::size_words(1000) == "1000 bytes");
  CHECK(group::size_words(3 << 20) == "3 MiB");
}

TEST_CASE("group plan: ds4tp group reads the ring and the step size from the plan", "[group]") {
  const std::string plan =
      "plan: 3 hosts x 1 rank; tcp between every two ranks (flat); all-reduce one-shot below "
      "64 KiB, two-shot from 64 KiB, ring from 1 MiB; steps of at most 256 KiB";
  CHECK(sum_order::plan_size(plan, "ring", UINT64_MAX) == 1u << 20);
  CHECK(sum_order::plan_size(plan, "steps of at most", 0) == 256u * 1024);
  CHECK(sum_order::plan_size("plan: ...; all-reduce ring; steps of at most 1 MiB", "ring", 0) == 1);
  CHECK(sum_order::plan_size("plan: ...; two-shot above 1 MiB; during", "ring", 7) == 7);
  CHECK(sum_order::plan_size("plan: ...; ring above 1 MiB", "ring", 0) == (1u << 20) + 1);
}

TEST_CASE("group plan: the roster numbers hosts in rank order and refuses other numbers", "[group]") {
  group::Roster ro;
  ro.transport = DS4TP_TRANSPORT_TCP;
  ro.size = 4;
  ro.peers = {{"", 1, 0}, {"10.0.0.2", 2, 1}, {"", 3, 0}, {"10.0.0.3", 4, 2}};
  uint8_t b[group::kRosterBytes];
  group::encode_roster(ro, b);
  group::Roster back;
  Error err;
  REQUIRE(group::decode_roster(b, sizeof b, back, err) == DS4TP_OK);
  REQUIRE(back.peers.size() == 4);
  for (size_t i = 0; i < 4; i++) CHECK(back.peers[i].host_index == ro.peers[i].host_index);
  ro.peers[3].host_index = 5;  // skips hosts 3 and 4
  group::encode_roster(ro, b);
  CHECK(group::decode_roster(b, sizeof b, back, err) == DS4TP_EPROTO);
  INFO(err.message);
  CHECK(err.message.find("rank 3 on host 5") != std::string::npos);
}

namespace {

// Each rank's plan, checked for `want` and reduced to a digest so the run
// can compare the ranks.
GroupBody plan_body(const std::string &want, const HostOrder &order = {}) {
  return [want, order](ds4tp_group *g, int, uint64_t &digest, std::string &why) {
    char plan[512];
    size_t needed = 0;
    int rc = ds4tp_group_plan(g, plan, sizeof plan, &needed);
    if (rc != DS4TP_OK) {
      why = std::string("ds4tp_group_plan: ") + ds4tp_last_error();
      return rc;
    }
    if (needed != std::string(plan).size() || std::string(plan).find(want) == std::string::npos) {
      why = std::string("plan \"") + plan + "\" does not say \"" + want + "\"";
      return int(DS4TP_EIO);
    }
    digest = std::hash<std::string>{}(plan);
    char tiny[8];
    if (ds4tp_group_plan(g, tiny, sizeof tiny, &needed) != DS4TP_ENOMEM) {
      why = "a buffer too small for the plan was not refused";
      return int(DS4TP_EIO);
    }
    return group_checks(g, {1, 4096}, why, digest, BufferUse::Own, order);
  };
}

void check_same_everywhere(const GroupRun &run) {
  INFO(run.why);
  REQUIRE(run.rc == 0);
  for (size_t r = 1; r < run.digests.size(); r++) CHECK(run.digests[r] == run.digests[0]);
}

}  // namespace

TEST_CASE("group plan: every rank of a real group reports the same plan", "[group]") {
  SECTION("one host: shm") {
    check_same_everywhere(run_group_procs(3, DS4TP_TRANSPORT_AUTO,
                                          plan_body("plan: 1 host x 3 ranks; shm within the host")));
  }
  SECTION("ranks that claim two hosts, 2 + 1: tiered") {
    check_same_everywhere(run_group_procs(
        3, DS4TP_TRANSPORT_AUTO,
        plan_body("plan: 2 hosts (2 + 1 ranks); shm within a host, tcp across hosts between "
                  "leaders 0 and 1",
                  {{0, 2}, {1}}),
        [](int r, ds4tp_group_options &, ds4tp_identity &) {
          if (r == 1) setenv("DS4TP_HOST_ID", "host-b", 1);
        }));
  }
}

TEST_CASE("group plan: before connect there is none", "[group]") {
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.rank = 1;
  o.group_size = 2;
  o.rendezvous_host = "127.0.0.1";
  o.rendezvous_port = 1;  // never dialled: no connect here
  ds4tp_group *g = nullptr;
  const int made = ds4tp_group_new(&g, &o, nullptr);
  INFO(ds4tp_last_error());
  REQUIRE(made == DS4TP_OK);
  char plan[64];
  CHECK(ds4tp_group_plan(g, plan, sizeof plan, nullptr) == DS4TP_ESTATE);
  int host = -1;
  CHECK(ds4tp_group_topology(g, 0, &host, nullptr, nullptr) == DS4TP_ESTATE);
  CHECK(ds4tp_group_plan(g, nullptr, 4, nullptr) != DS4TP_OK);
  CHECK(ds4tp_group_plan(nullptr, plan, sizeof plan, nullptr) == DS4TP_EINVAL);
  ds4tp_group_free(g);
}
