// Header that precedes every data-plane payload on byte-stream transports
// (docs/PROTOCOL.md, "Gate header"). 32 bytes:
//   u32 magic "D4GT" | u16 kind | u16 reserved | u32 layer | u32 aux |
//   u64 seq | u64 payload bytes
// `aux` is the gate (row), the row count (batch) or 0 (big).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/error.hpp"

namespace ds4tp::wire {

constexpr uint32_t kGateMagic = 0x54473444u;  // "D4GT"
constexpr size_t kGateHeaderBytes = 32;

enum class GateKind : uint16_t { Row = 1, Batch = 2, Big = 3 };

struct GateHeader {
  uint16_t kind = 0;
  uint32_t layer = 0;
  uint32_t aux = 0;
  uint64_t seq = 0;
  uint64_t bytes = 0;

  bool operator==(const GateHeader &o) const {
    return kind == o.kind && layer == o.layer && aux == o.aux && seq == o.seq &&
           bytes == o.bytes;
  }
};

void encode_gate_header(const GateHeader &h, uint8_t out[kGateHeaderBytes]);
// EPROTO for a short buffer or bad magic. Does not compare with ours.
int decode_gate_header(const uint8_t *buf, size_t len, GateHeader &out,
                       Error &err);
// EDESYNC naming both sides' (kind, layer, aux, seq, bytes).
int check_gate_header(const GateHeader &mine, const GateHeader &peer,
                      Error &err);
// decode_gate_header of the peer's kGateHeaderBytes at `peer_bytes`, then
// check_gate_header against `mine`: what every transport does on arrival.
int check_peer_gate_header(const GateHeader &mine, const uint8_t *peer_bytes, Error &err);
const char *gate_kind_name(uint16_t kind);

}  // namespace ds4tp::wire
