// Every command payload decoder in one target: byte 0 picks the frame type
// (unknown types included), the rest is the payload; validate_payload
// dispatches to the type's decoder.
#include "fuzz/fuzz.hpp"

#include "wire/frames.hpp"

namespace ds4tp::fuzz {

int frame_payloads(const uint8_t *d, size_t n) {
  if (n == 0) return 0;
  Error err;
  int rc = ds4tp::wire::validate_payload(d[0], d + 1, n - 1, err);
  FUZZ_CHECK(rc == DS4TP_OK || (rc < 0 && !err.message.empty()));
  return 0;
}

}  // namespace ds4tp::fuzz

DS4TP_FUZZ_ENTRY(frame_payloads)
