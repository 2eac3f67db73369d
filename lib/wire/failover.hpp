// The messages that open a pair's extra tcp links (its standby link, its
// rails) and resume on them (docs/PROTOCOL.md section 6). Pure code: no I/O.
//
// Link set-up, right after the transport's set-up, on the data
// connection and the new links: 256-byte messages
//   u32 magic "D4SB" | u16 kind | u16 port | u32 status | u16 index |
//   u16 count | u64 cookie | 232 bytes reason (NUL-padded)
//   1 offer  (leader, data connection): "dial me at PORT" for `count`
//            links, or status 1 and why not;
//   2 dialed (worker, data connection): "I connected", or status 1 and why not;
//   3 proof  (worker, each new link): the pair cookie and the link's index;
//   4 ack    (leader, data connection): "the links are this pair's", or
//            status 1 and why not (rails reached in another order).
//
// Resume, the first bytes on the standby link once a rank gave up on the
// primary, 256 bytes:
//   u32 magic "D4RS" | u16 version | u16 flags | gate header (32 bytes):
//   the gate this rank is in | gate header: the last gate it completed
//   (kind 0: none) | 184 bytes reason (NUL-padded)
// flags bit 0: this rank still holds its partial of the completed gate
// (it can send it again); bits 8..15: the links of an rdma pair with
// rails that this rank found lost (bit 8 + k: link k, 0 the primary;
// set only where both ranks' hellos carry kCapLostLinks: a peer that
// does not read these bits never meets them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.hpp"
#include "wire/gate_header.hpp"

namespace ds4tp::wire {

constexpr uint32_t kStandbyMagic = 0x42533444u;  // "D4SB"
constexpr uint32_t kResumeMagic = 0x53523444u;   // "D4RS"
constexpr size_t kStandbyBytes = 256;
constexpr size_t kResumeBytes = 256;
constexpr size_t kStandbyReasonMax = 231;  // + NUL
constexpr size_t kResumeReasonMax = 183;
constexpr uint16_t kResumeVersion = 1;

enum class StandbyKind : uint16_t { Offer = 1, Dialed = 2, Proof = 3, Ack = 4 };

struct StandbyMsg {
  uint16_t kind = 0;
  uint16_t port = 0;
  bool ok = true;
  uint16_t index = 0;  // proof: which link this is
  uint16_t count = 0;  // offer: how many links
  uint64_t cookie = 0;
  std::string reason;  // why not (status 1)
};

// The leader's plan for a pair's rails (tcp links beside the data
// connection, link 0): which link carries row and batch gates, and each
// link's share of a big gate in thousandths, from what it measured.
// 96 bytes: u32 magic "D4RP" | u16 links (2..8) | u16 row link |
// u16 share[8] (the first `links` sum to 1000, the rest 0) | u32 rate in
// Mbit/s [8] | u32 round trip in us [8] (what was measured: for the
// worker's log and ds4tp_links; 0 past `links`) | 8 bytes zero.
constexpr uint32_t kRailPlanMagic = 0x50523444u;  // "D4RP"
constexpr size_t kRailPlanBytes = 96;
constexpr int kMaxLinks = 8;
struct RailPlan {
  uint16_t links = 0;
  uint16_t row_link = 0;
  uint16_t share[kMaxLinks] = {};
  uint32_t mbit[kMaxLinks] = {};
  uint32_t rtt_us[kMaxLinks] = {};
};
void encode_rail_plan(const RailPlan &p, uint8_t out[kRailPlanBytes]);
// EPROTO for a short buffer, a bad magic, a link count outside 2..8, a row
// link outside them, shares that do not sum to 1000, or nonzero padding.
int decode_rail_plan(const uint8_t *buf, size_t len, RailPlan &out, Error &err);

struct Resume {
  GateHeader in_flight;  // the gate this rank is in
  GateHeader done;       // the last gate it completed (kind 0: none)
  bool holds_done = false;  // its partial of `done` is still where it was
  uint8_t lost_links = 0;   // bit k: link k found lost (rdma rails)
  std::string reason;       // why this rank left the primary
};

// Rail counts, on the standby link right after the resume messages, where
// a tcp pair's rails fail over with a striped big gate in flight and both
// hellos carry kCapRailSync (docs/PROTOCOL.md 6.2). 80 bytes:
//   u32 magic "D4RC" | u16 stage | u16 links (2..8) | u16 keep |
//   6 bytes zero | u64 sent[8]
// Stage 1: `keep`, the rails (bit k: link k, never link 0) this rank can
// keep, and sent[k], the bytes it wrote on link k since the striped links
// began (bring-up, or the failover that kept them; 0 past `links`). Stage 2: the rails it kept once it read what the
// peer wrote on them (sent all 0).
constexpr uint32_t kRailSyncMagic = 0x43523444u;  // "D4RC"
constexpr size_t kRailSyncBytes = 80;
struct RailSync {
  uint16_t stage = 1;
  uint16_t links = 0;
  uint16_t keep = 0;
  uint64_t sent[kMaxLinks] = {};
};
void encode_rail_sync(const RailSync &m, uint8_t out[kRailSyncBytes]);
// EPROTO for a short buffer, a bad magic or stage, a link count outside
// 2..8, keep naming link 0 or a link past `links`, counts past `links` or
// in stage 2, or nonzero padding.
int decode_rail_sync(const uint8_t *buf, size_t len, RailSync &out, Error &err);

// Encoders truncate an over-long reason.
void encode_standby(const StandbyMsg &m, uint8_t out[kStandbyBytes]);
void encode_resume(const Resume &r, uint8_t out[kResumeBytes]);
// EPROTO for a short buffer, a bad magic, version, kind or status, a gate
// of an unknown kind, or a reason that is not NUL-terminated text.
int decode_standby(const uint8_t *buf, size_t len, StandbyMsg &out, Error &err);
int decode_resume(const uint8_t *buf, size_t len, Resume &out, Error &err);

}  // namespace ds4tp::wire
