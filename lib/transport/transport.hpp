// The data-plane interface every transport implements (tcp/, shm/, rdma/).
// Each backend is built through its descriptor (descriptor.hpp), and every
// wait inside a gate goes through os::Waiter (os/wait.hpp): spin, then
// block, ended by the deadline or the peer's death.
//
// Ownership: the pair owns the transport; the transport owns the data
// connection and borrows the slab (base + layout) between attach() and
// detach(). Threading: all gate calls come from one thread at a time (the
// engine's gate thread); attach and detach are never concurrent with a
// gate. Every call blocks until done or until its deadline, and gates
// never allocate, log or lock on success (attach may: it sets up).
#pragma once

#include <cstdint>

#include "common/error.hpp"
#include "slab/layout.hpp"

namespace ds4tp {

// Deadlines and wait policy a transport applies.
struct DataConfig {
  uint64_t gate_timeout_ns = 0;      // without progress, inside a gate
  uint64_t big_gate_timeout_ns = 0;  // waiting for the peer to reach a big gate
  uint64_t spin_ns = 0;              // busy-poll before blocking
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char *name() const = 0;

  // Starts using the slab at `base` laid out as `layout`.
  virtual int attach(uint8_t *base, const slab::Layout &layout, Error &err) = 0;
  // Stops using the slab; no gate may follow until the next attach.
  virtual void detach() = 0;
  // A slab the transport allocated in memory the peer reaches directly
  // (shm: this rank's segment), which ds4tp_attach_slab(pair, NULL, 0)
  // hands out instead of private memory; nullptr when it has none.
  // Owned by the transport, page-aligned, layout.total bytes.
  virtual uint8_t *shared_slab() { return nullptr; }

  // Row gate: out[slot] to the peer's in[slot]; returns once the peer's
  // partial for the same (layer, gate, seq) landed in in[slot].
  virtual int gate(uint32_t layer, uint32_t gate, uint32_t slot, uint64_t seq,
                   Error &err) = 0;
  // Batch gate: `rows` vectors of batch gate `index`.
  virtual int batch_gate(uint32_t index, uint32_t rows, uint64_t seq,
                         Error &err) = 0;
  // Big gate: `bytes` from `out` to the peer, the peer's into `in`.
  virtual int big_gate(uint32_t layer, uint64_t seq, const void *out, void *in,
                       uint64_t bytes, Error &err) = 0;
};

}  // namespace ds4tp
