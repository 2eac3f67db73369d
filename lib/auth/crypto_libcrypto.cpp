// crypto.hpp on OpenSSL's libcrypto: the Linux default (libssl-dev is a
// build dependency there anyway, FIPS-validated builds exist, and every
// distribution patches it). Also usable on a Mac with Homebrew's openssl@3
// (-DDS4TP_CRYPTO=libcrypto -DOPENSSL_ROOT_DIR=$(brew --prefix openssl@3)).
#include "auth/crypto.hpp"

#include <climits>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace ds4tp::auth::crypto {

bool hmac_sha256(const uint8_t *key, size_t key_bytes, const uint8_t *msg, size_t msg_bytes,
                 uint8_t out[kHmacSha256Bytes]) {
  if (key_bytes > size_t(INT_MAX)) return false;
  unsigned len = 0;
  // HMAC() accepts a NULL key only with length 0; give it a valid pointer.
  static const uint8_t kNoKey = 0;
  const unsigned char *r = HMAC(EVP_sha256(), key_bytes ? key : &kNoKey, int(key_bytes), msg,
                                msg_bytes, out, &len);
  return r != nullptr && len == kHmacSha256Bytes;
}

bool random_bytes(uint8_t *out, size_t n) {
  // RAND_bytes takes an int: ask in chunks (nonces are 32 bytes anyway).
  while (n > 0) {
    int chunk = n > size_t(INT_MAX) ? INT_MAX : int(n);
    if (RAND_bytes(out, chunk) != 1) return false;
    out += chunk;
    n -= size_t(chunk);
  }
  return true;
}

bool equal(const uint8_t *a, const uint8_t *b, size_t n) { return CRYPTO_memcmp(a, b, n) == 0; }

void wipe(void *p, size_t n) {
  if (n) OPENSSL_cleanse(p, n);
}

const char *backend_name() { return "libcrypto"; }

}  // namespace ds4tp::auth::crypto
