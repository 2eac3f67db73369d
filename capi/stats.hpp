// Stats snapshots and their Prometheus text as the C API hands them out;
// shared by the pair calls (stats.cpp) and the group calls (group.cpp).
#pragma once

#include <cstddef>

#include "common/error.hpp"
#include "ds4tp/ds4tp.h"
#include "stats/stats.hpp"

namespace ds4tp::capi {

// Copies as much of `s` as the caller's struct holds (st->size); EINVAL
// naming the size field when it is too small.
int stats_to_c(const stats::Snapshot &s, int rank, int transport, ds4tp_stats *st, Error &err);
// The exposition text into buf (see ds4tp_stats_prometheus). Allocates:
// not a gate-path call.
int prometheus_to_c(const stats::Snapshot &s, int rank, int transport, bool group, char *buf,
                    size_t cap, size_t *needed, Error &err);

}  // namespace ds4tp::capi
