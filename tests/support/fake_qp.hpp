// An in-memory fabric with two ends that behaves like an unreliable-
// connected (UC) queue pair, for testing the RDMA transport's protocol
// logic without hardware. Test-only: built into the ds4tp_rdma_fake
// library, never into libds4tp.
//
// Behaviour (see queue_pair.hpp for the contract):
//  * a send is delivered at once, in order, into the oldest posted receive
//    of the connected peer queue pair;
//  * a message that finds no posted receive, a receive smaller than the
//    message, or a peer queue pair that is not connected is LOST: both
//    sides see nothing but the sender's success completion;
//  * every work request must lie inside the end's registered memory, and
//    the queues enforce their granted depths (outstanding = posted and not
//    yet polled), so accounting bugs fail loudly;
//  * faults can be injected per end: drop messages, fail a send or a
//    receive with a verbs status (the queue pair then flushes), kill one
//    direction (as some UC providers do after an early send), or hold
//    completions back for a number of polls.
//
// Threading: the two ends may be driven from two threads; one mutex guards
// the fabric. The copy into the receiver's memory happens under it, so a
// receiver that saw the completion sees the bytes.
#pragma once

#include <cstdint>
#include <memory>

#include "link/rdma/queue_pair.hpp"

namespace ds4tp::rdma::fake {

// Verbs completion status values the fake produces (same numbers and
// words as libibverbs).
enum : int {
  kStatusSuccess = 0,
  kStatusLocLenErr = 1,
  kStatusLocProtErr = 4,
  kStatusWrFlushErr = 5,
  kStatusRemAccessErr = 10,
  kStatusRetryExcErr = 12,
};

struct EndOptions {
  uint32_t max_msg = 1u << 20;   // device limit on one message
  uint32_t max_send_depth = 256;  // granted depth = min(requested, this)
  uint32_t max_recv_depth = 512;
  bool offer_rc = false;         // report RC (still UC semantics) unless uc_only
  // After a message from this end found no posted receive, every later
  // message of this direction is lost (the quirk warm-up guards against).
  bool dead_after_unposted = false;
};

class Fabric {
 public:
  Fabric(const EndOptions &a = {}, const EndOptions &b = {});
  ~Fabric();
  Fabric(const Fabric &) = delete;
  Fabric &operator=(const Fabric &) = delete;

  // The device of end 0 or 1. The Fabric must outlive both devices.
  std::unique_ptr<Device> device(int end);

  // Faults, applied to messages sent by (or completions at) `end`.
  void drop_next(int end, int messages);
  void fail_next_send(int end, int status);
  void fail_next_recv(int end, int status);
  // Messages from `end`'s live queue pair (or, before it has one, its next
  // one) are lost from now on; a recreated queue pair works again.
  void kill_direction(int end);
  void delay_completions(int end, int polls);

  // Counters for messages sent by `end`.
  uint64_t delivered(int end) const;
  uint64_t lost(int end) const;
  // Receives currently posted and not yet completed at `end`'s live QP.
  uint64_t posted_receives(int end) const;
  // Queue pairs created at `end` so far (recreations show up here).
  uint32_t qps_created(int end) const;

  struct State;

 private:
  std::shared_ptr<State> s_;
};

}  // namespace ds4tp::rdma::fake
