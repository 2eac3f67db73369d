// The failover messages (docs/PROTOCOL.md, "Failover"). Pure code: no I/O.
//
// Standby set-up, right after the primary transport's set-up, only when
// both hellos carry kCapStandby: four 128-byte messages
//   u32 magic "D4SB" | u16 kind | u16 port | u32 status | u32 reserved |
//   u64 cookie | 104 bytes reason (NUL-padded)
//   1 offer  (leader, data connection): "dial me at PORT", or status 1
//            and why not;
//   2 dialed (worker, data connection): "I connected", or status 1 and why not;
//   3 proof  (worker, standby link): the pair cookie;
//   4 ack    (leader, standby link): "the standby link is this pair's".
//
// Resume, the first bytes on the standby link once a rank gave up on the
// primary, 256 bytes:
//   u32 magic "D4RS" | u16 version | u16 flags | gate header (32 bytes):
//   the gate this rank is in | gate header: the last gate it completed
//   (kind 0: none) | 184 bytes reason (NUL-padded)
// flags bit 0: this rank still holds its partial of the completed gate
// (it can send it again).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.hpp"
#include "wire/gate_header.hpp"

namespace ds4tp::wire {

constexpr uint32_t kStandbyMagic = 0x42533444u;  // "D4SB"
constexpr uint32_t kResumeMagic = 0x53523444u;   // "D4RS"
constexpr size_t kStandbyBytes = 128;
constexpr size_t kResumeBytes = 256;
constexpr size_t kStandbyReasonMax = 103;  // + NUL
constexpr size_t kResumeReasonMax = 183;
constexpr uint16_t kResumeVersion = 1;

enum class StandbyKind : uint16_t { Offer = 1, Dialed = 2, Proof = 3, Ack = 4 };

struct StandbyMsg {
  uint16_t kind = 0;
  uint16_t port = 0;
  bool ok = true;
  uint64_t cookie = 0;
  std::string reason;  // why not (status 1)
};

struct Resume {
  GateHeader in_flight;  // the gate this rank is in
  GateHeader done;       // the last gate it completed (kind 0: none)
  bool holds_done = false;  // its partial of `done` is still where it was
  std::string reason;       // why this rank left the primary
};

// Encoders truncate an over-long reason.
void encode_standby(const StandbyMsg &m, uint8_t out[kStandbyBytes]);
void encode_resume(const Resume &r, uint8_t out[kResumeBytes]);
// EPROTO for a short buffer, a bad magic, version, kind or status, a gate
// of an unknown kind, or a reason that is not NUL-terminated text.
int decode_standby(const uint8_t *buf, size_t len, StandbyMsg &out, Error &err);
int decode_resume(const uint8_t *buf, size_t len, Resume &out, Error &err);

}  // namespace ds4tp::wire
