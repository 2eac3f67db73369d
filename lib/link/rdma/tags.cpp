// The immediate-value tags every rdma message carries (transport.hpp):
// made here, and read back into words for the messages of a desync.
#include <string>

#include "common/log.hpp"
#include "link/rdma/pair_link.hpp"

namespace ds4tp::rdma {

uint32_t row_tag(uint64_t seq, uint32_t chunk) {
  return kTagRow << 28 | uint32_t(seq & 0xFFFFFu) << 8 | (chunk & 0xFFu);
}
uint32_t batch_tag(uint64_t seq, uint32_t message) {
  return kTagBatch << 28 | uint32_t(seq & 0xFFFFu) << 12 | (message & 0xFFFu);
}
uint32_t big_tag(uint32_t round, uint32_t message) {
  return kTagBig << 28 | (round & 0xFFFu) << 16 | (message & 0xFFFFu);
}
uint32_t drain_tag(uint32_t message) { return kTagDrain << 28 | (message & 0x0FFFFFFFu); }
uint32_t warm_tag(uint32_t attempt) { return kTagWarm << 28 | (attempt & 0x0FFFFFFFu); }

std::string describe_tag(uint32_t imm) {
  switch (imm >> 28) {
    case kTagRow:
      return fmt::format("row gate seq ...{} (low 20 bits) message {}", (imm >> 8) & 0xFFFFF,
                         imm & 0xFF);
    case kTagBatch:
      return fmt::format("batch gate seq ...{} (low 16 bits) message {}", (imm >> 12) & 0xFFFF,
                         imm & 0xFFF);
    case kTagBig:
      return fmt::format("big gate round {} message {}", (imm >> 16) & 0xFFF, imm & 0xFFFF);
    case kTagDrain: return fmt::format("drain message {}", imm & 0x0FFFFFFF);
    case kTagWarm:
      if ((imm & 0x0FFFFF00u) == 0 || (imm & 0x0FFFFF00u) > 0x200)
        return fmt::format("warm-up of attempt {}", imm & 0x0FFFFFFF);
      return fmt::format("{} of link {}", (imm & 0x300) == 0x100 ? "sample" : "ping", imm & 0xFF);
    default: return fmt::format("unknown message (immediate 0x{:08x})", imm);
  }
}

}  // namespace ds4tp::rdma
