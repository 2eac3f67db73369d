// Where each rank of a group sits: its host, its place among the host's
// ranks (local order, the host's leader first) and each host's leader.
// Every rank derives the same layout from the roster (pure).
//
// A tiered group (Tiers::Hosts) runs each collective in three steps: the
// ranks of a host over shm to their leader, the leaders over tcp, the
// leader back to its ranks (group/tiered.cpp). Its all-reduce sums
// host-major: each host's ranks in local order, then the hosts' sums in
// host order.
#pragma once

#include <cstdint>
#include <vector>

#include "group/wire.hpp"

namespace ds4tp::group {

struct Layout {
  std::vector<uint32_t> host_of;           // rank -> host index
  std::vector<std::vector<int>> ranks_of;  // host -> its ranks in local order
  int host = 0;   // this rank's host
  int local = 0;  // this rank's place on it (0: the leader)

  int hosts() const { return int(ranks_of.size()); }
  bool leader() const { return local == 0; }
  int leader_of(int h) const { return ranks_of[size_t(h)][0]; }
  const std::vector<int> &mine() const { return ranks_of[size_t(host)]; }
  std::vector<int> leaders() const;  // by host
  size_t most_on_a_host() const;
};

// Local order: ranks with a local rank from the launcher by that number,
// then the others; ties by rank.
Layout layout_of(const std::vector<RosterPeer> &peers, int rank);

// Tiers pay off where ranks span hosts and some share one.
bool tiers_help(const std::vector<uint32_t> &host_of);

// LOCAL_RANK, else OMPI_COMM_WORLD_LOCAL_RANK, else SLURM_LOCALID (a
// number from 0); kNoLocalRank when none is set.
uint32_t local_rank_from_env();

}  // namespace ds4tp::group
