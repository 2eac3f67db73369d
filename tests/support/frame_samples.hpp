// One valid payload of every control frame type, plus what a test needs to
// break it: where its count fields are. Shared by the codec unit tests and
// the two-process socket round trip.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.hpp"

namespace ds4tp::test {

struct FrameSample {
  uint16_t type = 0;
  std::vector<uint8_t> payload;
  // Byte offsets of u32 count fields: each must match what follows it.
  std::vector<size_t> count_offsets;
};

// Every type 1..31 in order.
std::vector<FrameSample> frame_samples();

// Decodes `payload` as `type` and encodes the result again, so a round
// trip can be compared byte for byte. DS4TP_OK or the decoder's error.
int reencode(uint16_t type, const uint8_t *payload, size_t n, std::vector<uint8_t> &out,
             Error &err);

}  // namespace ds4tp::test
