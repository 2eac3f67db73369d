// The plan a group runs, in one line of words: how its ranks sit on hosts,
// the medium, and which all-reduce algorithm each size gets. Every rank
// derives the same text from the roster and the medium's thresholds
// (ds4tp_group_plan, `ds4tp group`). Pure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds4tp::group {

enum class Algorithm { OneShot, TwoShot, Home, Ring };

// The all-reduce algorithm for a call of `bytes`, the same on every rank:
// through the homes from home_bytes up to chunk_bytes, else around the
// ring from ring_bytes, else two-shot from two_shot_bytes (Group::reduce
// also needs at least one element per rank for those two), else one-shot.
inline Algorithm all_reduce_algorithm(uint64_t bytes, uint64_t home_bytes,
                                      uint64_t two_shot_bytes, uint64_t chunk_bytes,
                                      uint64_t ring_bytes = UINT64_MAX) {
  if (bytes >= home_bytes && bytes <= chunk_bytes) return Algorithm::Home;
  if (bytes >= ring_bytes) return Algorithm::Ring;
  return bytes >= two_shot_bytes ? Algorithm::TwoShot : Algorithm::OneShot;
}

// "one-shot", "two-shot", "home", "ring" (the flight recorder's words).
const char *algorithm_name(Algorithm a);

struct PlanFacts {
  std::vector<uint32_t> host_of;  // each rank's host index (roster order)
  int transport = 0;              // DS4TP_TRANSPORT_SHM, _TCP or _RDMA (tiered: across hosts)
  uint64_t two_shot_bytes = 0;    // all-reduce calls from this size run two-shot
  uint64_t home_bytes = UINT64_MAX;  // from this size to chunk_bytes: the shared buffer
  uint64_t ring_bytes = UINT64_MAX;  // from this size: around the ring (tcp, rdma)
  uint64_t chunk_bytes = 0;
  // Tiered (shm within each host, tcp or rdma between them): each host's leader,
  // by host; empty: flat.
  std::vector<int> leaders;
};

// "plan: 1 host x 4 ranks; shm within the host; all-reduce one-shot below
// 4 KiB, in the shared buffer from 4 KiB to 1 MiB, two-shot above 1 MiB;
// steps of at most 1 MiB"; tiered: "plan: 2 hosts x 2 ranks; shm within
// a host, tcp across hosts between leaders 0 and 2; all-reduce host-major,
// across hosts one-shot below 64 KiB, two-shot from 64 KiB; ...".
std::string describe_plan(const PlanFacts &f);

// "4 KiB", "1 MiB", "1000 bytes".
std::string size_words(uint64_t bytes);

}  // namespace ds4tp::group
