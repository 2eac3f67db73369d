// Bring-up messages: any bytes must decode to an error or to a value that
// re-encodes to the same bytes (reserved fields aside).
#include "fuzz/fuzz.hpp"

#include <cstring>

#include "wire/hello.hpp"

namespace ds4tp::fuzz {

int hello(const uint8_t *d, size_t n) {
  using namespace ds4tp::wire;
  Preamble p;
  Error err;
  if (decode_preamble(d, n, kHelloMaxBytes, p, err) != DS4TP_OK) {
    FUZZ_CHECK(err.code == DS4TP_EPROTO && !err.message.empty());
    return 0;
  }
  FUZZ_CHECK(p.body_bytes <= kHelloMaxBytes);
  const uint8_t *body = d + kPreambleBytes;
  size_t len = n - kPreambleBytes;
  if (len > p.body_bytes) len = p.body_bytes;
  switch (Kind(p.kind)) {
    case Kind::Control: {
      Hello h;
      if (decode_hello_body(body, len, h, err) != DS4TP_OK) break;
      FUZZ_CHECK(len == kHelloFixedBytes + h.id.blob.size());
      std::vector<uint8_t> again = encode_hello(h);
      FUZZ_CHECK(again.size() == kPreambleBytes + len);
      std::vector<uint8_t> want(body, body + len);
      want[2] = want[3] = 0;  // reserved: ignored on decode, zero on encode
      FUZZ_CHECK(std::memcmp(again.data() + kPreambleBytes, want.data(), len) == 0);
      Error e2;
      FUZZ_CHECK(compare_identity(h.id, h.id, e2) == DS4TP_OK);
      break;
    }
    case Kind::Data: {
      uint64_t cookie = 0;
      bool has_mac = false;
      Mac mac{};
      (void)decode_data_body(body, len, cookie, err);
      if (decode_data_body(body, len, cookie, has_mac, mac, err) == DS4TP_OK) {
        std::vector<uint8_t> again = encode_data(cookie, has_mac ? &mac : nullptr);
        FUZZ_CHECK(again.size() == kPreambleBytes + len);
        FUZZ_CHECK(std::memcmp(again.data() + kPreambleBytes, body, len) == 0);
      }
      break;
    }
    case Kind::DataAck: {
      bool has_mac = false;
      Mac mac{};
      if (decode_data_ack_body(body, len, has_mac, mac, err) == DS4TP_OK)
        FUZZ_CHECK(has_mac == (len == kMacBytes));
      break;
    }
    case Kind::AuthNonce: {
      Nonce nonce{};
      if (decode_auth_nonce_body(body, len, nonce, err) == DS4TP_OK)
        FUZZ_CHECK(encode_auth_nonce(nonce).size() == kPreambleBytes + len);
      break;
    }
    case Kind::AuthProof: {
      Mac mac{};
      if (decode_auth_proof_body(body, len, mac, err) == DS4TP_OK)
        FUZZ_CHECK(std::memcmp(mac.data(), body, kMacBytes) == 0);
      break;
    }
    case Kind::AuthReject: {
      uint32_t reason = 0;
      if (decode_auth_reject_body(body, len, reason, err) == DS4TP_OK)
        FUZZ_CHECK(reject_reason_name(reason) != nullptr);
      break;
    }
    default:
      FUZZ_CHECK(false);  // decode_preamble admits known kinds only
  }
  return 0;
}

}  // namespace ds4tp::fuzz

DS4TP_FUZZ_ENTRY(hello)
