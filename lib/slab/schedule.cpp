#include "slab/schedule.hpp"

#include <fmt/format.h>

namespace ds4tp::slab {

namespace {
uint32_t popcount(const Schedule &s) {
  uint32_t n = 0;
  for (uint64_t m : s.mask) n += uint32_t(__builtin_popcountll(m));
  return n;
}
}  // namespace

std::string validate_schedule(const Schedule &s) {
  if (s.slots == 0) return "the schedule has no slots (n_layer is 0)";
  if (s.has_mask()) {
    uint32_t n = popcount(s);
    if (s.per_token != n)
      return fmt::format(
          "gate_slot_mask has {} bits set but gates_per_token is {}; they must "
          "be equal",
          n, s.per_token);
    for (uint32_t w = 0; w < kMaskWords; w++) {
      for (uint32_t b = 0; b < 64; b++) {
        if ((s.mask[w] >> b) & 1u) {
          uint32_t slot = w * 64 + b;
          if (slot >= s.slots)
            return fmt::format(
                "gate_slot_mask names slot {}, beyond the {} slots of n_layer*2",
                slot, s.slots);
        }
      }
    }
    return {};
  }
  if (s.per_token == 0) return {};
  uint64_t last = uint64_t(s.start) + uint64_t(s.per_token - 1) * s.step;
  if (last >= s.slots)
    return fmt::format(
        "gate schedule start {} step {} with {} gates per token reaches slot "
        "{}, beyond the {} slots of n_layer*2",
        s.start, s.step, s.per_token, last, s.slots);
  return {};
}

int64_t slot_for_seq(const Schedule &s, uint64_t seq) {
  if (seq == 0 || s.slots == 0) return -1;
  if (s.has_mask()) {
    uint64_t ordinal = (seq - 1) % s.per_token;
    for (uint32_t w = 0; w < kMaskWords; w++) {
      uint64_t m = s.mask[w];
      uint32_t bits = uint32_t(__builtin_popcountll(m));
      if (ordinal >= bits) {
        ordinal -= bits;
        continue;
      }
      while (ordinal--) m &= m - 1;  // drop the lowest set bits
      return int64_t(w) * 64 + __builtin_ctzll(m);
    }
    return -1;
  }
  if (s.per_token == 0) return int64_t((seq - 1) % s.slots);
  return int64_t(s.start) + int64_t((seq - 1) % s.per_token) * s.step;
}

}  // namespace ds4tp::slab
