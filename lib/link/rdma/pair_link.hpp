// RDMA data plane over the narrow QueuePair interface (queue_pair.hpp).
//
// Set-up (attach): register the slab, create a queue pair (RC, else UC),
// swap RDMA_INFO frames over the set-up link (the data connection, see
// setup_link.hpp), move to RTS, RDMA_READY
// barrier, then a warm-up round (RDMA_POSTED barrier, one full-size
// message each way, RDMA_WARM verdicts) that proves both directions. A UC
// pair that fails the warm-up is recreated (both ranks learn the same
// verdict from RDMA_WARM, so they retry together).
//
// Data path: two-sided send-with-immediate. Every message carries a tag in
// its immediate value (kind, seq or round, message index) and every
// receive knows the tag and length it expects, so a lost or misplaced
// message on an unreliable connection becomes a named EDESYNC instead of
// silent corruption.
//  * Row gates: receives for the next `window` seqs are posted ahead, each
//    landing directly in in[slot(seq)] (split into messages of at most the
//    negotiated maximum size); the gate posts its send, tops the window
//    up and polls completions. No TCP traffic per gate. A rank can never
//    be more than one gate ahead of its peer, so a window of 3 already
//    guarantees the receive is posted before the peer's send.
//  * Any change of message shape (row window -> batch -> big) first
//    crosses a 32-byte header barrier on the data socket (both ranks at
//    the same gate, EDESYNC otherwise), then drains the receives still
//    posted: each rank sends as many zero-length drain messages as the
//    peer has receives outstanding and waits for its own to complete, so
//    no stale receive can ever take a later gate's message.
//  * Batch gates: rows land in place; the receives of the predicted next
//    batch gate (next index by the last stride, same rows, seq + 1) are
//    posted before our data leaves, so consecutive gates of a verify
//    block need no barrier; a different call drains the prediction.
//  * Big gates: rounds of up to half the big staging region (or straight
//    from/to the caller's memory when it lies inside the slab); round r+1's
//    receives and a credit header go out before round r is awaited, so
//    the link stays busy while each side copies.
//
// Liveness: while polling, the control and data sockets are watched; a
// closed peer is EPEERCLOSED at once. Every wait has a deadline.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/log.hpp"
#include "net/socket.hpp"
#include "slab/schedule.hpp"
#include "link/rdma/queue_pair.hpp"
#include "link/link.hpp"
#include "link/data_config.hpp"

namespace ds4tp::rdma {

// Carries the RDMA set-up frames (wire/rdma_frames.hpp) to the peer.
// Blocking, bounded by the deadline; used only while attaching the slab.
class SetupLink {
 public:
  virtual ~SetupLink() = default;
  // Sends one frame of `type` with `bytes` payload bytes.
  virtual int send(uint32_t type, const uint8_t *payload, size_t bytes, uint64_t deadline_ns,
                   Error &err) = 0;
  // Receives the next frame; it must be `type` with exactly `bytes`
  // payload bytes (EPROTO naming both otherwise).
  virtual int recv(uint32_t type, uint8_t *payload, size_t bytes, uint64_t deadline_ns,
                   Error &err) = 0;
};

// Knobs; defaults suit real hardware. Tests shrink them.
struct Tuning {
  uint32_t max_msg = 1u << 20;  // our cap on one message (min with device and peer)
  uint32_t row_window = 4;      // row gates posted ahead, >= 3
  uint32_t send_depth = 256;    // requested queue depths
  uint32_t recv_depth = 512;
  uint32_t setup_attempts = 3;  // queue pairs tried before giving up (UC)
  uint64_t setup_timeout_ns = 30ull * 1000000000ull;  // each set-up frame
  uint64_t warm_timeout_ns = 0;  // warm-up message wait; 0 = the gate timeout
  bool predict_batches = true;   // post the next batch gate ahead
};

// Who we are and what we borrow. The transport owns the device, the
// set-up link and the data socket (barriers, big-gate credits, and the
// link's frames); `control_fd` stays the pair's and is only watched for
// peer death.
struct Endpoint {
  std::unique_ptr<Device> device;
  std::vector<std::unique_ptr<Device>> rails;  // rail k + 1's port (rdma_rails)
  std::unique_ptr<SetupLink> link;
  net::Fd data;
  int control_fd = -1;
  int rank = 0;
  // Both ranks may run row and batch gates on a rail whose round trip is
  // shorter than the primary's (Connection::rail_rows).
  bool rail_rows = false;
  int row_link = -1;  // pinned by the operator (Connection::row_link); -1: none
};

std::unique_ptr<link::Link> make_pair_link(Endpoint ep, const DataConfig &cfg,
                                               const Tuning &tuning,
                                               const slab::Schedule &schedule,
                                               const Logger &log);

// Immediate-value tags (bits 31..28 = kind).
enum : uint32_t { kTagRow = 1, kTagBatch = 2, kTagBig = 3, kTagDrain = 4, kTagWarm = 5 };
uint32_t row_tag(uint64_t seq, uint32_t chunk);
uint32_t batch_tag(uint64_t seq, uint32_t message);
uint32_t big_tag(uint32_t round, uint32_t message);
uint32_t drain_tag(uint32_t message);
uint32_t warm_tag(uint32_t attempt);
// "row gate seq ...17 message 0" from a tag (failure path).
std::string describe_tag(uint32_t imm);

}  // namespace ds4tp::rdma
