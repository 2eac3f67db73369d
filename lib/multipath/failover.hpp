// A pair's transport with a standby: the primary (rdma, shm or tcp rails)
// carries every gate until it fails; then both ranks agree on the standby
// tcp link (standby.hpp) which gate to resume from, run it again there from
// the slab, and go on over tcp for the pair's life. The engine's call
// returns success; `switched` tells the pair (its metric, its log line,
// ds4tp_transport_active).
//
// The agreement (docs/PROTOCOL.md §6.2): the rank that gives up
// detaches the primary (rdma: its queue pair and registration go, so
// nothing lands in the slab later), shuts the primary's data connection
// down (the peer's primary waits watch it, so the peer leaves its gate
// within a millisecond), and sends a resume message on the standby: the
// gate it is in and the last gate it completed. Both ranks then know
// where each stands. Same gate: run it again. One rank a gate ahead (its
// peer never got that gate's data): the behind rank runs its gate again
// and the ahead rank sends its partial of that gate once more (from the
// slab, received into scratch memory so nothing it already read
// changes), then runs its own gate again. Anything else is EDESYNC,
// naming both. A peer that is gone, stopped or silent fails the wait
// for its resume message as a gate would (liveness, arrival deadline),
// and the primary's error is returned with why failover did not help.
//
// An rdma pair with rails: each resume also names the links that rank
// found lost (transport.hpp lost_links()). Where the two together name
// rails only, the rdma transport is made again without them (queue pairs
// and warm-ups anew, the standby tcp link its data connection) instead of
// moving to tcp; a lost primary, or a loss that names no link, moves to
// tcp.
//
// Threading and ownership as Transport: one gate thread; the failover
// itself runs on it, inside the failing gate. The primary stays owned
// (detached) after a failover: a shm slab the engine got from it lives on.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/log.hpp"
#include "net/socket.hpp"
#include "link/data_config.hpp"

namespace ds4tp::multipath {

struct FailoverConfig {
  DataConfig data;       // the standby's deadlines and liveness: the primary's
  int rank = 0;          // 0 leader
  int primary_kind = 0;  // DS4TP_TRANSPORT_* of the primary
  int control_fd = -1;   // the pair's; watched while the peer's resume is awaited
  // A drill (DS4TP_FAILOVER_DRILL): the primary is given up at this gate
  // (counting row, batch and big gates from 1) as if it had failed; 0: never.
  uint64_t drop_primary_at = 0;
  // The peer names lost rdma rails in its resume too (hello capability
  // kCapLostLinks): only then does this rank name them.
  bool name_lost_links = false;
  // The peer trades rail counts (hello capability kCapRailSync): a tcp
  // pair's rails then stay beside the standby after a striped big gate.
  bool sync_rails = false;
  Logger log;
  // Runs on the gate thread once the standby carries the pair (the
  // transport has logged which gate moved and why): `transport` is what
  // carries gates now (DS4TP_TRANSPORT_*: tcp, or the primary's kind
  // when it was made again without a lost rail).
  std::function<void(int transport)> switched;
};

// `primary_data`: a duplicate of the primary's data connection, shut down
// to tell the peer. `standby`: the connected standby link.
std::unique_ptr<link::Link> make_failover_link(std::unique_ptr<link::Link> primary,
                                                   net::Fd primary_data, net::Fd standby,
                                                   const FailoverConfig &cfg);

}  // namespace ds4tp::multipath
