// Control frames: the 16-byte header with its size rules, then the payload
// it announces.
#include "fuzz/fuzz.hpp"

#include <cstring>

#include "wire/frames.hpp"

namespace ds4tp::fuzz {

namespace {
constexpr uint32_t kMaxFrame = 1u << 20;
}

int frame_header(const uint8_t *d, size_t n) {
  using namespace ds4tp::wire;
  FrameHeader h;
  Error err;
  if (decode_frame_header(d, n, kMaxFrame, h, err) != DS4TP_OK) {
    FUZZ_CHECK(err.code == DS4TP_EPROTO && !err.message.empty());
    return 0;
  }
  FUZZ_CHECK(h.bytes <= kMaxFrame);
  const FrameRule *rule = frame_rule(h.type);
  FUZZ_CHECK(rule != nullptr);
  FUZZ_CHECK(h.bytes >= rule->min);
  uint8_t again[kFrameHeaderBytes];
  encode_frame_header(h, again);
  FUZZ_CHECK(std::memcmp(again, d, kFrameHeaderBytes) == 0);
  if (n - kFrameHeaderBytes >= h.bytes) {
    Error e2;
    int rc = validate_payload(h.type, d + kFrameHeaderBytes, h.bytes, e2);
    FUZZ_CHECK(rc == DS4TP_OK || (rc < 0 && !e2.message.empty()));
  }
  return 0;
}

}  // namespace ds4tp::fuzz

DS4TP_FUZZ_ENTRY(frame_header)
