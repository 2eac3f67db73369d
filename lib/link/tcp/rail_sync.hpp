// A tcp pair's rails brought back to a gate's start after a failover that
// caught a striped big gate in flight (docs/PROTOCOL.md 6.2): each rank may
// have written part of its shares on them and read part of the peer's.
// Over the standby link both ranks trade what they wrote on each rail
// (wire::RailSync, stage 1), read and drop the rest of what the peer
// wrote, and trade which rails they could (stage 2): a rail both kept
// carries no byte of the unfinished gate, so the striped links over the
// standby and those rails run the gate again from the first byte.
#pragma once

#include <cstdint>
#include <string>

#include "common/error.hpp"
#include "wire/failover.hpp"

namespace ds4tp::tcp {

// Where this rank's rails stand: bytes written and read on each since the
// striped links began (bring-up, or the failover that kept them), so a
// rank a gate ahead of its peer counts alike.
struct RailCounts {
  int links = 0;                       // the data connection and the rails
  uint16_t keepable = 0;               // bit k: rail k still up here (never link 0)
  uint64_t sent[wire::kMaxLinks] = {};  // bytes written on link k
  uint64_t got[wire::kMaxLinks] = {};   // bytes read from link k
};

// Both ranks at once, over `standby_fd`; `fds` the links' sockets by
// index (non-blocking). Each trade waits at most `timeout_ns`, reading
// the rails out at most half of it (a rail that takes longer is dropped),
// so a rank that drops one still meets its peer at stage 2. `kept`: bit k, rail k kept
// on both ranks; `read_out[k]`: the bytes of the peer's read and dropped
// on rail k; `why` names each rail dropped on the way and the reason.
// An error (the standby failed, a message that is not rail counts):
// nothing kept.
int sync_rails(int standby_fd, const int *fds, const RailCounts &mine, uint64_t timeout_ns,
               uint16_t &kept, uint64_t *read_out, std::string &why, Error &err);

}  // namespace ds4tp::tcp
