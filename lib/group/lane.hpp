// A lane: one link the group steps on (a flat group's, or in a tiered
// group its host's and its leaders'), the plan's crossovers for it, and
// the group's step forms over the link's one verb (link/link.hpp): every
// member's bytes to every member (exchange), the consecutive segments of
// one buffer each to its member (exchange_segments), and a ring's shift to
// one neighbour. Step numbers are per lane, the same on every member
// because all call the same collectives in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/error.hpp"
#include "group/reduce.hpp"
#include "link/link.hpp"

namespace ds4tp::talk { class Heartbeat; }

namespace ds4tp::group {

// Which all-reduce algorithm a lane runs from which size, bytes per call
// (group/plan.hpp): the same on every member, agreed at bring-up (the
// roster's, or the shm area's maker's), never read from a backend.
struct Crossovers {
  uint64_t two_shot_bytes = 0;
  uint64_t ring_bytes = UINT64_MAX;  // after the member rule (ring_for)
  uint64_t home_bytes = UINT64_MAX;  // links with homes (shm) only
};

// reduce of `t` by `op` as a link::Sum (the homes' all-reduce runs it).
link::Sum sum_of(Dtype t, Op op);

struct Lane {
  std::unique_ptr<link::Link> link;
  Crossovers x;
  int n = 1, me = 0;  // members; this rank's member number
  uint64_t step = 0;
  // The group buffer: a step sent from its start puts its header in the
  // room before it (one plain send per peer over tcp).
  const uint8_t *roomy = nullptr;
  // The call in progress (call.hpp), which its every step carries: the
  // group sets it as a collective begins.
  uint32_t call = 0;
  // This member's arrival mark in the call (group/flight.hpp), which its
  // steps carry, and the members' marks as their steps brought them: the
  // group sets both as a call begins.
  uint32_t mark = 0;
  link::Marks marks;
  // A member not yet in the call is waited for this long while alive
  // (peer_arrival_timeout_ms): at the call's first step (`first`, which
  // the group sets as the call begins), or at every step (`every`: a
  // tiered group's, whose leader may wait on a late rank elsewhere at any
  // step). Other steps wait the link's step deadline.
  uint64_t arrival_ns = 0;
  bool first = false, every = false;
  // Where a member's progress through the calls shows (tcp and tiered
  // groups: the heartbeats), and the call in progress's number among the
  // calls (1, 2, ...): a member whose beats say it entered it is in.
  const talk::Heartbeat *beat = nullptr;
  std::vector<int> ranks;  // member m's rank; empty: m
  uint32_t call_index = 0;

  explicit operator bool() const { return link != nullptr; }
  // Step `step`: publishes `mine` (bytes; null when this member does not
  // contribute) and waits until views[m] holds the bytes of every
  // contributor m (all, or only `root` when root >= 0; views of others
  // are left null). Blocks at most the link's step deadline per wait.
  int exchange(uint64_t step, const void *mine, size_t bytes, int root, const void **views,
               Error &err);
  // `mine` holds n segments of `seg` bytes; views[m] becomes member m's
  // segment number `me` (this member's share).
  int exchange_segments(uint64_t step, const void *mine, size_t seg, const void **views,
                        Error &err);
  // `mine` (bytes) to member `to` alone; member `from`'s bytes in
  // views[from]; every other member is still heard (its header alone).
  int shift(uint64_t step, const void *mine, size_t bytes, int to, int from, const void **views,
            Error &err);
  // A piece per member: out[m] bytes of src[m] to member m, in[m] bytes
  // from member m into views[m] (null where 0); this member's own piece
  // is its src (views[me] = src[me]). Their sum fits a step (the caller
  // chunks).
  int pieces(uint64_t step, const uint8_t *const *src, const uint64_t *out, const uint64_t *in,
             const void **views, Error &err);
  // A step of this lane's call with its header, sizes and regions unset
  // (Homes::reduce_home names another call by it), and its arrival wait.
  link::Step like();
  // This member has finished reading step `step`'s views.
  void done(uint64_t s) { link->release(s); }

 private:
  int run(uint64_t step, size_t bytes, int root, const uint8_t *const *src, const void **views,
          Error &err, const uint8_t *alone = nullptr);
  static bool in_call(const void *lane, int member);
};

}  // namespace ds4tp::group
