// The shm all-reduce through the ranks' homes (shm.cpp reduce_home): the
// group buffer lies in the shared area, and a vector in it is reduced in
// place with no copy in. Checked for every dtype and for counts that
// leave segments short or empty, with the group buffer on every rank,
// on some ranks only (the others are copied in and out), at an offset
// into it (moved to its start and back) and on none.
// DS4TP_GROUP_HOME_BYTES=0 takes the home path for every size up to the
// chunk, so small counts and oversubscribed N reach it on any machine.
#include <signal.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "support/group_util.hpp"
#include "support/procs.hpp"

using namespace ds4tp::test;

namespace {

// Around the 64-byte segment granule for 2..8 ranks, around 4 KiB, the
// seed engine's 2560, and around the 64 KiB chunk of these groups (for
// f32; a count above it takes the slot algorithms).
const std::vector<uint64_t> kHomeCounts = {1,    15,   16,   17,   33,    100,   1023,  1024, 1025,
                                           2560, 4097, 8191, 8192, 16383, 16384, 16385, 32768};

const char *use_name(BufferUse u) {
  switch (u) {
    case BufferUse::Own: return "own memory";
    case BufferUse::Group: return "group buffer";
    case BufferUse::EvenRanks: return "group buffer on even ranks";
    case BufferUse::GroupOffset: return "64 bytes into the group buffer";
  }
  return "?";
}

// Runs group_checks on n threads of one local group; the digests must
// agree. `home_bytes` sets DS4TP_GROUP_HOME_BYTES (nullptr: unset).
void run_threads(int n, BufferUse use, const char *home_bytes) {
  if (home_bytes)
    setenv("DS4TP_GROUP_HOME_BYTES", home_bytes, 1);
  else
    unsetenv("DS4TP_GROUP_HOME_BYTES");
  std::vector<ds4tp_group *> gs(static_cast<size_t>(n));
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.chunk_bytes = 64 * 1024;
  o.op_timeout_ms = 5000;
  REQUIRE(ds4tp_group_new_local(gs.data(), n, &o, nullptr) == 0);
  unsetenv("DS4TP_GROUP_HOME_BYTES");  // read when the group is made
  GroupRun run = run_group_threads(gs, kHomeCounts, use);
  for (int r = 0; r < n; r++) {
    INFO("rank " << r << ": " << run.msgs[size_t(r)]);
    CHECK(run.rcs[size_t(r)] == 0);
    CHECK(run.digests[size_t(r)] == run.digests[0]);
  }
  for (auto *g : gs) ds4tp_group_free(g);
}

}  // namespace

TEST_CASE("group home: threads N=2,3,4,8 get the rank-order bits from any buffer", "[group]") {
  for (int n : {2, 3, 4, 8})
    for (BufferUse use : {BufferUse::Group, BufferUse::EvenRanks, BufferUse::GroupOffset,
                          BufferUse::Own}) {
      INFO("n=" << n << ", " << use_name(use) << ", home path forced");
      run_threads(n, use, "0");
    }
  // The default threshold (4 KiB when ranks fit the cores, else 256 KiB).
  for (int n : {2, 3}) {
    INFO("n=" << n << ", default threshold");
    run_threads(n, BufferUse::Group, nullptr);
  }
}

TEST_CASE("group home: shm processes N=2,3 reduce in the shared group buffer", "[group]") {
  for (int n : {2, 3})
    for (BufferUse use : {BufferUse::Group, BufferUse::EvenRanks, BufferUse::GroupOffset}) {
      INFO("n=" << n << ", " << use_name(use));
      GroupRun run = run_group_procs(
          n, DS4TP_TRANSPORT_SHM,
          [use](ds4tp_group *g, int, uint64_t &d, std::string &why) {
            if (ds4tp_group_transport(g) != DS4TP_TRANSPORT_SHM) {
              why = "transport is not shm";
              return int(DS4TP_EINVAL);
            }
            return group_checks(g, kHomeCounts, why, d, use);
          },
          [](int, ds4tp_group_options &, ds4tp_identity &) {
            setenv("DS4TP_GROUP_HOME_BYTES", "0", 1);  // in the rank's own process
          });
      INFO(run.why);
      REQUIRE(run.rc == 0);
      for (int r = 1; r < n; r++) CHECK(run.digests[size_t(r)] == run.digests[0]);
    }
}

// The thresholds live in the segment rank 0 makes: a rank whose
// environment says otherwise still takes rank 0's algorithms (before,
// it took its own and the steps desynced: wrong sums, then a timeout).
TEST_CASE("group home: a rank with other thresholds in its environment follows rank 0", "[group]") {
  for (const char *var : {"DS4TP_GROUP_HOME_BYTES", "DS4TP_GROUP_TWO_SHOT_BYTES"}) {
    INFO(var << "=0 on rank 1 only");
    GroupRun run = run_group_procs(
        2, DS4TP_TRANSPORT_SHM,
        [](ds4tp_group *g, int, uint64_t &d, std::string &why) {
          return group_checks(g, kHomeCounts, why, d, BufferUse::Group);
        },
        [var](int rank, ds4tp_group_options &, ds4tp_identity &) {
          if (rank == 1) setenv(var, "0", 1);
        });
    INFO(run.why);
    REQUIRE(run.rc == 0);
    CHECK(run.digests[1] == run.digests[0]);
  }
}

// Each home call ends waiting for every rank to read this rank's
// segment; a rank that dies there or before must release the others.
TEST_CASE("group home: a rank SIGKILLed mid-call releases the others", "[group][fault]") {
  const uint64_t t0 = mono_ns();
  GroupRun run = run_group_procs(
      3, DS4TP_TRANSPORT_SHM,
      [](ds4tp_group *g, int rank, uint64_t &, std::string &why) {
        void *buf = nullptr;
        uint64_t bytes = 0;
        if (ds4tp_group_buffer(g, &buf, &bytes) != 0) return int(DS4TP_EINVAL);
        for (int i = 0;; i++) {
          if (rank == 2 && i == 300) raise(SIGKILL);
          int rc = ds4tp_group_all_reduce(g, buf, 4096, DS4TP_DTYPE_F32, DS4TP_OP_SUM);
          if (rc != 0) {
            why = ds4tp_group_errmsg(g);
            return rc;
          }
        }
      },
      [](int, ds4tp_group_options &, ds4tp_identity &) {
        setenv("DS4TP_GROUP_HOME_BYTES", "0", 1);
      },
      20000);
  const double secs = double(mono_ns() - t0) / 1e9;
  for (int r = 0; r < 2; r++) {
    INFO("rank " << r << ": " << run.msgs[size_t(r)]);
    CHECK((run.rcs[size_t(r)] == DS4TP_EPEERCLOSED || run.rcs[size_t(r)] == DS4TP_EFAILED));
    CHECK(run.msgs[size_t(r)].find("rank 2") != std::string::npos);
  }
  CHECK(secs < 4.0);  // released by the death, not by the 5 s op deadline
}
