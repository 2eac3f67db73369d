// The order in which a group's all-reduce sums (docs/GROUPS.md,
// "Summation order"), as the reference that `ds4tp group` and the tests
// compute the expected bits from: what the plan line and
// ds4tp_group_topology tell, nothing of the library's insides. Pure,
// header only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace ds4tp::sum_order {

// Each host's ranks in local order, hosts in order; a flat group: every
// rank alone, in rank order.
using HostOrder = std::vector<std::vector<int>>;
constexpr size_t kMaxMembers = 16;  // a group has 2..16 ranks (ds4tp_groups.h)

struct Shape {
  HostOrder hosts;
  bool tiered = false;               // the leaders take the call a chunk at a time
  uint64_t ring_from = UINT64_MAX;   // calls of at least this many bytes go around the ring
  uint64_t chunk_bytes = 1u << 20;   // the plan's "steps of at most"
};

// Element i of an all-reduce of `count` elements of `esize` bytes, before
// the last rounding to the element type. value(r): rank r's element (in
// the element type, as a float); round(v): v rounded to the element type.
// Each host of several ranks hands on its sum rounded; the hosts (flat:
// the ranks) then sum in order, or, for a call the ring takes, each
// segment of each step along the ring from its own member, rounded at
// each hop.
template <class Value, class Round>
float element(const Shape &s, uint64_t count, size_t esize, uint64_t i, Value value,
              Round round) {
  const uint64_t n = s.hosts.size() < kMaxMembers ? s.hosts.size() : kMaxMembers;
  float member[kMaxMembers];
  for (uint64_t h = 0; h < n; h++) {
    const auto &ranks = s.hosts[h];
    float acc = 0;
    for (size_t k = 0; k < ranks.size(); k++) acc = k == 0 ? value(ranks[k]) : acc + value(ranks[k]);
    member[h] = ranks.size() > 1 ? round(acc) : acc;
  }
  const uint64_t outer = s.tiered ? s.chunk_bytes / esize : count;
  const uint64_t start = i / outer * outer, end = start + outer < count ? start + outer : count;
  // A call (a tiered call's chunk) of fewer elements than members is one-shot.
  if (n < 2 || count * esize < s.ring_from || end - start < n) {
    float total = member[0];
    for (uint64_t h = 1; h < n; h++) total += member[h];
    return total;
  }
  const uint64_t per = s.chunk_bytes / esize / n * n;
  const uint64_t off = start + (i - start) / per * per;
  const uint64_t m = end - off < per ? end - off : per, seg = (m + n - 1) / n;
  const uint64_t first = (i - off) / seg;
  float acc = member[first];
  for (uint64_t j = 1; j < n; j++) acc = round(acc + member[(first + j) % n]);
  return acc;
}

// The size a plan line gives after `words` ("ring", "steps of at most"):
// "from 16 KiB" is 16384, "above 1 MiB" 1048577, none at all (the words
// stand alone: every size) 1; `absent` where the words are not there.
inline uint64_t plan_size(const std::string &plan, const std::string &words, uint64_t absent) {
  size_t at = 0;
  for (;; at += words.size()) {  // the whole word: "ring", not "during"
    at = plan.find(words, at);
    if (at == std::string::npos) return absent;
    const size_t after = at + words.size();
    const bool word_start = at == 0 || plan[at - 1] == ' ';
    const bool word_end = after >= plan.size() || plan[after] == ' ' || plan[after] == ',' ||
                          plan[after] == ';';
    if (word_start && word_end) break;
  }
  const char *p = plan.c_str() + at + words.size();
  uint64_t plus = 0;
  if (std::strncmp(p, " from ", 6) == 0) {
    p += 6;
  } else if (std::strncmp(p, " above ", 7) == 0) {
    p += 7, plus = 1;
  } else if (*p == ' ' && p[1] >= '0' && p[1] <= '9') {
    p += 1;
  } else {
    return 1;
  }
  char *end = nullptr;
  uint64_t v = std::strtoull(p, &end, 10);
  if (std::strncmp(end, " KiB", 4) == 0) v <<= 10;
  if (std::strncmp(end, " MiB", 4) == 0) v <<= 20;
  if (std::strncmp(end, " GiB", 4) == 0) v <<= 30;
  return v + plus;
}

}  // namespace ds4tp::sum_order
