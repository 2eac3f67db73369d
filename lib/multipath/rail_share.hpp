// How a pair with rails splits its traffic, whatever the backend (tcp
// rails: tcp/striped.hpp; rdma rails: rdma/transport.hpp): each link's
// share of a big gate in proportion to its measured rate, and the link
// that answers soonest for row gates. Pure functions of the plan both
// ranks hold (the leader measures and sends it, wire::RailPlan), so both
// ranks split every gate alike.
#pragma once

#include <cstdint>

#include "common/error.hpp"
#include "wire/failover.hpp"

namespace ds4tp {

// Big gates under this stay on one link: splitting them costs more round
// trips than it saves.
constexpr uint64_t kStripeMinBytes = 1u << 20;

// Shares in thousandths in proportion to `mbit` (at least 1 each, summing
// to 1000), and the row link: the one with the least `rtt_ns`.
void share_rails(const uint32_t *mbit, const uint64_t *rtt_ns, int links, wire::RailPlan &plan);

// The link the leader's operator pinned the row gates to (DS4TP_ROW_LINK,
// when one of `links`), whatever the round trips; else `chosen`.
int pin_row_link(int links, int chosen, int pinned);

// The byte range of link k's share of a `bytes` gate: shares rounded down
// to 4 KiB, the remainder to the last link that still has a share.
void stripe_range(const wire::RailPlan &plan, uint64_t bytes, int k, uint64_t &offset,
                  uint64_t &length);

// The leader sends its plan on `fd` (a connected, non-blocking socket);
// the worker reads it there and takes it as it is, EPROTO when it is not
// for `links` links. Both bounded by `deadline_ns`.
int send_rail_plan(int fd, const wire::RailPlan &plan, uint64_t deadline_ns, Error &err);
int receive_rail_plan(int fd, int links, uint64_t deadline_ns, wire::RailPlan &plan, Error &err);

}  // namespace ds4tp
