// A pair's three gates on a two-member link, as the pair runs them
// (link/gate_step.hpp), for tests that drive a link without a pair.
#pragma once

#include <cstdint>

#include "link/gate_step.hpp"

namespace ds4tp::test {

inline int row_gate(link::Link &l, uint8_t *base, const slab::Layout &L, const DataConfig &cfg,
                    uint32_t layer, uint32_t gate, uint64_t seq, uint64_t start_ns, Error &err) {
  link::GateStep g;
  g.row(base, L, layer, gate, seq);
  g.waits(cfg, start_ns);
  return l.step(g.s, err);
}

inline int batch_gate(link::Link &l, uint8_t *base, const slab::Layout &L, const DataConfig &cfg,
                      uint32_t index, uint32_t rows, uint64_t seq, uint64_t start_ns,
                      Error &err) {
  link::GateStep g;
  g.batch(base, L, index, rows, seq);
  g.waits(cfg, start_ns);
  return l.step(g.s, err);
}

inline int big_gate(link::Link &l, const DataConfig &cfg, uint32_t layer, uint64_t seq,
                    const void *out, void *in, uint64_t bytes, uint64_t start_ns, Error &err) {
  link::GateStep g;
  g.big(layer, seq, out, in, bytes);
  g.waits(cfg, start_ns);
  return l.step(g.s, err);
}

}  // namespace ds4tp::test
