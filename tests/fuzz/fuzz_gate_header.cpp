// The gate header: decode, compare with itself, re-encode.
#include "fuzz/fuzz.hpp"

#include <cstring>

#include "wire/gate_header.hpp"

namespace ds4tp::fuzz {

int gate_header(const uint8_t *d, size_t n) {
  using namespace ds4tp::wire;
  GateHeader h;
  Error err;
  if (decode_gate_header(d, n, h, err) != DS4TP_OK) {
    FUZZ_CHECK(err.code == DS4TP_EPROTO);
    return 0;
  }
  Error e2;
  FUZZ_CHECK(check_gate_header(h, h, e2) == DS4TP_OK);
  GateHeader other = h;
  other.seq++;
  FUZZ_CHECK(check_gate_header(h, other, e2) == DS4TP_EDESYNC && !e2.message.empty());
  uint8_t again[kGateHeaderBytes];
  encode_gate_header(h, again);
  uint8_t want[kGateHeaderBytes];
  std::memcpy(want, d, kGateHeaderBytes);
  want[6] = want[7] = 0;  // reserved
  FUZZ_CHECK(std::memcmp(again, want, kGateHeaderBytes) == 0);
  FUZZ_CHECK(gate_kind_name(h.kind) != nullptr);
  return 0;
}

}  // namespace ds4tp::fuzz

DS4TP_FUZZ_ENTRY(gate_header)
