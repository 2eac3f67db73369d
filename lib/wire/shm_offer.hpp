// Shared-memory transport handshake (docs/PROTOCOL.md, "shm transport"):
// two small symmetric messages on the data connection right after
// bring-up, only when shm was negotiated. Pure code: no I/O.
//
// Every message starts with 12 bytes
//   u32 magic "D4SH" | u16 kind | u16 status | u32 body bytes
// kind 1 (offer): "my segment is called NAME and is BYTES long", or, with
// status 1, "I cannot offer one, because REASON".
// kind 2 (ready): "I mapped both segments", or status 1 with the reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace ds4tp::wire {

constexpr uint32_t kShmMagic = 0x48533444u;  // "D4SH"
constexpr size_t kShmHeaderBytes = 12;
constexpr size_t kShmNameMax = 255;
constexpr size_t kShmReasonMax = 512;
constexpr size_t kShmOfferFixedBytes = 28;
constexpr size_t kShmMaxBody = kShmOfferFixedBytes + kShmNameMax + kShmReasonMax;

enum class ShmKind : uint16_t { Offer = 1, Ready = 2 };

struct ShmHeader {
  uint16_t kind = 0;
  uint16_t status = 0;  // 0 ok, 1 not available / failed
  uint32_t body_bytes = 0;
};

struct ShmOffer {
  bool ok = false;
  uint32_t pid = 0;          // the offering process, for liveness checks
  uint64_t start_time = 0;   // its start time in clock ticks since boot (0 unknown)
  uint64_t segment_bytes = 0;
  std::string name;          // shm_open name, "/..." (empty unless ok)
  std::string reason;        // why not (empty when ok)
};

struct ShmReady {
  bool ok = false;
  std::string reason;  // why not (empty when ok)
};

// Encoders truncate over-long names/reasons to their maximum.
std::vector<uint8_t> encode_shm_offer(const ShmOffer &o);
std::vector<uint8_t> encode_shm_ready(const ShmReady &r);

// EPROTO for a short buffer, bad magic, unknown kind or status, or a body
// larger than kShmMaxBody.
int decode_shm_header(const uint8_t *buf, size_t len, ShmHeader &out, Error &err);
// Body decoders check every length against `len` exactly. An offer's name
// must start with '/' and hold only [A-Za-z0-9._-] after it.
int decode_shm_offer(const ShmHeader &h, const uint8_t *body, size_t len, ShmOffer &out,
                     Error &err);
int decode_shm_ready(const ShmHeader &h, const uint8_t *body, size_t len, ShmReady &out,
                     Error &err);

}  // namespace ds4tp::wire
