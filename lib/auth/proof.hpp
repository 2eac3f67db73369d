// Challenge-response for a keyed bring-up (docs/PROTOCOL.md 1.4): fresh
// nonces and HMAC-SHA256 proofs over the exact bytes both ranks exchanged,
// computed through auth/crypto.hpp (libcrypto on Linux, CommonCrypto on
// macOS). Each proof carries its own label, so
// a proof made for one purpose (or by the other role) never verifies as
// another.
#pragma once

#include <cstdint>
#include <vector>

#include "auth/key.hpp"
#include "common/error.hpp"
#include "wire/hello.hpp"

namespace ds4tp::auth {

// 32 bytes from the OS random generator (crypto::random_bytes). EIO on failure.
int fresh_nonce(wire::Nonce &out, Error &err);

// Constant-time comparison.
bool mac_equal(const wire::Mac &a, const wire::Mac &b);

// What both ranks saw on the control connection, each message whole
// (preamble included), plus the two nonces.
struct Transcript {
  std::vector<uint8_t> worker_nonce_msg;
  std::vector<uint8_t> leader_nonce_msg;
  std::vector<uint8_t> worker_hello_msg;
  std::vector<uint8_t> leader_hello_msg;
  wire::Nonce worker_nonce{};
  wire::Nonce leader_nonce{};
};

// Proofs; each returns DS4TP_OK or EIO (the crypto backend failed) in `err`.
// worker: HMAC(key, "ds4tp/1 worker proof" | nonce W | nonce L | hello W)
int worker_proof(const Key &key, const Transcript &t, wire::Mac &out, Error &err);
// leader: HMAC(key, "ds4tp/1 leader proof" | nonce W | nonce L | hello W | hello L)
int leader_proof(const Key &key, const Transcript &t, wire::Mac &out, Error &err);
// data connection: HMAC(key, "ds4tp/1 data" | nonce W body | nonce L body | cookie)
int data_proof(const Key &key, const Transcript &t, uint64_t cookie, wire::Mac &out,
               Error &err);
// data ack: HMAC(key, "ds4tp/1 data ack" | nonce W body | nonce L body | cookie)
int data_ack_proof(const Key &key, const Transcript &t, uint64_t cookie, wire::Mac &out,
                   Error &err);

}  // namespace ds4tp::auth
