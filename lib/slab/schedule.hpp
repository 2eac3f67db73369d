// Gate slot schedule: which slot (layer*2 + gate) row gate `seq` must hit.
// Pure; shared by the desync check and by transports that post receives
// ahead of time (RDMA).
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace ds4tp::slab {

constexpr uint32_t kMaskWords = 4;

struct Schedule {
  uint32_t slots = 0;  // n_layer * 2
  uint32_t start = 0;
  uint32_t step = 0;
  uint32_t per_token = 0;
  std::array<uint64_t, kMaskWords> mask{};

  bool has_mask() const {
    for (uint64_t m : mask)
      if (m) return true;
    return false;
  }
};

// Empty string when valid, else what is wrong in words.
std::string validate_schedule(const Schedule &s);

// Slot for seq >= 1 under a valid schedule; -1 for seq 0.
int64_t slot_for_seq(const Schedule &s, uint64_t seq);

}  // namespace ds4tp::slab
