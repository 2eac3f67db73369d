#include "multipath/rail_share.hpp"

#include <algorithm>
#include <cstdlib>

#include "net/socket.hpp"

namespace ds4tp {

void share_rails(const uint32_t *mbit, const uint64_t *rtt_ns, int links, wire::RailPlan &plan) {
  plan = wire::RailPlan{};
  plan.links = uint16_t(links);
  uint64_t total = 0;
  for (int k = 0; k < links; k++) total += std::max<uint32_t>(mbit[k], 1);
  int left = 1000, best = 0;
  for (int k = 0; k < links; k++) {
    plan.mbit[k] = mbit[k];
    plan.rtt_us[k] = uint32_t(std::min<uint64_t>(rtt_ns[k] / 1000, UINT32_MAX));
    const int share = std::max(1, int(uint64_t(std::max<uint32_t>(mbit[k], 1)) * 1000 / total));
    plan.share[k] = uint16_t(share);
    left -= share;
    if (rtt_ns[k] < rtt_ns[best]) best = k;
  }
  // Rounding's remainder (either way) goes to the fastest link.
  int fastest = int(std::max_element(mbit, mbit + links) - mbit);
  plan.share[fastest] = uint16_t(int(plan.share[fastest]) + left);
  plan.row_link = uint16_t(best);
}

int pin_row_link(int links, int chosen, int pinned) {
  return pinned >= 0 && pinned < links ? pinned : chosen;
}

void stripe_range(const wire::RailPlan &plan, uint64_t bytes, int k, uint64_t &offset,
                  uint64_t &length) {
  constexpr uint64_t kAlign = 4096;
  // A link dropped in an earlier gate has share 0: the remainder goes to
  // the last link that still has a share, never to a dropped one.
  int last = plan.links - 1;
  while (last > 0 && plan.share[last] == 0) last--;
  offset = 0;
  length = 0;
  for (int i = 0; i <= k; i++) {
    offset += length;
    length = i == last ? bytes - offset : bytes * plan.share[i] / 1000 / kAlign * kAlign;
  }
}

int send_rail_plan(int fd, const wire::RailPlan &plan, uint64_t deadline_ns, Error &err) {
  uint8_t b[wire::kRailPlanBytes];
  wire::encode_rail_plan(plan, b);
  return net::write_all(fd, b, sizeof b, deadline_ns, "rail plan", err);
}

int receive_rail_plan(int fd, int links, uint64_t deadline_ns, wire::RailPlan &plan, Error &err) {
  uint8_t b[wire::kRailPlanBytes];
  if (int rc = net::read_exact(fd, b, sizeof b, deadline_ns, "rail plan", err)) return rc;
  if (int rc = wire::decode_rail_plan(b, sizeof b, plan, err)) return rc;
  if (plan.links != links)
    return err.set(DS4TP_EPROTO, "rail plan for {} links, this worker has {}", plan.links, links);
  return DS4TP_OK;
}

}  // namespace ds4tp
