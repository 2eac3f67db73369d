#include "group/layout.hpp"

#include <algorithm>
#include <cstdlib>

namespace ds4tp::group {

std::vector<int> Layout::leaders() const {
  std::vector<int> out;
  for (const auto &rs : ranks_of) out.push_back(rs[0]);
  return out;
}

size_t Layout::most_on_a_host() const {
  size_t most = 0;
  for (const auto &rs : ranks_of) most = std::max(most, rs.size());
  return most;
}

Layout layout_of(const std::vector<RosterPeer> &peers, int rank) {
  Layout l;
  for (const auto &p : peers) {
    l.host_of.push_back(p.host_index);
    if (p.host_index >= l.ranks_of.size()) l.ranks_of.resize(p.host_index + 1);
  }
  for (int r = 0; r < int(peers.size()); r++) l.ranks_of[peers[size_t(r)].host_index].push_back(r);
  for (auto &rs : l.ranks_of)
    std::stable_sort(rs.begin(), rs.end(), [&](int a, int b) {
      return peers[size_t(a)].local_rank < peers[size_t(b)].local_rank;  // kNoLocalRank last
    });
  if (rank >= 0 && rank < int(peers.size())) {
    l.host = int(l.host_of[size_t(rank)]);
    const auto &rs = l.mine();
    l.local = int(std::find(rs.begin(), rs.end(), rank) - rs.begin());
  }
  return l;
}

bool tiers_help(const std::vector<uint32_t> &host_of) {
  std::vector<int> per;
  for (uint32_t h : host_of) {
    if (h >= per.size()) per.resize(h + 1, 0);
    per[h]++;
  }
  return per.size() >= 2 && std::any_of(per.begin(), per.end(), [](int n) { return n >= 2; });
}

uint32_t local_rank_from_env() {
  for (const char *name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    const char *v = std::getenv(name);
    if (v == nullptr || *v == 0) continue;
    char *end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end == 0 && n >= 0 && n < long(kNoLocalRank)) return uint32_t(n);
  }
  return kNoLocalRank;
}

}  // namespace ds4tp::group
