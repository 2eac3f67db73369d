// The RDMA set-up payloads (wire/rdma_frames.hpp): byte 0 picks the frame
// (RDMA_INFO, RDMA_READY, RDMA_POSTED, RDMA_WARM, a group link's status),
// the rest is its payload.
// A payload that decodes must re-encode to exactly the same bytes (no field
// is dropped or normalised); one that does not must fail with EPROTO and a
// message.
#include "fuzz/fuzz.hpp"

#include <cstring>
#include <string>

#include "wire/rdma_frames.hpp"

namespace ds4tp::fuzz {

namespace {

template <size_t N, typename M, typename Dec, typename Enc>
void round_trip(const uint8_t *p, size_t n, Dec dec, Enc enc) {
  M m;
  Error err;
  if (dec(p, n, m, err) != DS4TP_OK) {
    FUZZ_CHECK(err.code == DS4TP_EPROTO && !err.message.empty());
    return;
  }
  FUZZ_CHECK(n == N);
  uint8_t again[N];
  enc(m, again);
  FUZZ_CHECK(std::memcmp(again, p, N) == 0);
}

// A link status read as the mesh reads it: a prefix at a time, as long
// as the decoder asks for more; complete, it re-encodes to its bytes.
void link_status(const uint8_t *p, size_t n) {
  size_t have = 0, need = 1;
  bool can = false;
  std::string why;
  Error err;
  while (have < need && need <= n) {
    have = need;
    if (wire::decode_link_status(p, have, can, why, need, err) != DS4TP_OK) {
      FUZZ_CHECK(err.code == DS4TP_EPROTO && !err.message.empty());
      return;
    }
    FUZZ_CHECK(need >= have || need == 1);
  }
  if (have < need) return;  // ran out of bytes
  uint8_t again[wire::kLinkStatusMax];
  FUZZ_CHECK(wire::encode_link_status(can, why, again) == have);
  FUZZ_CHECK(std::memcmp(again, p, have) == 0);
}

}  // namespace

int rdma_frames(const uint8_t *d, size_t n) {
  using namespace ds4tp::wire;
  if (n == 0) return 0;
  const uint8_t *p = d + 1;
  const size_t len = n - 1;
  switch (d[0] % 5) {
    case 0:
      round_trip<kRdmaInfoPayload, RdmaInfo>(p, len, decode_rdma_info, encode_rdma_info);
      break;
    case 1:
      round_trip<kRdmaReadyPayload, RdmaReady>(p, len, decode_rdma_ready, encode_rdma_ready);
      break;
    case 2:
      round_trip<kRdmaPostedPayload, RdmaPosted>(p, len, decode_rdma_posted, encode_rdma_posted);
      break;
    case 3:
      round_trip<kRdmaWarmPayload, RdmaWarm>(p, len, decode_rdma_warm, encode_rdma_warm);
      break;
    default:
      link_status(p, len);
      break;
  }
  return 0;
}

}  // namespace ds4tp::fuzz

DS4TP_FUZZ_ENTRY(rdma_frames)
