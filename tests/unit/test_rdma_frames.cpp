// RDMA set-up frame payloads: round trips, exact little-endian layout, and
// rejection of every malformed shape with a message naming the field.
#include <catch2/catch.hpp>

#include <vector>

#include "wire/codec.hpp"
#include "wire/rdma_frames.hpp"

using namespace ds4tp;
using namespace ds4tp::wire;

namespace {

RdmaInfo sample_info() {
  RdmaInfo m;
  m.attempt = 2;
  m.qp_num = 0xABCDEF;
  m.psn = 0x123456;
  m.lid = 0x0102;
  m.gid_index = 3;
  m.port = 1;
  m.link_layer = kLinkEthernet;
  m.mtu = 3;
  m.qp_type = kQpUc;
  for (int i = 0; i < 16; i++) m.gid[i] = uint8_t(0xA0 + i);
  m.slab_addr = 0x00007F0011223344ull;
  m.slab_bytes = 25 << 20;
  m.rkey = 0xCAFEF00D;
  m.max_msg = 1 << 16;
  m.send_depth = 256;
  m.recv_depth = 512;
  return m;
}

int decode_info_bytes(std::vector<uint8_t> b, RdmaInfo &out, Error &err) {
  return decode_rdma_info(b.data(), b.size(), out, err);
}

}  // namespace

TEST_CASE("RDMA_INFO round trip keeps every field, little-endian at fixed offsets") {
  RdmaInfo m = sample_info();
  uint8_t b[kRdmaInfoPayload];
  encode_rdma_info(m, b);
  CHECK(get_u32(b + 0) == 2);
  CHECK(get_u32(b + 4) == 0xABCDEF);
  CHECK(get_u32(b + 8) == 0x123456);
  CHECK(get_u16(b + 12) == 0x0102);
  CHECK(get_u16(b + 14) == 3);
  CHECK(b[16] == 1);
  CHECK(b[17] == kLinkEthernet);
  CHECK(b[18] == 3);
  CHECK(b[19] == kQpUc);
  CHECK(b[20] == 0xA0);
  CHECK(b[35] == 0xAF);
  CHECK(get_u64(b + 36) == 0x00007F0011223344ull);
  CHECK(get_u64(b + 44) == (25ull << 20));
  CHECK(get_u32(b + 52) == 0xCAFEF00D);
  CHECK(get_u32(b + 56) == (1u << 16));
  CHECK(get_u32(b + 60) == 256);
  CHECK(get_u32(b + 64) == 512);

  RdmaInfo d;
  Error err;
  REQUIRE(decode_rdma_info(b, sizeof b, d, err) == DS4TP_OK);
  CHECK(d.attempt == m.attempt);
  CHECK(d.qp_num == m.qp_num);
  CHECK(d.psn == m.psn);
  CHECK(d.lid == m.lid);
  CHECK(d.gid_index == m.gid_index);
  CHECK(d.port == m.port);
  CHECK(d.link_layer == m.link_layer);
  CHECK(d.mtu == m.mtu);
  CHECK(d.qp_type == m.qp_type);
  CHECK(d.gid == m.gid);
  CHECK(d.slab_addr == m.slab_addr);
  CHECK(d.slab_bytes == m.slab_bytes);
  CHECK(d.rkey == m.rkey);
  CHECK(d.max_msg == m.max_msg);
  CHECK(d.send_depth == m.send_depth);
  CHECK(d.recv_depth == m.recv_depth);
}

TEST_CASE("RDMA_INFO rejects every malformed shape, naming the field") {
  uint8_t good[kRdmaInfoPayload];
  encode_rdma_info(sample_info(), good);
  auto with = [&](size_t off, std::vector<uint8_t> bytes) {
    std::vector<uint8_t> b(good, good + sizeof good);
    for (size_t i = 0; i < bytes.size(); i++) b[off + i] = bytes[i];
    return b;
  };
  struct Case {
    const char *what;
    std::vector<uint8_t> bytes;
    const char *needle;
  };
  std::vector<uint8_t> shortb(good, good + sizeof good - 1);
  std::vector<uint8_t> longb(good, good + sizeof good);
  longb.push_back(0);
  std::vector<Case> cases = {
      {"truncated", shortb, "exactly 68"},
      {"trailing byte", longb, "exactly 68"},
      {"attempt too large", with(0, {16, 0, 0, 0}), "attempt 16"},
      {"qp number zero", with(4, {0, 0, 0, 0}), "queue pair number 0"},
      {"qp number > 24 bits", with(4, {0, 0, 0, 1}), "queue pair number 16777216"},
      {"psn > 24 bits", with(8, {0, 0, 0, 2}), "exceeds 24 bits"},
      {"port zero", with(16, {0}), "port is 0"},
      {"link layer 3", with(17, {3}), "link layer 3"},
      {"mtu 0", with(18, {0}), "MTU code 0"},
      {"mtu 6", with(18, {6}), "MTU code 6"},
      {"qp type 3", with(19, {3}), "queue pair type 3"},
      {"empty slab", with(44, {0, 0, 0, 0, 0, 0, 0, 0}), "empty slab"},
      {"slab wraps", with(36, {0xF0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}), "wraps"},
      {"max message < 64", with(56, {63, 0, 0, 0}), "below 64"},
      {"zero send depth", with(60, {0, 0, 0, 0}), "depths"},
      {"zero receive depth", with(64, {0, 0, 0, 0}), "depths"},
  };
  for (auto &c : cases) {
    INFO(c.what);
    RdmaInfo d;
    Error err;
    CHECK(decode_info_bytes(c.bytes, d, err) == DS4TP_EPROTO);
    CHECK_THAT(err.message, Catch::Contains(c.needle));
  }
}

TEST_CASE("RDMA_READY, RDMA_POSTED and RDMA_WARM round trip and reject bad input") {
  Error err;
  SECTION("ready") {
    uint8_t b[kRdmaReadyPayload];
    encode_rdma_ready(RdmaReady{7}, b);
    CHECK(get_u32(b) == 7);
    RdmaReady r;
    REQUIRE(decode_rdma_ready(b, sizeof b, r, err) == DS4TP_OK);
    CHECK(r.attempt == 7);
    CHECK(decode_rdma_ready(b, 3, r, err) == DS4TP_EPROTO);
    CHECK_THAT(err.message, Catch::Contains("RDMA_READY frame has 3 bytes"));
    put_u32(b, 99);
    CHECK(decode_rdma_ready(b, sizeof b, r, err) == DS4TP_EPROTO);
    CHECK_THAT(err.message, Catch::Contains("attempt 99"));
  }
  SECTION("posted") {
    uint8_t b[kRdmaPostedPayload];
    encode_rdma_posted(RdmaPosted{1, 4}, b);
    CHECK(get_u32(b) == 1);
    CHECK(get_u32(b + 4) == 4);
    RdmaPosted p;
    REQUIRE(decode_rdma_posted(b, sizeof b, p, err) == DS4TP_OK);
    CHECK(p.attempt == 1);
    CHECK(p.posted == 4);
    CHECK(decode_rdma_posted(b, 9, p, err) == DS4TP_EPROTO);
    put_u32(b + 4, 0);
    CHECK(decode_rdma_posted(b, sizeof b, p, err) == DS4TP_EPROTO);
    CHECK_THAT(err.message, Catch::Contains("0 posted receives"));
  }
  SECTION("warm") {
    uint8_t b[kRdmaWarmPayload];
    encode_rdma_warm(RdmaWarm{3, kWarmReceived | kWarmSent, 16384}, b);
    CHECK(get_u32(b) == 3);
    CHECK(get_u32(b + 4) == 3);
    CHECK(get_u32(b + 8) == 16384);
    RdmaWarm w;
    REQUIRE(decode_rdma_warm(b, sizeof b, w, err) == DS4TP_OK);
    CHECK(w.attempt == 3);
    CHECK(w.flags == (kWarmReceived | kWarmSent));
    CHECK(w.bytes == 16384);
    CHECK(decode_rdma_warm(b, 11, w, err) == DS4TP_EPROTO);
    put_u32(b + 4, 4);
    CHECK(decode_rdma_warm(b, sizeof b, w, err) == DS4TP_EPROTO);
    CHECK_THAT(err.message, Catch::Contains("unknown bits"));
  }
}

TEST_CASE("every truncation of every RDMA payload is rejected, never read past") {
  uint8_t info[kRdmaInfoPayload];
  encode_rdma_info(sample_info(), info);
  uint8_t ready[kRdmaReadyPayload], posted[kRdmaPostedPayload], warm[kRdmaWarmPayload];
  encode_rdma_ready(RdmaReady{0}, ready);
  encode_rdma_posted(RdmaPosted{0, 1}, posted);
  encode_rdma_warm(RdmaWarm{0, 3, 64}, warm);
  Error err;
  for (size_t n = 0; n < sizeof info; n++) {
    // A heap copy of exactly n bytes, so ASan catches any over-read.
    std::vector<uint8_t> b(info, info + n);
    RdmaInfo d;
    CHECK(decode_rdma_info(b.data(), n, d, err) == DS4TP_EPROTO);
  }
  for (size_t n = 0; n < sizeof warm; n++) {
    std::vector<uint8_t> b(warm, warm + n);
    RdmaWarm w;
    RdmaPosted p;
    RdmaReady r;
    CHECK(decode_rdma_warm(b.data(), n, w, err) == DS4TP_EPROTO);
    if (n < sizeof posted) CHECK(decode_rdma_posted(b.data(), n, p, err) == DS4TP_EPROTO);
    if (n < sizeof ready) CHECK(decode_rdma_ready(b.data(), n, r, err) == DS4TP_EPROTO);
  }
}
