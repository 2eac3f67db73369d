#include "wire/shm_offer.hpp"

#include <algorithm>

#include "wire/codec.hpp"

namespace ds4tp::wire {

namespace {

std::vector<uint8_t> with_header(ShmKind kind, bool ok, const std::vector<uint8_t> &body) {
  std::vector<uint8_t> out(kShmHeaderBytes + body.size());
  put_u32(out.data(), kShmMagic);
  put_u16(out.data() + 4, uint16_t(kind));
  put_u16(out.data() + 6, ok ? 0 : 1);
  put_u32(out.data() + 8, uint32_t(body.size()));
  std::copy(body.begin(), body.end(), out.begin() + kShmHeaderBytes);
  return out;
}

bool valid_name(const std::string &n) {
  if (n.size() < 2 || n[0] != '/') return false;
  for (size_t i = 1; i < n.size(); i++) {
    char c = n[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return n != "/." && n != "/..";
}

}  // namespace

std::vector<uint8_t> encode_shm_offer(const ShmOffer &o) {
  const size_t n = o.ok ? std::min(o.name.size(), kShmNameMax) : 0;
  const size_t m = o.ok ? 0 : std::min(o.reason.size(), kShmReasonMax);
  std::vector<uint8_t> body(kShmOfferFixedBytes + n + m);
  Writer w(body.data(), body.size());
  w.u32(o.pid);
  w.u32(0);
  w.u64(o.start_time);
  w.u64(o.segment_bytes);
  w.u16(uint16_t(n));
  w.u16(uint16_t(m));
  w.bytes(o.name.data(), n);
  w.bytes(o.reason.data(), m);
  return with_header(ShmKind::Offer, o.ok, body);
}

std::vector<uint8_t> encode_shm_ready(const ShmReady &r) {
  const size_t m = r.ok ? 0 : std::min(r.reason.size(), kShmReasonMax);
  std::vector<uint8_t> body(2 + m);
  Writer w(body.data(), body.size());
  w.u16(uint16_t(m));
  w.bytes(r.reason.data(), m);
  return with_header(ShmKind::Ready, r.ok, body);
}

int decode_shm_header(const uint8_t *buf, size_t len, ShmHeader &out, Error &err) {
  if (len < kShmHeaderBytes)
    return err.set(DS4TP_EPROTO, "shm handshake header truncated: {} of {} bytes", len,
                   kShmHeaderBytes);
  uint32_t magic = get_u32(buf);
  if (magic != kShmMagic)
    return err.set(DS4TP_EPROTO, "bad shm handshake magic 0x{:08x} (want 0x{:08x})", magic,
                   kShmMagic);
  out.kind = get_u16(buf + 4);
  out.status = get_u16(buf + 6);
  out.body_bytes = get_u32(buf + 8);
  if (out.kind != uint16_t(ShmKind::Offer) && out.kind != uint16_t(ShmKind::Ready))
    return err.set(DS4TP_EPROTO, "unknown shm handshake message kind {}", out.kind);
  if (out.status > 1)
    return err.set(DS4TP_EPROTO, "unknown shm handshake status {}", out.status);
  if (out.body_bytes > kShmMaxBody)
    return err.set(DS4TP_EPROTO, "shm handshake body of {} bytes exceeds the {} byte limit",
                   out.body_bytes, kShmMaxBody);
  return DS4TP_OK;
}

int decode_shm_offer(const ShmHeader &h, const uint8_t *body, size_t len, ShmOffer &out,
                     Error &err) {
  if (h.kind != uint16_t(ShmKind::Offer))
    return err.set(DS4TP_EPROTO, "expected an shm offer (kind 1), got kind {}", h.kind);
  if (len < kShmOfferFixedBytes)
    return err.set(DS4TP_EPROTO, "shm offer truncated: {} of at least {} bytes", len,
                   kShmOfferFixedBytes);
  Reader r(body, len);
  out = ShmOffer{};
  out.ok = h.status == 0;
  out.pid = r.u32();
  r.u32();  // reserved
  out.start_time = r.u64();
  out.segment_bytes = r.u64();
  size_t n = r.u16(), m = r.u16();
  if (n > kShmNameMax || m > kShmReasonMax || kShmOfferFixedBytes + n + m != len)
    return err.set(DS4TP_EPROTO,
                   "shm offer lengths do not add up: name {} and reason {} bytes in a {} byte "
                   "body",
                   n, m, len);
  const uint8_t *name = r.bytes(n);
  const uint8_t *reason = r.bytes(m);
  if (!r.ok()) return err.set(DS4TP_EPROTO, "shm offer truncated");
  out.name.assign(reinterpret_cast<const char *>(name), n);
  out.reason.assign(reinterpret_cast<const char *>(reason), m);
  if (out.ok) {
    if (!valid_name(out.name))
      return err.set(DS4TP_EPROTO, "shm offer names an invalid segment \"{}\"", out.name);
    if (m != 0) return err.set(DS4TP_EPROTO, "a successful shm offer carries a reason");
  } else if (n != 0) {
    return err.set(DS4TP_EPROTO, "a refused shm offer names a segment");
  }
  return DS4TP_OK;
}

int decode_shm_ready(const ShmHeader &h, const uint8_t *body, size_t len, ShmReady &out,
                     Error &err) {
  if (h.kind != uint16_t(ShmKind::Ready))
    return err.set(DS4TP_EPROTO, "expected an shm ready message (kind 2), got kind {}", h.kind);
  if (len < 2) return err.set(DS4TP_EPROTO, "shm ready message truncated: {} of 2 bytes", len);
  Reader r(body, len);
  size_t m = r.u16();
  if (m > kShmReasonMax || 2 + m != len)
    return err.set(DS4TP_EPROTO, "shm ready message: reason of {} bytes in a {} byte body", m,
                   len);
  const uint8_t *reason = r.bytes(m);
  if (!r.ok()) return err.set(DS4TP_EPROTO, "shm ready message truncated");
  out.ok = h.status == 0;
  out.reason.assign(reinterpret_cast<const char *>(reason), m);
  if (out.ok && m != 0) return err.set(DS4TP_EPROTO, "a successful shm ready carries a reason");
  return DS4TP_OK;
}

}  // namespace ds4tp::wire
