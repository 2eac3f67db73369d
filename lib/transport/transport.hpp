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

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/error.hpp"
#include "net/socket.hpp"
#include "slab/layout.hpp"

namespace ds4tp {

namespace talk { struct PeerState; }

// A wait blocked in poll() wakes this often to read the peer's liveness
// verdict (talk::PeerState), whatever the transport.
constexpr int kLivenessSliceMs = 20;

// Deadlines and wait policy a transport applies.
//
// Waiting for the peer to reach a gate (none of its bytes or words seen
// yet) is bounded by arrival_ns: a live peer may be that late (a slow
// prefill), while a silent one ends the wait sooner through `peer`'s
// verdict (os::PeerWatch). Once the peer is in the gate, a stretch without
// progress is bounded by gate_timeout_ns (row and batch gates) or
// big_gate_timeout_ns (big gates), which are also the shortest arrival
// wait. Without a PeerState (arrival_ns 0) there is no liveness: the
// arrival wait is then the progress deadline of the gate's kind, as
// before heartbeats.
struct DataConfig {
  uint64_t gate_timeout_ns = 0;      // row/batch gate: without progress, once met
  uint64_t big_gate_timeout_ns = 0;  // big gate: without progress, once met
  uint64_t arrival_ns = 0;           // 0: as above; os::kNoDeadline: unlimited
  const talk::PeerState *peer = nullptr;  // owned by the pair; outlives the transport
  uint64_t spin_ns = 0;              // busy-poll before blocking
  bool adaptive_spin = false;        // spin_ns is the cap of a learned window
                                     // (os::SpinBudget, one per transport)

  // The arrival wait of a gate kind: never shorter than its progress
  // deadline, so the old options stay floors.
  uint64_t arrival(bool big) const {
    uint64_t floor = big ? big_gate_timeout_ns : gate_timeout_ns;
    return arrival_ns > floor ? arrival_ns : floor;
  }
};

// One data link of a pair, as ds4tp_links reports it.
struct LinkInfo {
  int transport = 0;  // DS4TP_TRANSPORT_*
  int role = 0;       // DS4TP_LINK_*
  int state = 1;      // 1 carries gates, 0 idle, -1 lost
  bool row = true;    // row and batch gates run on it
  uint32_t share = 0, rate_mbit = 0, rtt_us = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char *name() const = 0;

  // Starts using the slab at `base` laid out as `layout`.
  virtual int attach(uint8_t *base, const slab::Layout &layout, Error &err) = 0;
  // Stops using the slab; no gate may follow until the next attach.
  virtual void detach() = 0;
  // A failover left this transport for good (transport/failover.hpp):
  // shuts down the links it owns beyond the data connection that the
  // peer's waits watch, so those waits end. No gate follows.
  virtual void give_up() {}
  // Which tcp rails over_standby keeps: none; those no gate left bytes on
  // (neither rank was in a striped big gate); or every live one, after
  // the ranks trade what each wrote on them in the unfinished gate and
  // read the rest of the peer's (wire::RailSync over the standby).
  enum class KeepRails { None, Clean, Sync };
  // After give_up(), once both ranks resumed on the standby (a connected
  // tcp link): a transport over it and the links of this one still fit
  // to carry gates (tcp rails, as `keep` says), their indexes here in
  // `kept`; null where none is left (those not kept are shut down), or
  // null with `err` set where the rail counts failed (the standby is then
  // shut down: the failover fails). `rank` 0 is the leader.
  virtual std::unique_ptr<Transport> over_standby(net::Fd &, int, KeepRails,
                                                  std::vector<int> &, Error &) {
    return nullptr;
  }
  // The links the last failed gate found lost (bit k: link k, 0 the
  // primary): an error completion on them, or only they owing when the
  // progress deadline passed; 0 where the loss names no link (an rdma
  // pair's rails; others always 0).
  virtual uint32_t lost_links() const { return 0; }
  // After give_up(), once both ranks resumed on the standby: this kind of
  // transport made again over its other links (the standby its data
  // connection), without those in `lost` (never link 0), their indexes
  // here in `kept`; null where it cannot (rdma rails; others always null).
  // Its attach brings the links up again, as at bring-up.
  virtual std::unique_ptr<Transport> remake_without(net::Fd &, uint32_t, std::vector<int> &) {
    return nullptr;
  }
  // A slab the transport allocated in memory the peer reaches directly
  // (shm: this rank's segment), which ds4tp_attach_slab(pair, NULL, 0)
  // hands out instead of private memory; nullptr when it has none.
  // Owned by the transport, page-aligned, layout.total bytes.
  virtual uint8_t *shared_slab() { return nullptr; }

  // Every gate gets `start_ns`, the clock read (now_ns()) the caller made
  // as the gate began: its deadlines count from it, and the transport
  // reads no clock to begin (the pair times the gate for lib/stats from
  // the same read, so no backend reads the clock for stats).
  //
  // Row gate: out[slot] to the peer's in[slot]; returns once the peer's
  // partial for the same (layer, gate, seq) landed in in[slot].
  virtual int gate(uint32_t layer, uint32_t gate, uint32_t slot, uint64_t seq,
                   uint64_t start_ns, Error &err) = 0;
  // Batch gate: `rows` vectors of batch gate `index`.
  virtual int batch_gate(uint32_t index, uint32_t rows, uint64_t seq, uint64_t start_ns,
                         Error &err) = 0;
  // Big gate: `bytes` from `out` to the peer, the peer's into `in`.
  virtual int big_gate(uint32_t layer, uint64_t seq, const void *out, void *in,
                       uint64_t bytes, uint64_t start_ns, Error &err) = 0;

  // What only the transport knows of the last gate's time, for the
  // pair's split of it (peer wait | moving): when it first saw the peer's
  // data (tcp: its first bytes; shm: its arrival stamp), the value of a
  // clock read its wait made for a deadline anyway; 0 when this transport
  // cannot tell. Gate thread.
  uint64_t peer_seen_ns() const { return seen_ns_; }
  // peer_seen_ns() when the peer's first bytes came with its last: the
  // gate ended as they arrived (the stats' end clock read dates it).
  static constexpr uint64_t kSeenAtEnd = UINT64_MAX;
  // Set-up attempts retried with a recreated queue pair (rdma), or null.
  virtual const std::atomic<uint64_t> *setup_retries() const { return nullptr; }
  // Appends this transport's links when it has more than the one data
  // connection (a standby, rails); false (nothing appended) otherwise.
  // Gate thread, or while no gate runs.
  virtual bool links(std::vector<LinkInfo> &) const { return false; }

 protected:
  uint64_t seen_ns_ = 0;  // peer_seen_ns(); each gate sets it
};

}  // namespace ds4tp
