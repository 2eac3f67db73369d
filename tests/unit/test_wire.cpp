// Wire codecs: round trips and rejection of every malformed shape.
#include <catch2/catch.hpp>

#include <cstring>

#include "wire/codec.hpp"
#include "wire/failover.hpp"
#include "wire/gate_header.hpp"
#include "wire/hello.hpp"

using namespace ds4tp;
using namespace ds4tp::wire;

namespace {

// One byte of a good message changed, and the reason a decoder must give.
struct Altered {
  size_t at;
  uint8_t value;
  const char *text;
};

// Each change of `good` (N bytes) is EPROTO naming its reason.
template <size_t N, typename M, typename Decode>
void check_refused(const uint8_t (&good)[N], Decode decode, std::initializer_list<Altered> bad) {
  for (const Altered &x : bad) {
    INFO(x.text);
    uint8_t c[N];
    std::memcpy(c, good, N);
    c[x.at] = x.value;
    M got;
    Error e;
    CHECK(decode(c, N, got, e) == DS4TP_EPROTO);
    CHECK(e.message.find(x.text) != std::string::npos);
  }
}

}  // namespace

namespace {

Hello sample_hello() {
  Hello h;
  h.role = DS4TP_ROLE_WORKER;
  h.transport_request = DS4TP_TRANSPORT_TCP;
  h.caps = kCapTcp | kCapShm;
  for (int i = 0; i < 16; i++) h.host_id[i] = uint8_t(i * 7);
  h.cookie = 0x1122334455667788ull;
  Identity &id = h.id;
  id.model_bytes = 0x0102030405060708ull;
  id.model_id = 9;
  id.n_layer = 43;
  id.n_embd = 4096;
  id.n_vocab = 129280;
  id.quant_bits = 2;
  id.ctx_size = 32768;
  id.gate_slot_start = 1;
  id.gate_slot_step = 2;
  id.gates_per_token = 40;
  id.gate_slot_mask = {0xdeadbeefull, 0, 1, 0x8000000000000000ull};
  id.features = 0xabcdef;
  id.blob = {1, 2, 3, 4, 5};
  return h;
}

// Splits an encoded hello into its preamble and body.
int decode_all(const std::vector<uint8_t> &bytes, Hello &out, Error &err) {
  Preamble p;
  int rc = decode_preamble(bytes.data(), bytes.size(), kHelloMaxBytes, p, err);
  if (rc) return rc;
  if (p.kind != uint16_t(Kind::Control)) return err.set(DS4TP_EPROTO, "kind");
  return decode_hello_body(bytes.data() + kPreambleBytes, bytes.size() - kPreambleBytes, out,
                           err);
}

}  // namespace

TEST_CASE("codec writes little-endian field by field") {
  uint8_t buf[16];
  Writer w(buf, sizeof buf);
  w.u16(0x0102);
  w.u32(0x03040506);
  w.u64(0x0708090a0b0c0d0eull);
  REQUIRE(w.ok());
  REQUIRE(w.size() == 14);
  const uint8_t want[] = {0x02, 0x01, 0x06, 0x05, 0x04, 0x03, 0x0e, 0x0d,
                          0x0c, 0x0b, 0x0a, 0x09, 0x08, 0x07};
  REQUIRE(std::memcmp(buf, want, sizeof want) == 0);
  w.u32(1);  // 14 + 4 > 16
  REQUIRE_FALSE(w.ok());
  Reader r(buf, 14);
  REQUIRE(r.u16() == 0x0102);
  REQUIRE(r.u32() == 0x03040506);
  REQUIRE(r.u64() == 0x0708090a0b0c0d0eull);
  REQUIRE(r.ok());
  REQUIRE(r.u8() == 0);
  REQUIRE_FALSE(r.ok());
}

TEST_CASE("hello round trip keeps every field") {
  Hello h = sample_hello();
  std::vector<uint8_t> bytes = encode_hello(h);
  REQUIRE(bytes.size() == kPreambleBytes + kHelloFixedBytes + 5);
  // The magic is the ASCII bytes "D4TP" whatever the host byte order.
  REQUIRE(std::memcmp(bytes.data(), "D4TP", 4) == 0);
  Hello back;
  Error err;
  REQUIRE(decode_all(bytes, back, err) == DS4TP_OK);
  REQUIRE(back.role == h.role);
  REQUIRE(back.transport_request == h.transport_request);
  REQUIRE(back.caps == h.caps);
  REQUIRE(back.host_id == h.host_id);
  REQUIRE(back.cookie == h.cookie);
  REQUIRE(compare_identity(h.id, back.id, err) == DS4TP_OK);
  REQUIRE(back.id.ctx_size == h.id.ctx_size);
}

TEST_CASE("malformed preambles are rejected with a named reason") {
  std::vector<uint8_t> bytes = encode_hello(sample_hello());
  Preamble p;
  Error err;
  SECTION("short") {
    REQUIRE(decode_preamble(bytes.data(), 11, kHelloMaxBytes, p, err) == DS4TP_EPROTO);
    REQUIRE_THAT(err.message, Catch::Contains("truncated"));
  }
  SECTION("bad magic") {
    std::memcpy(bytes.data(), "HTTP", 4);
    REQUIRE(decode_preamble(bytes.data(), bytes.size(), kHelloMaxBytes, p, err) == DS4TP_EPROTO);
    REQUIRE_THAT(err.message, Catch::Contains("not a ds4tp peer"));
  }
  SECTION("byte-swapped magic names the byte order") {
    std::memcpy(bytes.data(), "PT4D", 4);
    REQUIRE(decode_preamble(bytes.data(), bytes.size(), kHelloMaxBytes, p, err) == DS4TP_EPROTO);
    REQUIRE_THAT(err.message, Catch::Contains("byte order"));
  }
  SECTION("oversized body") {
    put_u32(bytes.data() + 8, uint32_t(kHelloMaxBytes + 1));
    REQUIRE(decode_preamble(bytes.data(), bytes.size(), kHelloMaxBytes, p, err) == DS4TP_EPROTO);
    REQUIRE_THAT(err.message, Catch::Contains("exceeds"));
  }
  SECTION("unknown kind") {
    put_u16(bytes.data() + 6, 99);
    REQUIRE(decode_preamble(bytes.data(), bytes.size(), kHelloMaxBytes, p, err) == DS4TP_EPROTO);
    REQUIRE_THAT(err.message, Catch::Contains("kind 99"));
  }
  SECTION("another version decodes, so the caller can name it") {
    put_u16(bytes.data() + 4, 77);
    REQUIRE(decode_preamble(bytes.data(), bytes.size(), kHelloMaxBytes, p, err) == DS4TP_OK);
    REQUIRE(p.version == 77);
  }
}

TEST_CASE("malformed hello bodies are rejected") {
  std::vector<uint8_t> bytes = encode_hello(sample_hello());
  uint8_t *body = bytes.data() + kPreambleBytes;
  size_t len = bytes.size() - kPreambleBytes;
  Hello h;
  Error err;
  SECTION("truncated anywhere") {
    for (size_t cut = 0; cut < len; cut++) {
      Error e;
      REQUIRE(decode_hello_body(body, cut, h, e) == DS4TP_EPROTO);
    }
  }
  SECTION("trailing bytes") {
    bytes.push_back(0);
    body = bytes.data() + kPreambleBytes;  // the vector may have moved
    REQUIRE(decode_hello_body(body, len + 1, h, err) == DS4TP_EPROTO);
    REQUIRE_THAT(err.message, Catch::Contains("engine blob"));
  }
  SECTION("bad role") {
    body[0] = 3;
    REQUIRE(decode_hello_body(body, len, h, err) == DS4TP_EPROTO);
    REQUIRE_THAT(err.message, Catch::Contains("role"));
  }
  SECTION("bad transport") {
    body[1] = 9;
    REQUIRE(decode_hello_body(body, len, h, err) == DS4TP_EPROTO);
    REQUIRE_THAT(err.message, Catch::Contains("transport"));
  }
  SECTION("mask word count") {
    put_u32(body + 76, 3);
    REQUIRE(decode_hello_body(body, len, h, err) == DS4TP_EPROTO);
    REQUIRE_THAT(err.message, Catch::Contains("mask"));
  }
  SECTION("blob larger than the limit") {
    put_u32(body + 120, kBlobMax + 1);
    REQUIRE(decode_hello_body(body, len, h, err) == DS4TP_EPROTO);
  }
}

TEST_CASE("identity comparison names the field and both values") {
  Identity a = sample_hello().id;
  struct Case {
    const char *field;
    std::function<void(Identity &)> change;
  } cases[] = {
      {"model_bytes", [](Identity &i) { i.model_bytes++; }},
      {"model_id", [](Identity &i) { i.model_id++; }},
      {"n_layer", [](Identity &i) { i.n_layer++; }},
      {"n_embd", [](Identity &i) { i.n_embd++; }},
      {"n_vocab", [](Identity &i) { i.n_vocab++; }},
      {"quant_bits", [](Identity &i) { i.quant_bits++; }},
      {"gate_slot_start", [](Identity &i) { i.gate_slot_start++; }},
      {"gate_slot_step", [](Identity &i) { i.gate_slot_step++; }},
      {"gates_per_token", [](Identity &i) { i.gates_per_token++; }},
      {"gate_slot_mask[2]", [](Identity &i) { i.gate_slot_mask[2] ^= 4; }},
      {"features", [](Identity &i) { i.features ^= 0x10; }},
      {"engine_blob", [](Identity &i) { i.blob[3] ^= 1; }},
      {"engine_blob", [](Identity &i) { i.blob.push_back(0); }},
  };
  for (auto &c : cases) {
    Identity b = a;
    c.change(b);
    Error err;
    INFO(c.field);
    REQUIRE(compare_identity(a, b, err) == DS4TP_EIDENTITY);
    REQUIRE_THAT(err.message, Catch::Contains(c.field));
  }
  Error err;
  Identity b = a;
  b.n_layer = 61;
  compare_identity(a, b, err);
  REQUIRE_THAT(err.message, Catch::Contains("43") && Catch::Contains("61"));
  b = a;
  b.ctx_size = 1;  // reported, never compared
  REQUIRE(compare_identity(a, b, err) == DS4TP_OK);
}

TEST_CASE("data preamble carries the pair cookie") {
  std::vector<uint8_t> d = encode_data(0xfeedfacecafebeefull);
  Preamble p;
  Error err;
  REQUIRE(decode_preamble(d.data(), d.size(), 64, p, err) == DS4TP_OK);
  REQUIRE(p.kind == uint16_t(Kind::Data));
  uint64_t cookie = 0;
  REQUIRE(decode_data_body(d.data() + kPreambleBytes, p.body_bytes, cookie, err) == DS4TP_OK);
  REQUIRE(cookie == 0xfeedfacecafebeefull);
  REQUIRE(decode_data_body(d.data() + kPreambleBytes, 7, cookie, err) == DS4TP_EPROTO);
}

TEST_CASE("gate header round trip and desync naming both sides") {
  GateHeader h{uint16_t(GateKind::Row), 3, 1, 42, 16384};
  uint8_t buf[kGateHeaderBytes];
  encode_gate_header(h, buf);
  GateHeader back;
  Error err;
  REQUIRE(decode_gate_header(buf, sizeof buf, back, err) == DS4TP_OK);
  REQUIRE(back == h);
  REQUIRE(decode_gate_header(buf, 31, back, err) == DS4TP_EPROTO);
  buf[0] ^= 0xff;
  REQUIRE(decode_gate_header(buf, sizeof buf, back, err) == DS4TP_EPROTO);

  GateHeader peer = h;
  peer.seq = 43;
  REQUIRE(check_gate_header(h, peer, err) == DS4TP_EDESYNC);
  REQUIRE_THAT(err.message, Catch::Contains("seq 42") && Catch::Contains("seq 43") &&
                                Catch::Contains("layer 3"));
  peer = h;
  peer.bytes = 8;
  REQUIRE(check_gate_header(h, peer, err) == DS4TP_EDESYNC);
}

TEST_CASE("failover messages round trip and refuse what is not theirs, naming why") {
  StandbyMsg m;
  m.kind = uint16_t(StandbyKind::Dialed);
  m.port = 40123;
  m.ok = false;
  m.cookie = 0x0102030405060708ull;
  m.index = 1;
  m.count = 2;
  m.reason = std::string(300, 'x');  // truncated to what fits
  uint8_t b[kStandbyBytes];
  encode_standby(m, b);
  StandbyMsg got;
  Error err;
  REQUIRE(decode_standby(b, sizeof b, got, err) == DS4TP_OK);
  CHECK(got.kind == m.kind);
  CHECK(got.port == 40123);
  CHECK_FALSE(got.ok);
  CHECK(got.cookie == m.cookie);
  CHECK(got.index == 1);
  CHECK(got.count == 2);
  CHECK(got.reason == std::string(kStandbyReasonMax, 'x'));

  Resume r;
  r.in_flight = {uint16_t(GateKind::Batch), 2, 5, 9, 81920};
  r.done = {uint16_t(GateKind::Row), 1, 1, 44, 16384};
  r.holds_done = true;
  r.lost_links = 0x06;  // rails 1 and 2
  r.reason = "rdma: a send work request failed";
  uint8_t rb[kResumeBytes];
  encode_resume(r, rb);
  Resume rr;
  REQUIRE(decode_resume(rb, sizeof rb, rr, err) == DS4TP_OK);
  CHECK(rr.in_flight == r.in_flight);
  CHECK(rr.done == r.done);
  CHECK(rr.holds_done);
  CHECK(rr.lost_links == 0x06);
  CHECK(rr.reason == r.reason);

  struct Bad {
    const char *what;
    size_t at;
    uint8_t value;
    size_t len;
    const char *text;
  };
  const Bad standby_bad[] = {
      {"truncated", 0, 'D', kStandbyBytes - 1, "truncated: 255 of 256"},
      {"magic", 0, 'X', kStandbyBytes, "bad standby message magic"},
      {"kind", 4, 9, kStandbyBytes, "unknown standby message kind 9"},
      {"status", 8, 2, kStandbyBytes, "status 2 is not 0 or 1"},
      {"link count", 14, 9, kStandbyBytes, "names link 1 of 9"},
      {"unterminated", kStandbyBytes - 1, 'x', kStandbyBytes, "not NUL-terminated text"},
      {"control byte", 30, 7, kStandbyBytes, "not NUL-terminated text"},
  };
  for (const Bad &x : standby_bad) {
    INFO(x.what);
    uint8_t c[kStandbyBytes];
    std::memcpy(c, b, sizeof c);
    c[x.at] = x.value;
    Error e;
    CHECK(decode_standby(c, x.len, got, e) == DS4TP_EPROTO);
    CHECK(e.message.find(x.text) != std::string::npos);
  }
  const Bad resume_bad[] = {
      {"truncated", 0, 'D', 100, "truncated: 100 of 256"},
      {"magic", 1, 0, kResumeBytes, "bad resume message magic"},
      {"version", 4, 2, kResumeBytes, "version 2"},
      {"flags", 6, 2, kResumeBytes, "flags 0x602 unknown"},
      {"gate magic", 8, 0, kResumeBytes, "bad gate header magic"},
      {"kind", 12, 7, kResumeBytes, "names gate kinds 7 and 1"},
      {"unterminated", kResumeBytes - 1, 'x', kResumeBytes, "not NUL-terminated text"},
  };
  for (const Bad &x : resume_bad) {
    INFO(x.what);
    uint8_t c[kResumeBytes];
    std::memcpy(c, rb, sizeof c);
    c[x.at] = x.value;
    Error e;
    CHECK(decode_resume(c, x.len, rr, e) == DS4TP_EPROTO);
    CHECK(e.message.find(x.text) != std::string::npos);
  }
}

TEST_CASE("a rail plan round trips, and its shares and links are checked") {
  RailPlan p;
  p.links = 3;
  p.row_link = 2;
  p.share[0] = 500;
  p.share[1] = 300;
  p.share[2] = 200;
  p.mbit[0] = 4000;
  p.mbit[1] = 2400;
  p.mbit[2] = 1600;
  uint8_t b[kRailPlanBytes];
  encode_rail_plan(p, b);
  RailPlan got;
  Error err;
  REQUIRE(decode_rail_plan(b, sizeof b, got, err) == DS4TP_OK);
  CHECK(got.links == 3);
  CHECK(got.row_link == 2);
  CHECK(got.share[1] == 300);
  CHECK(got.mbit[2] == 1600);
  check_refused<kRailPlanBytes, RailPlan>(b, decode_rail_plan,
                                           {{0, 0, "bad rail plan magic"},
                                            {4, 1, "names 1 links"},
                                            {4, 9, "names 9 links"},
                                            {6, 3, "row link 3"},
                                            {8, 0, "shares sum to 756"},
                                            {14, 1, "fills link 3 of 3"},
                                            {90, 1, "padding is not zero"}});
}

TEST_CASE("rail counts round trip, and their stage, links and counts are checked") {
  RailSync m;
  m.links = 3;
  m.keep = 6;
  m.sent[0] = 262176;
  m.sent[2] = (5ull << 32) + 7;
  uint8_t b[kRailSyncBytes];
  encode_rail_sync(m, b);
  RailSync got;
  Error err;
  REQUIRE(decode_rail_sync(b, sizeof b, got, err) == DS4TP_OK);
  CHECK((got.stage == 1 && got.links == 3 && got.keep == 6));
  CHECK((got.sent[0] == 262176 && got.sent[1] == 0 && got.sent[2] == (5ull << 32) + 7));
  CHECK(decode_rail_sync(b, sizeof b - 1, got, err) == DS4TP_EPROTO);
  CHECK(err.message.find("truncated: 79 of 80") != std::string::npos);
  check_refused<kRailSyncBytes, RailSync>(b, decode_rail_sync,
                                           {{0, 0, "bad rail counts magic"},
                                            {4, 3, "stage 3 is not 1 or 2"},
                                            {4, 2, "link 0 of 3 a count at stage 2"},
                                            {6, 1, "keep 0x6 of 1 links"},
                                            {6, 9, "keep 0x6 of 9 links"},
                                            {8, 7, "keep 0x7 of 3 links"},
                                            {8, 8, "keep 0x8 of 3 links"},
                                            {11, 1, "padding is not zero"},
                                            {15, 1, "padding is not zero"},
                                            {40, 1, "link 3 of 3 a count"}});
}
