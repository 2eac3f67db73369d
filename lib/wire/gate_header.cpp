#include "wire/gate_header.hpp"

#include "wire/codec.hpp"

namespace ds4tp::wire {

void encode_gate_header(const GateHeader &h, uint8_t out[kGateHeaderBytes]) {
  put_u32(out, kGateMagic);
  put_u16(out + 4, h.kind);
  put_u16(out + 6, 0);
  put_u32(out + 8, h.layer);
  put_u32(out + 12, h.aux);
  put_u64(out + 16, h.seq);
  put_u64(out + 24, h.bytes);
}

int decode_gate_header(const uint8_t *buf, size_t len, GateHeader &out,
                       Error &err) {
  if (len < kGateHeaderBytes)
    return err.set(DS4TP_EPROTO, "gate header truncated: {} of {} bytes", len,
                   kGateHeaderBytes);
  uint32_t magic = get_u32(buf);
  if (magic != kGateMagic)
    return err.set(DS4TP_EPROTO, "bad gate header magic 0x{:08x} (want 0x{:08x})",
                   magic, kGateMagic);
  out.kind = get_u16(buf + 4);
  out.layer = get_u32(buf + 8);
  out.aux = get_u32(buf + 12);
  out.seq = get_u64(buf + 16);
  out.bytes = get_u64(buf + 24);
  return DS4TP_OK;
}

const char *gate_kind_name(uint16_t kind) {
  switch (kind) {
    case uint16_t(GateKind::Row): return "gate";
    case uint16_t(GateKind::Batch): return "batch gate";
    case uint16_t(GateKind::Big): return "big gate";
    default: return "unknown gate";
  }
}

int check_gate_header(const GateHeader &m, const GateHeader &p, Error &err) {
  if (m == p) return DS4TP_OK;
  return err.set(DS4TP_EDESYNC,
                 "ranks out of lockstep: this rank is at {} (layer {}, {} {}, seq {}, "
                 "{} bytes) but the peer sent {} (layer {}, {} {}, seq {}, {} bytes)",
                 gate_kind_name(m.kind), m.layer,
                 m.kind == uint16_t(GateKind::Batch) ? "rows" : "gate", m.aux, m.seq,
                 m.bytes, gate_kind_name(p.kind), p.layer,
                 p.kind == uint16_t(GateKind::Batch) ? "rows" : "gate", p.aux, p.seq,
                 p.bytes);
}

int check_peer_gate_header(const GateHeader &mine, const uint8_t *peer_bytes, Error &err) {
  GateHeader peer;
  if (int rc = decode_gate_header(peer_bytes, kGateHeaderBytes, peer, err)) return rc;
  return check_gate_header(mine, peer, err);
}

}  // namespace ds4tp::wire
