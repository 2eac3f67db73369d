#include "wire/rdma_frames.hpp"

#include <cstring>

#include <algorithm>

#include "wire/codec.hpp"

namespace ds4tp::wire {

namespace {

int bad_length(const char *frame, size_t len, size_t want, Error &err) {
  return err.set(DS4TP_EPROTO, "{} frame has {} bytes; it must have exactly {}", frame, len,
                 want);
}

int check_attempt(const char *frame, uint32_t attempt, Error &err) {
  if (attempt > kMaxSetupAttempt)
    return err.set(DS4TP_EPROTO, "{} frame names set-up attempt {}; at most {} exist", frame,
                   attempt, kMaxSetupAttempt);
  return DS4TP_OK;
}

}  // namespace

const char *qp_type_name(uint8_t t) {
  switch (t) {
    case kQpRc: return "RC";
    case kQpUc: return "UC";
    default: return "?";
  }
}

// Each payload's fields in wire order: one list serves its encoder and its
// decoder (wire/codec.hpp).
constexpr auto kInfoLayout =
    layout(&RdmaInfo::attempt, &RdmaInfo::qp_num, &RdmaInfo::psn, &RdmaInfo::lid,
           &RdmaInfo::gid_index, &RdmaInfo::port, &RdmaInfo::link_layer, &RdmaInfo::mtu,
           &RdmaInfo::qp_type, &RdmaInfo::gid, &RdmaInfo::slab_addr, &RdmaInfo::slab_bytes,
           &RdmaInfo::rkey, &RdmaInfo::max_msg, &RdmaInfo::send_depth, &RdmaInfo::recv_depth);
constexpr auto kReadyLayout = layout(&RdmaReady::attempt);
constexpr auto kPostedLayout = layout(&RdmaPosted::attempt, &RdmaPosted::posted);
constexpr auto kWarmLayout = layout(&RdmaWarm::attempt, &RdmaWarm::flags, &RdmaWarm::bytes);
static_assert(layout_bytes(kInfoLayout) == kRdmaInfoPayload);
static_assert(layout_bytes(kReadyLayout) == kRdmaReadyPayload);
static_assert(layout_bytes(kPostedLayout) == kRdmaPostedPayload);
static_assert(layout_bytes(kWarmLayout) == kRdmaWarmPayload);

namespace {

template <class M, class L>
void encode_by(const M &m, const L &l, uint8_t *out) {
  Writer w(out, layout_bytes(l));
  write(w, m, l);
}

template <class M>
int no_rules(const M &, Error &) {
  return DS4TP_OK;
}

// Checks the exact length, reads a copy by its layout, checks the attempt
// number every set-up frame carries and then the frame's own `rules`;
// `out` is written only when all pass.
template <class M, class L, class Rules = int (*)(const M &, Error &)>
int decode_by(const char *frame, const uint8_t *buf, size_t len, M &out, const L &l, Error &err,
              Rules rules = no_rules<M>) {
  if (len != layout_bytes(l)) return bad_length(frame, len, layout_bytes(l), err);
  Reader r(buf, len);
  M m;
  read(r, m, l);
  if (int rc = check_attempt(frame, m.attempt, err)) return rc;
  if (int rc = rules(m, err)) return rc;
  out = m;
  return DS4TP_OK;
}

int info_rules(const RdmaInfo &m, Error &err) {
  if (m.qp_num == 0 || m.qp_num > 0xFFFFFFu)
    return err.set(DS4TP_EPROTO, "RDMA_INFO queue pair number {} is not a nonzero 24-bit value",
                   m.qp_num);
  if (m.psn > 0xFFFFFFu)
    return err.set(DS4TP_EPROTO, "RDMA_INFO packet sequence number {} exceeds 24 bits", m.psn);
  if (m.port == 0) return err.set(DS4TP_EPROTO, "RDMA_INFO port is 0; ports start at 1");
  if (m.link_layer > kLinkEthernet)
    return err.set(DS4TP_EPROTO, "RDMA_INFO link layer {} is not 0, 1 (InfiniBand) or 2 (Ethernet)",
                   m.link_layer);
  if (m.mtu < 1 || m.mtu > 5)
    return err.set(DS4TP_EPROTO, "RDMA_INFO MTU code {} is outside 1..5 (256..4096 bytes)", m.mtu);
  if (m.qp_type != kQpRc && m.qp_type != kQpUc)
    return err.set(DS4TP_EPROTO, "RDMA_INFO queue pair type {} is neither 1 (RC) nor 2 (UC)",
                   m.qp_type);
  if (m.slab_bytes == 0) return err.set(DS4TP_EPROTO, "RDMA_INFO registers an empty slab");
  if (m.slab_addr + m.slab_bytes < m.slab_addr)
    return err.set(DS4TP_EPROTO, "RDMA_INFO slab 0x{:x} + {} bytes wraps the address space",
                   m.slab_addr, m.slab_bytes);
  if (m.max_msg < 64)
    return err.set(DS4TP_EPROTO, "RDMA_INFO maximum message {} bytes is below 64", m.max_msg);
  if (m.send_depth == 0 || m.recv_depth == 0)
    return err.set(DS4TP_EPROTO, "RDMA_INFO queue depths send {} / receive {} must be nonzero",
                   m.send_depth, m.recv_depth);
  return DS4TP_OK;
}

int posted_rules(const RdmaPosted &m, Error &err) {
  if (m.posted == 0)
    return err.set(DS4TP_EPROTO, "RDMA_POSTED announces 0 posted receives; the warm-up needs one");
  return DS4TP_OK;
}

int warm_rules(const RdmaWarm &m, Error &err) {
  if (m.flags & ~(kWarmReceived | kWarmSent))
    return err.set(DS4TP_EPROTO, "RDMA_WARM flags 0x{:x} carry unknown bits (known: 0x3)",
                   m.flags);
  return DS4TP_OK;
}

}  // namespace

void encode_rdma_info(const RdmaInfo &m, uint8_t out[kRdmaInfoPayload]) {
  encode_by(m, kInfoLayout, out);
}
void encode_rdma_ready(const RdmaReady &m, uint8_t out[kRdmaReadyPayload]) {
  encode_by(m, kReadyLayout, out);
}
void encode_rdma_posted(const RdmaPosted &m, uint8_t out[kRdmaPostedPayload]) {
  encode_by(m, kPostedLayout, out);
}
void encode_rdma_warm(const RdmaWarm &m, uint8_t out[kRdmaWarmPayload]) {
  encode_by(m, kWarmLayout, out);
}

int decode_rdma_info(const uint8_t *buf, size_t len, RdmaInfo &out, Error &err) {
  return decode_by("RDMA_INFO", buf, len, out, kInfoLayout, err, info_rules);
}
int decode_rdma_ready(const uint8_t *buf, size_t len, RdmaReady &out, Error &err) {
  return decode_by("RDMA_READY", buf, len, out, kReadyLayout, err);
}
int decode_rdma_posted(const uint8_t *buf, size_t len, RdmaPosted &out, Error &err) {
  return decode_by("RDMA_POSTED", buf, len, out, kPostedLayout, err, posted_rules);
}
int decode_rdma_warm(const uint8_t *buf, size_t len, RdmaWarm &out, Error &err) {
  return decode_by("RDMA_WARM", buf, len, out, kWarmLayout, err, warm_rules);
}

size_t encode_link_status(bool can, const std::string &reason, uint8_t out[kLinkStatusMax]) {
  out[0] = can ? kLinkCan : kLinkCannot;
  if (can) return 1;
  const size_t n = std::min<size_t>(reason.size(), 255);
  out[1] = uint8_t(n);
  std::memcpy(out + 2, reason.data(), n);
  return 2 + n;
}

int decode_link_status(const uint8_t *buf, size_t len, bool &can, std::string &reason,
                       size_t &need, Error &err) {
  need = 1;
  if (len < 1) return DS4TP_OK;
  if (buf[0] != kLinkCan && buf[0] != kLinkCannot)
    return err.set(DS4TP_EPROTO, "rdma link status byte {:#04x} (neither 'R' nor 'N')", buf[0]);
  can = buf[0] == kLinkCan;
  if (can) return DS4TP_OK;
  need = 2;
  if (len < 2) return DS4TP_OK;
  need = 2 + size_t(buf[1]);
  if (len >= need) reason.assign(reinterpret_cast<const char *>(buf + 2), buf[1]);
  return DS4TP_OK;
}

}  // namespace ds4tp::wire
