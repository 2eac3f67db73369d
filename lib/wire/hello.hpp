// Identity hello and connection preambles (docs/PROTOCOL.md, "Bring-up").
//
// Every bring-up connection starts with a 12-byte preamble
//   u32 magic "D4TP" | u16 protocol version | u16 kind | u32 body bytes
// followed by `body bytes` of kind-specific body. Pure code: no I/O.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace ds4tp::wire {

// "D4TP" as little-endian bytes; the byte-swapped value means a peer of
// the other byte order (or a foreign protocol that happens to match).
constexpr uint32_t kMagic = 0x50543444u;
constexpr uint32_t kMagicSwapped = 0x44345450u;
constexpr uint16_t kProtocolVersion = DS4TP_PROTOCOL_VERSION;
constexpr size_t kPreambleBytes = 12;
constexpr uint32_t kMaskWords = DS4TP_GATE_MASK_WORDS;
constexpr uint32_t kBlobMax = DS4TP_ENGINE_BLOB_MAX;
constexpr size_t kHelloFixedBytes = 124;
constexpr size_t kHelloMaxBytes = kHelloFixedBytes + kBlobMax;

enum class Kind : uint16_t {
  Control = 1,     // worker -> leader and back: the identity hello
  Data = 2,        // worker -> leader on the data connection: the cookie
  DataAck = 3,     // leader -> worker: data connection accepted
  AuthNonce = 4,   // either way, keyed bring-up only: a fresh nonce
  AuthProof = 5,   // either way, keyed bring-up only: an HMAC over the transcript
  AuthReject = 6,  // leader -> worker: authentication refused, with a reason
};
constexpr uint16_t kKindMax = uint16_t(Kind::AuthReject);

// Keyed bring-up (docs/PROTOCOL.md 1.4): nonces and MACs are opaque here;
// lib/auth computes and checks them.
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

// Why a leader refused a worker's authentication (AuthReject body).
enum class RejectReason : uint32_t {
  KeyRequired = 1,    // the worker sent a plain hello; this leader has a key
  KeyUnexpected = 2,  // the worker sent a nonce; this leader has no key
  BadProof = 3,       // the worker's proof does not verify: the keys differ
  BadVersion = 4,     // a keyed leader does not judge other versions unauthenticated
};
const char *reject_reason_name(uint32_t reason);

struct Preamble {
  uint32_t magic = kMagic;
  uint16_t version = kProtocolVersion;
  uint16_t kind = 0;
  uint32_t body_bytes = 0;
};

// Transport capabilities offered in the hello.
enum : uint32_t {
  kCapTcp = 1u << 0,
  kCapShm = 1u << 1,
  kCapRdma = 1u << 2,
  // Not a transport: the rank opens a standby tcp link beside an rdma or
  // shm transport when the peer offers it too (multipath/standby.hpp).
  kCapStandby = 1u << 8,
  // The rank was given rails (tcp links to stripe big gates over): both
  // ranks must be, or neither.
  kCapRails = 1u << 9,
  // Bits 10..12: how many rdma rails the rank was given (0..7); rail k of
  // one rank pairs with rail k of the other, so the counts must match.
  kCapRdmaRailsShift = 10,
  kCapRdmaRailsMask = 7u << kCapRdmaRailsShift,
  // Not a transport: the rank names the rdma rails it found lost in its
  // resume message (wire/failover.hpp), and reads the peer's; a pair
  // where both do goes on over rdma without a lost rail.
  kCapLostLinks = 1u << 13,
  // Not a transport: the rank runs row and batch gates on the rdma rail
  // that the leader's plan names (RailPlan.row_link); unless both offer
  // it, they stay on the primary.
  kCapRailRows = 1u << 14,
  // Not a transport: a tcp pair's rails fail over with a striped big gate
  // in flight by trading what each rank wrote on them (wire::RailSync),
  // so the rails not lost stay beside the standby; unless both offer it,
  // they are shut down.
  kCapRailSync = 1u << 15,
};

struct Identity {
  uint64_t model_bytes = 0;
  uint32_t model_id = 0;
  uint32_t n_layer = 0;
  uint32_t n_embd = 0;
  uint32_t n_vocab = 0;
  uint32_t quant_bits = 0;
  uint32_t ctx_size = 0;
  uint32_t gate_slot_start = 0;
  uint32_t gate_slot_step = 0;
  uint32_t gates_per_token = 0;
  std::array<uint64_t, kMaskWords> gate_slot_mask{};
  uint64_t features = 0;
  std::vector<uint8_t> blob;
};

struct Hello {
  uint8_t role = 0;               // ds4tp_role
  uint8_t transport_request = 0;  // ds4tp_transport
  uint32_t caps = kCapTcp;
  std::array<uint8_t, 16> host_id{};  // same value = same host
  uint64_t cookie = 0;  // leader: names the pair; the data connection echoes it
  Identity id;
};

// Encodes into `out` (resized); returns total bytes (preamble included).
size_t encode_preamble(const Preamble &p, uint8_t out[kPreambleBytes]);
std::vector<uint8_t> encode_hello(const Hello &h);
// Data connection: the cookie, plus a MAC when the pair is keyed.
std::vector<uint8_t> encode_data(uint64_t cookie, const Mac *mac = nullptr);
std::vector<uint8_t> encode_data_ack(const Mac *mac = nullptr);
std::vector<uint8_t> encode_auth_nonce(const Nonce &n);
std::vector<uint8_t> encode_auth_proof(const Mac &m);
std::vector<uint8_t> encode_auth_reject(RejectReason r);

// Decoders return DS4TP_OK or a code with `err` naming the problem.
// A preamble is rejected for bad magic (EPROTO, byte order named), a body
// larger than `max_body` (EPROTO) or an unknown kind (EPROTO). The version
// is returned, not checked: the caller decides (EVERSION).
int decode_preamble(const uint8_t *buf, size_t len, size_t max_body,
                    Preamble &out, Error &err);
int decode_hello_body(const uint8_t *buf, size_t len, Hello &out, Error &err);
// A data body is 8 bytes (no key) or 8 + 32 (cookie, MAC); `has_mac`
// says which. An ack body is empty or a 32-byte MAC.
int decode_data_body(const uint8_t *buf, size_t len, uint64_t &cookie,
                     Error &err);
int decode_data_body(const uint8_t *buf, size_t len, uint64_t &cookie,
                     bool &has_mac, Mac &mac, Error &err);
int decode_data_ack_body(const uint8_t *buf, size_t len, bool &has_mac, Mac &mac,
                         Error &err);
int decode_auth_nonce_body(const uint8_t *buf, size_t len, Nonce &out, Error &err);
int decode_auth_proof_body(const uint8_t *buf, size_t len, Mac &out, Error &err);
// Unknown reasons decode fine (a newer leader may add some).
int decode_auth_reject_body(const uint8_t *buf, size_t len, uint32_t &reason,
                            Error &err);

// Compares two identities; on the first difference returns EIDENTITY with
// the field and both values in `err`. ctx_size is not compared.
int compare_identity(const Identity &local, const Identity &peer, Error &err);

}  // namespace ds4tp::wire
