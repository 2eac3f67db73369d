// The crypto seam (lib/auth/crypto.hpp) against published vectors, so each
// backend is held to the same answers: libcrypto here, CommonCrypto when
// this suite runs on a Mac. A proof pinned byte for byte shows that a rank
// on one backend and its peer on the other agree on the wire.
#include <catch2/catch.hpp>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "auth/crypto.hpp"
#include "auth/proof.hpp"

namespace crypto = ds4tp::auth::crypto;

namespace {

std::vector<uint8_t> bytes(const std::string &s) { return {s.begin(), s.end()}; }
std::vector<uint8_t> fill(uint8_t b, size_t n) { return std::vector<uint8_t>(n, b); }

std::string hex(const uint8_t *p, size_t n) {
  static const char d[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; i++) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

std::string hmac_hex(const std::vector<uint8_t> &key, const std::vector<uint8_t> &msg) {
  uint8_t out[crypto::kHmacSha256Bytes];
  REQUIRE(crypto::hmac_sha256(key.data(), key.size(), msg.data(), msg.size(), out));
  return hex(out, sizeof out);
}

}  // namespace

TEST_CASE("HMAC-SHA256 gives the RFC 4231 answers") {
  INFO("backend " << crypto::backend_name());
  std::vector<uint8_t> key25;
  for (uint8_t i = 1; i <= 25; i++) key25.push_back(i);
  // Test case 1: a 20-byte key.
  CHECK(hmac_hex(fill(0x0b, 20), bytes("Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // 2: a key shorter than the output.
  CHECK(hmac_hex(bytes("Jefe"), bytes("what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // 3 and 4: combined lengths of key and data over one block.
  CHECK(hmac_hex(fill(0xaa, 20), fill(0xdd, 50)) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  CHECK(hmac_hex(key25, fill(0xcd, 50)) ==
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // 5: the RFC gives the first 128 bits only.
  CHECK(hmac_hex(fill(0x0c, 20), bytes("Test With Truncation")).substr(0, 32) ==
        "a3b6167473100ee06e0c796c2955552b");
  // 6 and 7: a key longer than the 64-byte block is hashed first.
  CHECK(hmac_hex(fill(0xaa, 131), bytes("Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  CHECK(hmac_hex(fill(0xaa, 131),
                 bytes("This is a test using a larger than block-size key and a larger than "
                       "block-size data. The key needs to be hashed before being used by the "
                       "HMAC algorithm.")) ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST_CASE("a data proof is the same bytes whatever the backend") {
  // HMAC(key, "ds4tp/1 data" NUL | nonce W | nonce L | cookie, little-endian),
  // computed independently (Python's hmac module) when this test was written.
  const std::string k = "0123456789abcdef0123456789abcdef";
  ds4tp::auth::Key key(k.data(), k.size());
  ds4tp::auth::Transcript t;
  for (size_t i = 0; i < t.worker_nonce.size(); i++) {
    t.worker_nonce[i] = uint8_t(i);
    t.leader_nonce[i] = uint8_t(32 + i);
  }
  ds4tp::wire::Mac mac{};
  ds4tp::Error err;
  REQUIRE(ds4tp::auth::data_proof(key, t, 0x0102030405060708ull, mac, err) == DS4TP_OK);
  CHECK(hex(mac.data(), mac.size()) ==
        "bcab1a9a3dd9a9d6690b0ce9f68d135e64b5e089ded237615fb8d5d9d4c6877c");
}

TEST_CASE("random bytes, constant-time equality and wiping") {
  std::array<uint8_t, 32> a{}, b{};
  REQUIRE(crypto::random_bytes(a.data(), a.size()));
  REQUIRE(crypto::random_bytes(b.data(), b.size()));
  // Two 256-bit draws agree (or come out all zero) with probability 2^-256.
  CHECK(a != b);
  CHECK(a != std::array<uint8_t, 32>{});
  CHECK(crypto::random_bytes(a.data(), 0));

  std::array<uint8_t, 32> c = a;
  CHECK(crypto::equal(a.data(), c.data(), a.size()));
  c[31] ^= 1;
  CHECK_FALSE(crypto::equal(a.data(), c.data(), a.size()));
  c = a;
  c[0] ^= 0x80;
  CHECK_FALSE(crypto::equal(a.data(), c.data(), a.size()));
  CHECK(crypto::equal(a.data(), b.data(), 0));

  crypto::wipe(a.data(), a.size());
  CHECK(a == std::array<uint8_t, 32>{});
  crypto::wipe(nullptr, 0);
}

TEST_CASE("the backend names itself") {
  std::string name = crypto::backend_name();
#ifdef __APPLE__
  CHECK((name == "CommonCrypto" || name == "libcrypto"));
#else
  CHECK(name == "libcrypto");
#endif
}
