// crypto.hpp on Apple's system libraries: the macOS default.
//
// Why this and not the alternatives (issue 15: "what a Mac user gets
// without pain"):
// - CommonCrypto (CCHmac) is in every macOS since 10.4, re-exported by
//   libSystem: nothing to install, nothing extra to link, and the dylib's
//   only dependency stays /usr/lib/libSystem.B.dylib. Apple patches it with
//   the OS; it sits on corecrypto, which is FIPS 140 validated.
// - Homebrew's openssl@3 is keg-only: its path differs between Apple
//   Silicon (/opt/homebrew/opt) and Intel (/usr/local/opt), it would be
//   baked into libds4tp.dylib's load commands, and an engine shipped as an
//   app would have to bundle and re-sign libcrypto.3.dylib. Still possible
//   for whoever wants it: -DDS4TP_CRYPTO=libcrypto (crypto_libcrypto.cpp).
// - Our own SHA-256/HMAC would be testable here, but it is security code we
//   would own forever while the platform ships a vetted one.
// Nonces come from arc4random_buf: the kernel-seeded CSPRNG, no file
// descriptor, fork-safe, cannot fail (CCRandomGenerateBytes is the same
// generator with a failure path nobody could act on). timingsafe_bcmp
// (10.12.1+) and memset_s (C11 Annex K, 10.9+) are libSystem's too.
//
// Verified here by cross-compiling only (scripts/cross-macos.sh checks that
// CCHmac & co. bind to libSystem); tests/unit/test_crypto.cpp's RFC 4231 vectors
// are the first thing to run on a Mac.
#define __STDC_WANT_LIB_EXT1__ 1  // memset_s
#include "auth/crypto.hpp"

#include <CommonCrypto/CommonHMAC.h>
#include <stdlib.h>  // arc4random_buf
#include <string.h>  // memset_s, timingsafe_bcmp

namespace ds4tp::auth::crypto {

bool hmac_sha256(const uint8_t *key, size_t key_bytes, const uint8_t *msg, size_t msg_bytes,
                 uint8_t out[kHmacSha256Bytes]) {
  static_assert(kHmacSha256Bytes == CC_SHA256_DIGEST_LENGTH);
  // CCHmac has no failure mode (it returns void).
  CCHmac(kCCHmacAlgSHA256, key, key_bytes, msg, msg_bytes, out);
  return true;
}

bool random_bytes(uint8_t *out, size_t n) {
  arc4random_buf(out, n);
  return true;
}

bool equal(const uint8_t *a, const uint8_t *b, size_t n) {
  return timingsafe_bcmp(a, b, n) == 0;
}

void wipe(void *p, size_t n) {
  if (n) memset_s(p, n, 0, n);
}

const char *backend_name() { return "CommonCrypto"; }

}  // namespace ds4tp::auth::crypto
