// A tcp pair's rails: the data connection (link 0) and the extra tcp links
// opened beside it (multipath/standby.hpp), measured once at bring-up so
// big gates can be split in proportion to each link's rate and row gates
// kept on the link that answers soonest (striped.hpp runs the plan).
//
// The leader measures, one link at a time: four 32-byte round trips (the
// shortest is the link's latency), then 2 MiB it sends and the worker
// acknowledges once all of it arrived (the rate). It sends the plan
// (wire::RailPlan) on the data connection; the worker takes it as it is,
// so both ranks split every big gate alike.
//
// Blocking, bounded by `deadline_ns`; on the connecting thread.
#pragma once

#include <cstdint>
#include <vector>

#include "common/error.hpp"
#include "wire/failover.hpp"

namespace ds4tp::tcp {

// What the measuring sends on each link: the rate sample's size.
constexpr uint64_t kRailSampleBytes = 2u << 20;

// `fds[k]`: link k (0: the data connection), connected, non-blocking.
// `pinned`: the leader's row link by the operator (-1: the quickest).
int plan_rails(int rank, const std::vector<int> &fds, uint64_t deadline_ns, int pinned,
               wire::RailPlan &plan, Error &err);

}  // namespace ds4tp::tcp
