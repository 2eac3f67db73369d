#include "stats.hpp"

#include <algorithm>
#include <cmath>

namespace bench {

namespace {

// Nearest rank: the smallest sample with at least q of all samples at or
// below it.
double rank(const std::vector<uint64_t> &s, double q) {
  size_t k = size_t(std::ceil(q * double(s.size())));
  if (k < 1) k = 1;
  if (k > s.size()) k = s.size();
  return double(s[k - 1]) / 1000.0;
}

}  // namespace

Summary summarize(std::vector<uint64_t> &ns) {
  Summary r;
  r.n = ns.size();
  if (ns.empty()) return r;
  std::sort(ns.begin(), ns.end());
  r.p50 = rank(ns, 0.50);
  r.p90 = rank(ns, 0.90);
  r.p99 = rank(ns, 0.99);
  r.p999 = rank(ns, 0.999);
  r.max = double(ns.back()) / 1000.0;
  r.min = double(ns.front()) / 1000.0;
  double sum = 0;
  for (uint64_t v : ns) sum += double(v);
  r.mean = sum / double(ns.size()) / 1000.0;
  return r;
}

}  // namespace bench
