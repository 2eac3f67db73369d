// The few primitives the pre-shared-key handshake needs (proof.hpp,
// key.hpp), behind one small interface with one backend per platform:
//
//   crypto_libcrypto.cpp     OpenSSL's libcrypto (Linux default)
//   crypto_commoncrypto.cpp  Apple's CommonCrypto + arc4random (macOS default)
//
// Chosen at configure time (DS4TP_CRYPTO: AUTO, libcrypto or commoncrypto);
// exactly one backend is compiled in. Why CommonCrypto on a Mac and not
// Homebrew's openssl@3 or our own SHA-256: see crypto_commoncrypto.cpp.
//
// All functions are thread-safe, take no locks of ours and never block
// beyond the OS random source. No state, no globals.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ds4tp::auth::crypto {

constexpr size_t kHmacSha256Bytes = 32;

// HMAC-SHA256 (RFC 2104, FIPS 180-4) of `msg` under `key` into `out`.
// Any key length (longer than the 64-byte block is hashed first, as the RFC
// says). Returns false only when the backend reports a failure.
bool hmac_sha256(const uint8_t *key, size_t key_bytes, const uint8_t *msg, size_t msg_bytes,
                 uint8_t out[kHmacSha256Bytes]);

// `n` bytes from the OS's cryptographic random source. False on failure
// (never a partial or predictable result).
bool random_bytes(uint8_t *out, size_t n);

// Constant-time equality of two n-byte buffers: the time depends on n only.
bool equal(const uint8_t *a, const uint8_t *b, size_t n);

// Overwrites n bytes with zeros in a way the compiler may not elide.
void wipe(void *p, size_t n);

// The backend compiled in, for logs and `ds4tp probe`: "libcrypto" or
// "CommonCrypto".
const char *backend_name();

}  // namespace ds4tp::auth::crypto
