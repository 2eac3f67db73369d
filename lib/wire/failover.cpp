#include "wire/failover.hpp"

#include <algorithm>
#include <cstring>

#include "wire/codec.hpp"

namespace ds4tp::wire {
namespace {

void put_reason(uint8_t *p, size_t room, const std::string &s) {
  std::memset(p, 0, room);
  std::memcpy(p, s.data(), std::min(s.size(), room - 1));
}

// Printable text up to a NUL within `room` bytes, and only NULs after it.
bool get_reason(const uint8_t *p, size_t room, std::string &out) {
  size_t n = 0;
  while (n < room && p[n] != 0) {
    if (p[n] < 0x20 || p[n] > 0x7e) return false;
    n++;
  }
  if (n == room) return false;
  for (size_t i = n; i < room; i++)
    if (p[i] != 0) return false;
  out.assign(reinterpret_cast<const char *>(p), n);
  return true;
}

bool known_kind(uint16_t k, bool none_ok) {
  return (none_ok && k == 0) || k == uint16_t(GateKind::Row) ||
         k == uint16_t(GateKind::Batch) || k == uint16_t(GateKind::Big);
}

}  // namespace

void encode_standby(const StandbyMsg &m, uint8_t out[kStandbyBytes]) {
  put_u32(out, kStandbyMagic);
  put_u16(out + 4, m.kind);
  put_u16(out + 6, m.port);
  put_u32(out + 8, m.ok ? 0 : 1);
  put_u16(out + 12, m.index);
  put_u16(out + 14, m.count);
  put_u64(out + 16, m.cookie);
  put_reason(out + 24, kStandbyBytes - 24, m.ok ? std::string() : m.reason);
}

int decode_standby(const uint8_t *buf, size_t len, StandbyMsg &out, Error &err) {
  if (len < kStandbyBytes)
    return err.set(DS4TP_EPROTO, "standby message truncated: {} of {} bytes", len,
                   kStandbyBytes);
  if (get_u32(buf) != kStandbyMagic)
    return err.set(DS4TP_EPROTO, "bad standby message magic 0x{:08x} (want 0x{:08x})",
                   get_u32(buf), kStandbyMagic);
  out.kind = get_u16(buf + 4);
  if (out.kind < uint16_t(StandbyKind::Offer) || out.kind > uint16_t(StandbyKind::Ack))
    return err.set(DS4TP_EPROTO, "unknown standby message kind {}", out.kind);
  out.port = get_u16(buf + 6);
  const uint32_t status = get_u32(buf + 8);
  if (status > 1) return err.set(DS4TP_EPROTO, "standby message status {} is not 0 or 1", status);
  out.index = get_u16(buf + 12);
  out.count = get_u16(buf + 14);
  if (out.count > kMaxLinks || (out.count != 0 && out.index >= out.count))
    return err.set(DS4TP_EPROTO, "standby message names link {} of {}", out.index, out.count);
  out.ok = status == 0;
  out.cookie = get_u64(buf + 16);
  if (!get_reason(buf + 24, kStandbyBytes - 24, out.reason))
    return err.set(DS4TP_EPROTO, "standby message reason is not NUL-terminated text");
  if (out.ok && !out.reason.empty())
    return err.set(DS4TP_EPROTO, "standby message says ok but gives a reason");
  return DS4TP_OK;
}

void encode_resume(const Resume &r, uint8_t out[kResumeBytes]) {
  put_u32(out, kResumeMagic);
  put_u16(out + 4, kResumeVersion);
  put_u16(out + 6, uint16_t((r.holds_done ? 1 : 0) | r.lost_links << 8));
  encode_gate_header(r.in_flight, out + 8);
  encode_gate_header(r.done, out + 40);
  put_reason(out + 72, kResumeBytes - 72, r.reason);
}

int decode_resume(const uint8_t *buf, size_t len, Resume &out, Error &err) {
  if (len < kResumeBytes)
    return err.set(DS4TP_EPROTO, "resume message truncated: {} of {} bytes", len, kResumeBytes);
  if (get_u32(buf) != kResumeMagic)
    return err.set(DS4TP_EPROTO, "bad resume message magic 0x{:08x} (want 0x{:08x})",
                   get_u32(buf), kResumeMagic);
  if (get_u16(buf + 4) != kResumeVersion)
    return err.set(DS4TP_EPROTO, "resume message version {} (this library speaks {})",
                   get_u16(buf + 4), kResumeVersion);
  const uint16_t flags = get_u16(buf + 6);
  if ((flags & 0xFEu) != 0)
    return err.set(DS4TP_EPROTO, "resume message flags 0x{:x} unknown", flags);
  out.holds_done = (flags & 1u) != 0;
  out.lost_links = uint8_t(flags >> 8);
  if (int rc = decode_gate_header(buf + 8, 32, out.in_flight, err)) return rc;
  if (int rc = decode_gate_header(buf + 40, 32, out.done, err)) return rc;
  if (!known_kind(out.in_flight.kind, false) || !known_kind(out.done.kind, true))
    return err.set(DS4TP_EPROTO, "resume message names gate kinds {} and {}",
                   out.in_flight.kind, out.done.kind);
  if (!get_reason(buf + 72, kResumeBytes - 72, out.reason))
    return err.set(DS4TP_EPROTO, "resume message reason is not NUL-terminated text");
  return DS4TP_OK;
}

void encode_rail_plan(const RailPlan &p, uint8_t out[kRailPlanBytes]) {
  std::memset(out, 0, kRailPlanBytes);
  put_u32(out, kRailPlanMagic);
  put_u16(out + 4, p.links);
  put_u16(out + 6, p.row_link);
  for (int i = 0; i < kMaxLinks; i++) {
    put_u16(out + 8 + 2 * i, p.share[i]);
    put_u32(out + 24 + 4 * i, p.mbit[i]);
    put_u32(out + 56 + 4 * i, p.rtt_us[i]);
  }
}

int decode_rail_plan(const uint8_t *buf, size_t len, RailPlan &out, Error &err) {
  if (len < kRailPlanBytes)
    return err.set(DS4TP_EPROTO, "rail plan truncated: {} of {} bytes", len, kRailPlanBytes);
  if (get_u32(buf) != kRailPlanMagic)
    return err.set(DS4TP_EPROTO, "bad rail plan magic 0x{:08x} (want 0x{:08x})", get_u32(buf),
                   kRailPlanMagic);
  out.links = get_u16(buf + 4);
  out.row_link = get_u16(buf + 6);
  if (out.links < 2 || out.links > kMaxLinks || out.row_link >= out.links)
    return err.set(DS4TP_EPROTO, "rail plan names {} links, row link {}", out.links, out.row_link);
  uint32_t sum = 0;
  for (int i = 0; i < kMaxLinks; i++) {
    out.share[i] = get_u16(buf + 8 + 2 * i);
    out.mbit[i] = get_u32(buf + 24 + 4 * i);
    out.rtt_us[i] = get_u32(buf + 56 + 4 * i);
    if (i >= out.links && (out.share[i] != 0 || out.mbit[i] != 0 || out.rtt_us[i] != 0))
      return err.set(DS4TP_EPROTO, "rail plan fills link {} of {}", i, out.links);
    sum += out.share[i];
  }
  if (sum != 1000) return err.set(DS4TP_EPROTO, "rail plan shares sum to {}, not 1000", sum);
  if (get_u64(buf + 88) != 0) return err.set(DS4TP_EPROTO, "rail plan padding is not zero");
  return DS4TP_OK;
}

void encode_rail_sync(const RailSync &m, uint8_t out[kRailSyncBytes]) {
  std::memset(out, 0, kRailSyncBytes);
  put_u32(out, kRailSyncMagic);
  put_u16(out + 4, m.stage);
  put_u16(out + 6, m.links);
  put_u16(out + 8, m.keep);
  for (int i = 0; i < kMaxLinks; i++) put_u64(out + 16 + 8 * i, m.sent[i]);
}

int decode_rail_sync(const uint8_t *buf, size_t len, RailSync &out, Error &err) {
  if (len < kRailSyncBytes)
    return err.set(DS4TP_EPROTO, "rail counts truncated: {} of {} bytes", len, kRailSyncBytes);
  if (get_u32(buf) != kRailSyncMagic)
    return err.set(DS4TP_EPROTO, "bad rail counts magic 0x{:08x} (want 0x{:08x})", get_u32(buf),
                   kRailSyncMagic);
  out.stage = get_u16(buf + 4);
  out.links = get_u16(buf + 6);
  out.keep = get_u16(buf + 8);
  if (out.stage != 1 && out.stage != 2)
    return err.set(DS4TP_EPROTO, "rail counts stage {} is not 1 or 2", out.stage);
  if (out.links < 2 || out.links > kMaxLinks || (out.keep & 1u) != 0 ||
      (out.keep >> out.links) != 0)
    return err.set(DS4TP_EPROTO, "rail counts keep 0x{:x} of {} links", out.keep, out.links);
  if (get_u16(buf + 10) != 0 || get_u32(buf + 12) != 0)
    return err.set(DS4TP_EPROTO, "rail counts padding is not zero");
  for (int i = 0; i < kMaxLinks; i++) {
    out.sent[i] = get_u64(buf + 16 + 8 * i);
    if (out.sent[i] != 0 && (i >= out.links || out.stage == 2))
      return err.set(DS4TP_EPROTO, "rail counts give link {} of {} a count at stage {}", i,
                     out.links, out.stage);
  }
  return DS4TP_OK;
}

}  // namespace ds4tp::wire
