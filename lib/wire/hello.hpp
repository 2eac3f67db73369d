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
  Control = 1,  // worker -> leader and back: the identity hello
  Data = 2,     // worker -> leader on the data connection: the cookie
  DataAck = 3,  // leader -> worker: data connection accepted
};

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
std::vector<uint8_t> encode_data(uint64_t cookie);
std::vector<uint8_t> encode_data_ack();

// Decoders return DS4TP_OK or a code with `err` naming the problem.
// A preamble is rejected for bad magic (EPROTO, byte order named), a body
// larger than `max_body` (EPROTO) or an unknown kind (EPROTO). The version
// is returned, not checked: the caller decides (EVERSION).
int decode_preamble(const uint8_t *buf, size_t len, size_t max_body,
                    Preamble &out, Error &err);
int decode_hello_body(const uint8_t *buf, size_t len, Hello &out, Error &err);
int decode_data_body(const uint8_t *buf, size_t len, uint64_t &cookie,
                     Error &err);

// Compares two identities; on the first difference returns EIDENTITY with
// the field and both values in `err`. ctx_size is not compared.
int compare_identity(const Identity &local, const Identity &peer, Error &err);

}  // namespace ds4tp::wire
