#include "group/plan.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "ds4tp/ds4tp.h"

namespace ds4tp::group {

std::string size_words(uint64_t bytes) {
  if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0) return fmt::format("{} GiB", bytes >> 30);
  if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= (1ull << 10) && bytes % (1ull << 10) == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} bytes", bytes);
}

namespace {

// The hosts and their ranks: "1 host x 4 ranks", "2 hosts x 2 ranks",
// "2 hosts (2 + 3 ranks)".
std::string layout_words(const std::vector<uint32_t> &host_of) {
  std::vector<int> per;
  for (uint32_t h : host_of) {
    if (h >= per.size()) per.resize(h + 1, 0);
    per[h]++;
  }
  const size_t hosts = per.size();
  const bool even = std::all_of(per.begin(), per.end(), [&](int n) { return n == per[0]; });
  std::string out = fmt::format("{} host{}", hosts, hosts == 1 ? "" : "s");
  if (even) return out + fmt::format(" x {} rank{}", per[0], per[0] == 1 ? "" : "s");
  std::string counts;
  for (int n : per) counts += (counts.empty() ? "" : " + ") + std::to_string(n);
  return out + " (" + counts + " ranks)";
}

const char *algorithm_words(Algorithm a) {
  return a == Algorithm::Home ? "in the shared buffer" : algorithm_name(a);
}

}  // namespace

const char *algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::Home: return "home";
    case Algorithm::TwoShot: return "two-shot";
    case Algorithm::Ring: return "ring";
    case Algorithm::OneShot: break;
  }
  return "one-shot";
}

std::string describe_plan(const PlanFacts &f) {
  std::string out = "plan: " + layout_words(f.host_of) + "; ";
  if (!f.leaders.empty()) {
    std::string who;
    for (size_t i = 0; i < f.leaders.size(); i++)
      who += (i == 0 ? "" : i + 1 == f.leaders.size() ? " and " : ", ") +
             std::to_string(f.leaders[i]);
    out += fmt::format("shm within a host, {} across hosts between leaders {}",
                       f.transport == DS4TP_TRANSPORT_RDMA ? "rdma" : "tcp", who);
  } else if (f.transport == DS4TP_TRANSPORT_SHM) {
    out += "shm within the host";
  } else {
    out += fmt::format("{} between every two ranks (flat)",
                       f.transport == DS4TP_TRANSPORT_RDMA ? "rdma" : "tcp");
  }
  // Where the algorithm can change: each threshold, and past the chunk.
  std::vector<uint64_t> edges = {1, f.two_shot_bytes};
  if (f.home_bytes != UINT64_MAX) edges.push_back(f.home_bytes);
  if (f.ring_bytes != UINT64_MAX) edges.push_back(f.ring_bytes);
  if (f.chunk_bytes < UINT64_MAX) edges.push_back(f.chunk_bytes + 1);
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  std::vector<std::pair<uint64_t, Algorithm>> runs;  // from, algorithm
  for (uint64_t e : edges) {
    const Algorithm a =
        all_reduce_algorithm(e, f.home_bytes, f.two_shot_bytes, f.chunk_bytes, f.ring_bytes);
    if (e >= 1 && (runs.empty() || runs.back().second != a)) runs.emplace_back(e, a);
  }
  out += f.leaders.empty() ? "; all-reduce" : "; all-reduce host-major, across hosts";
  for (size_t i = 0; i < runs.size(); i++) {
    const bool first = i == 0, last = i + 1 == runs.size();
    out += i == 0 ? " " : ", ";
    out += algorithm_words(runs[i].second);
    if (first && last) break;
    const uint64_t from = runs[i].first, to = last ? 0 : runs[i + 1].first;
    if (first) {
      out += " below " + size_words(to);
    } else if (last) {
      out += from - 1 == f.chunk_bytes ? " above " + size_words(from - 1)
                                       : " from " + size_words(from);
    } else {  // up to the next run's start; "to" only where that is the chunk
      out += " from " + size_words(from);
      if (to - 1 == f.chunk_bytes) out += " to " + size_words(to - 1);
    }
  }
  return out + "; steps of at most " + size_words(f.chunk_bytes);
}

}  // namespace ds4tp::group
