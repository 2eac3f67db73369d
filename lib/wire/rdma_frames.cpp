#include "wire/rdma_frames.hpp"

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

void encode_rdma_info(const RdmaInfo &m, uint8_t out[kRdmaInfoPayload]) {
  Writer w(out, kRdmaInfoPayload);
  w.u32(m.attempt);
  w.u32(m.qp_num);
  w.u32(m.psn);
  w.u16(m.lid);
  w.u16(m.gid_index);
  w.u8(m.port);
  w.u8(m.link_layer);
  w.u8(m.mtu);
  w.u8(m.qp_type);
  w.bytes(m.gid.data(), m.gid.size());
  w.u64(m.slab_addr);
  w.u64(m.slab_bytes);
  w.u32(m.rkey);
  w.u32(m.max_msg);
  w.u32(m.send_depth);
  w.u32(m.recv_depth);
}

int decode_rdma_info(const uint8_t *buf, size_t len, RdmaInfo &out, Error &err) {
  if (len != kRdmaInfoPayload) return bad_length("RDMA_INFO", len, kRdmaInfoPayload, err);
  Reader r(buf, len);
  RdmaInfo m;
  m.attempt = r.u32();
  m.qp_num = r.u32();
  m.psn = r.u32();
  m.lid = r.u16();
  m.gid_index = r.u16();
  m.port = r.u8();
  m.link_layer = r.u8();
  m.mtu = r.u8();
  m.qp_type = r.u8();
  const uint8_t *gid = r.bytes(m.gid.size());
  if (gid != nullptr)
    for (size_t i = 0; i < m.gid.size(); i++) m.gid[i] = gid[i];
  m.slab_addr = r.u64();
  m.slab_bytes = r.u64();
  m.rkey = r.u32();
  m.max_msg = r.u32();
  m.send_depth = r.u32();
  m.recv_depth = r.u32();
  if (!r.ok()) return bad_length("RDMA_INFO", len, kRdmaInfoPayload, err);
  if (int rc = check_attempt("RDMA_INFO", m.attempt, err)) return rc;
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
  out = m;
  return DS4TP_OK;
}

void encode_rdma_ready(const RdmaReady &m, uint8_t out[kRdmaReadyPayload]) {
  put_u32(out, m.attempt);
}

int decode_rdma_ready(const uint8_t *buf, size_t len, RdmaReady &out, Error &err) {
  if (len != kRdmaReadyPayload) return bad_length("RDMA_READY", len, kRdmaReadyPayload, err);
  RdmaReady m;
  m.attempt = get_u32(buf);
  if (int rc = check_attempt("RDMA_READY", m.attempt, err)) return rc;
  out = m;
  return DS4TP_OK;
}

void encode_rdma_posted(const RdmaPosted &m, uint8_t out[kRdmaPostedPayload]) {
  put_u32(out, m.attempt);
  put_u32(out + 4, m.posted);
}

int decode_rdma_posted(const uint8_t *buf, size_t len, RdmaPosted &out, Error &err) {
  if (len != kRdmaPostedPayload) return bad_length("RDMA_POSTED", len, kRdmaPostedPayload, err);
  RdmaPosted m;
  m.attempt = get_u32(buf);
  m.posted = get_u32(buf + 4);
  if (int rc = check_attempt("RDMA_POSTED", m.attempt, err)) return rc;
  if (m.posted == 0)
    return err.set(DS4TP_EPROTO, "RDMA_POSTED announces 0 posted receives; the warm-up needs one");
  out = m;
  return DS4TP_OK;
}

void encode_rdma_warm(const RdmaWarm &m, uint8_t out[kRdmaWarmPayload]) {
  put_u32(out, m.attempt);
  put_u32(out + 4, m.flags);
  put_u32(out + 8, m.bytes);
}

int decode_rdma_warm(const uint8_t *buf, size_t len, RdmaWarm &out, Error &err) {
  if (len != kRdmaWarmPayload) return bad_length("RDMA_WARM", len, kRdmaWarmPayload, err);
  RdmaWarm m;
  m.attempt = get_u32(buf);
  m.flags = get_u32(buf + 4);
  m.bytes = get_u32(buf + 8);
  if (int rc = check_attempt("RDMA_WARM", m.attempt, err)) return rc;
  if (m.flags & ~(kWarmReceived | kWarmSent))
    return err.set(DS4TP_EPROTO, "RDMA_WARM flags 0x{:x} carry unknown bits (known: 0x3)",
                   m.flags);
  out = m;
  return DS4TP_OK;
}

}  // namespace ds4tp::wire
