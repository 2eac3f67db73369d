// A pair's gate as a step of a two-member link (link.hpp): this rank is
// member 0, the peer member 1. Row and batch gates move between the slab's
// regions (a row slot's header goes in the room the slab keeps before its
// vector, so header and payload travel as one buffer over tcp), big gates
// between the caller's buffers; the header every backend checks is the
// gate's (wire/gate_header.hpp). The pair's gates, its failover's runs
// again and the tests build their steps here.
#pragma once

#include <cstdint>

#include "link/link.hpp"
#include "slab/layout.hpp"
#include "link/data_config.hpp"
#include "wire/gate_header.hpp"

namespace ds4tp::link {

// One gate's step and the storage it points into (so not copyable).
struct GateStep {
  wire::GateHeader h{};
  uint8_t own[wire::kGateHeaderBytes];
  const uint8_t *src[2] = {nullptr, nullptr};
  uint8_t *dst[2] = {nullptr, nullptr};
  const void *views[2] = {nullptr, nullptr};
  Step s;

  GateStep() = default;
  GateStep(const GateStep &) = delete;
  GateStep &operator=(const GateStep &) = delete;

  // Row gate (layer, gate) of `seq` in the slab at `base`.
  void row(uint8_t *base, const slab::Layout &l, uint32_t layer, uint32_t gate, uint64_t seq) {
    const uint32_t slot = layer * 2 + gate;
    regions(wire::GateHeader{uint16_t(wire::GateKind::Row), layer, gate, seq, l.vec_bytes},
            base + l.out_vec(slot), base + l.in_vec(slot), true);
    s.flag = base + l.in_seq_flag(slot);
  }
  // Batch gate `index` of `rows` rows: the padded run of rows (rows are
  // vec_stride apart; padding bytes are never read as data).
  void batch(uint8_t *base, const slab::Layout &l, uint32_t index, uint32_t rows, uint64_t seq) {
    const uint64_t bytes = uint64_t(rows - 1) * l.vec_stride + l.vec_bytes;
    regions(wire::GateHeader{uint16_t(wire::GateKind::Batch), index, rows, seq, bytes},
            base + l.batch_out_gate(index), base + l.batch_in_gate(index), false);
  }
  // Big gate of `bytes` each way between the caller's buffers.
  void big(uint32_t layer, uint64_t seq, const void *out, void *in, uint64_t bytes) {
    regions(wire::GateHeader{uint16_t(wire::GateKind::Big), layer, 0, seq, bytes},
            static_cast<const uint8_t *>(out), static_cast<uint8_t *>(in), false);
  }
  // The pair's deadlines for this gate's kind, from `start_ns` (the
  // caller's clock read as the gate began), and its peer's liveness.
  void waits(const DataConfig &cfg, uint64_t start_ns) {
    const bool big = h.kind == uint16_t(wire::GateKind::Big);
    s.start_ns = start_ns;
    s.arrival_ns = cfg.arrival(big);
    s.progress_ns = big ? cfg.big_gate_timeout_ns : cfg.gate_timeout_ns;
    s.peer = cfg.peer;
  }

 private:
  void regions(const wire::GateHeader &hdr, const uint8_t *out, uint8_t *in, bool room) {
    h = hdr;
    uint8_t *at = room ? const_cast<uint8_t *>(out) - wire::kGateHeaderBytes : own;
    wire::encode_gate_header(h, at);
    src[0] = src[1] = out;
    dst[1] = in;
    s = Step{};
    s.hdr = at;
    s.size = wire::kGateHeaderBytes;
    s.number = h.seq;
    s.body = h.bytes;
    s.gate = &h;
    s.src = src;
    s.dst = dst;
    s.room = room;
    s.views = views;
  }
};

}  // namespace ds4tp::link
