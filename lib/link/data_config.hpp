// What a pair's two-member link is made with (descriptor.hpp): its
// deadlines, its wait policy and its peer's liveness. The link itself is
// link/link.hpp; every wait inside a gate goes through os::Waiter
// (os/wait.hpp): spin, then block, ended by the deadline or the peer's death.
#pragma once

#include <cstdint>

#include "link/link.hpp"
#include "os/wait_tally.hpp"

namespace ds4tp {

namespace talk { struct PeerState; }

using link::kLivenessSliceMs;

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
  uint64_t spin_ns = 0;              // busy-poll before blocking (os::kSpinForever: always)
  bool adaptive_spin = false;        // spin_ns is the cap of a learned window
                                     // (os::SpinBudget, one per transport)
  os::WaitTally *tally = nullptr;    // the pair's stats: where gate waits went

  // The arrival wait of a gate kind: never shorter than its progress
  // deadline, so the old options stay floors.
  uint64_t arrival(bool big) const {
    uint64_t floor = big ? big_gate_timeout_ns : gate_timeout_ns;
    return arrival_ns > floor ? arrival_ns : floor;
  }
};

using link::LinkInfo;

}  // namespace ds4tp
