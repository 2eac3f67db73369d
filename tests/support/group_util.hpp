// Shared by the group tests: deterministic inputs, the reference sum in
// rank order, and a forked N-process runner.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "ds4tp/ds4tp.h"

namespace ds4tp::test {

// Rank r's element i for `dtype`, as raw bits (f32: 4 bytes, else 2).
void group_fill(int dtype, int rank, uint64_t count, uint64_t salt, void *out);
// The expected all-reduce result: sum over ranks 0..n-1 in f32, rounded.
void group_reference(int dtype, int n, uint64_t count, uint64_t salt, void *out);
// A tiered group's order: each host's ranks (local order), by host.
using HostOrder = std::vector<std::vector<int>>;
// Host-major: each host of several ranks sums them in f32 and rounds to
// the element type; the hosts' values are then summed in host order in
// f32 and rounded once (group/tiered.cpp).
void group_reference_hosts(int dtype, const HostOrder &hosts, uint64_t count, uint64_t salt,
                           void *out);
// The ring's all-reduce (group/ring.cpp) among the hosts of `hosts` (one
// rank each: a flat mesh; several: a tiered group's leaders), its calls
// cut in steps of `chunk_bytes` (a tiered group's: in each of its chunks):
// each step's segment s summed along the ring from member s, rounded to
// the element type at each hop.
void group_reference_ring(int dtype, const HostOrder &hosts, uint64_t count, uint64_t chunk_bytes,
                          uint64_t salt, void *out);
size_t group_esize(int dtype);

// The checks a rank runs after connecting: all_reduce for every dtype and
// each count, all_gather, broadcast, barrier. 0 or the failing status;
// `why` says which check failed. `digest` folds every result.
// Where all_reduce finds its vector: the caller's own memory, the group
// buffer (ds4tp_group_buffer; counts larger than it use own memory), the
// group buffer on even ranks only, or 64 bytes into the group buffer.
enum class BufferUse { Own, Group, EvenRanks, GroupOffset };
// `order`: a tiered group's (host-major reference); empty: rank order.
int group_checks(ds4tp_group *g, const std::vector<uint64_t> &counts, std::string &why,
                 uint64_t &digest, BufferUse use = BufferUse::Own, const HostOrder &order = {});

struct GroupRun {
  int rc = 0;          // first failing rank's status
  std::string why;     // its rank and message
  std::vector<int> rcs;
  std::vector<uint64_t> digests;
  std::vector<std::string> msgs;
};

// group_checks on one thread per handle of a local group (all handles of
// one ds4tp_group_new_local); each rank's outcome as run_group_procs
// gives it.
GroupRun run_group_threads(const std::vector<ds4tp_group *> &gs,
                           const std::vector<uint64_t> &counts, BufferUse use = BufferUse::Own);

// Forks n rank processes over loopback (rank 0 picks the port);
// body(g, rank, digest, why) runs after connect. `opt_edit` adjusts each
// rank's options (may be empty) before ds4tp_group_new.
using GroupBody = std::function<int(ds4tp_group *, int, uint64_t &, std::string &)>;
using GroupEdit = std::function<void(int rank, ds4tp_group_options &, ds4tp_identity &)>;
GroupRun run_group_procs(int n, int transport, const GroupBody &body, const GroupEdit &edit = {},
                         int timeout_ms = 60000);

// Every collective around each threshold (chunk 64 KiB) against
// `order`'s reference (one host: rank order), broadcast from every root,
// the topology, the step histograms, and the plan, which must contain
// `want_plan`.
GroupBody collectives_body(const HostOrder &order, const std::string &want_plan);
// 0 when the group's plan line contains `want`, else EIO with `why`.
int check_plan(ds4tp_group *g, const std::string &want, std::string &why);
// Ranks on the hosts `host_of` names ("host-0", ...; DS4TP_HOST_ID),
// with LOCAL_RANK `local[r]` where given.
GroupEdit on_hosts(const std::vector<int> &host_of, const std::vector<int> &local = {});

// Every rank passed, with the same bits.
inline void check_run(const GroupRun &run) {
  INFO(run.why);
  REQUIRE(run.rc == 0);
  for (size_t r = 1; r < run.digests.size(); r++) CHECK(run.digests[r] == run.digests[0]);
}

}  // namespace ds4tp::test
