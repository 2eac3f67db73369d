// The shm transport's handshake (wire/shm_offer.hpp): a 12-byte header,
// then the body it announces, decoded as an offer or a ready message;
// what decodes encodes back to the same bytes.
#include "fuzz/fuzz.hpp"

#include <cstring>

#include "wire/shm_offer.hpp"

namespace ds4tp::fuzz {

int shm_offer(const uint8_t *d, size_t n) {
  using namespace ds4tp::wire;
  ShmHeader h;
  Error err;
  if (decode_shm_header(d, n, h, err) != DS4TP_OK) {
    FUZZ_CHECK(err.code == DS4TP_EPROTO && !err.message.empty());
    return 0;
  }
  FUZZ_CHECK(h.body_bytes <= kShmMaxBody);
  const uint8_t *body = d + kShmHeaderBytes;
  if (n - kShmHeaderBytes < h.body_bytes) return 0;  // the reader waits for the rest
  const size_t len = h.body_bytes;
  std::vector<uint8_t> again;
  if (h.kind == uint16_t(ShmKind::Offer)) {
    ShmOffer o;
    if (decode_shm_offer(h, body, len, o, err) != DS4TP_OK) {
      FUZZ_CHECK(err.code == DS4TP_EPROTO && !err.message.empty());
      return 0;
    }
    FUZZ_CHECK(o.ok ? !o.name.empty() && o.name[0] == '/' && o.reason.empty() : o.name.empty());
    again = encode_shm_offer(o);
    // The reserved word after the pid is not kept: compare around it.
    FUZZ_CHECK(again.size() == kShmHeaderBytes + len);
    std::vector<uint8_t> want(d, d + kShmHeaderBytes + len);
    std::memset(want.data() + kShmHeaderBytes + 4, 0, 4);
    FUZZ_CHECK(std::memcmp(again.data(), want.data(), want.size()) == 0);
  } else {
    ShmReady r;
    if (decode_shm_ready(h, body, len, r, err) != DS4TP_OK) {
      FUZZ_CHECK(err.code == DS4TP_EPROTO && !err.message.empty());
      return 0;
    }
    FUZZ_CHECK(!r.ok || r.reason.empty());
    again = encode_shm_ready(r);
    FUZZ_CHECK(again.size() == kShmHeaderBytes + len);
    FUZZ_CHECK(std::memcmp(again.data(), d, again.size()) == 0);
  }
  return 0;
}

std::vector<Bytes> shm_offer_seeds() {
  using namespace ds4tp::wire;
  ShmOffer ok;
  ok.ok = true;
  ok.pid = 4242;
  ok.start_time = 123456;
  ok.segment_bytes = 1 << 20;
  ok.name = "/ds4tp-4242-0123abcd";
  ShmOffer no;
  no.reason = "no room in /dev/shm";
  ShmReady ready;
  ready.ok = true;
  ShmReady failed;
  failed.reason = "cannot map the peer's segment";
  return {encode_shm_offer(ok), encode_shm_offer(no), encode_shm_ready(ready),
          encode_shm_ready(failed)};
}

}  // namespace ds4tp::fuzz

DS4TP_FUZZ_ENTRY(shm_offer)
