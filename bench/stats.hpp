// Latency summaries: nearest-rank percentiles over a block of samples.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace bench {

struct Summary {
  size_t n = 0;
  double p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0, min = 0, mean = 0;  // microseconds
};

// Sorts `ns` (nanosecond samples) in place and summarizes it in us.
Summary summarize(std::vector<uint64_t> &ns);

}  // namespace bench
