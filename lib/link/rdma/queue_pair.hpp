// The narrow interface between the RDMA transport and a verbs provider.
//
// The transport's protocol logic (receive windows, splitting, drains, bulk
// rounds, error handling) talks only to these two classes, so it runs
// unchanged over real verbs (verbs_device.cpp, hardware only) and over the
// in-memory unreliable-connected pair in tests/support/fake_qp.hpp.
// No verbs type appears here.
//
// Semantics every implementation provides (those of a UC queue pair, the
// weakest the transport supports; RC only strengthens them):
//  * messages of one direction are delivered in the order they were
//    posted, each into the oldest posted receive;
//  * a message that finds no posted receive, or a receive smaller than the
//    message, may be lost without any notice to either side;
//  * receive completions come in the order the receives were posted; send
//    completions in the order the sends were posted; every send is
//    signaled;
//  * after an error completion the queue pair is in error: later work
//    requests complete with a flush error.
//
// Threading: one thread at a time drives a QueuePair (the gate thread, or
// the thread attaching the slab). Nothing here blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/error.hpp"
#include "wire/rdma_frames.hpp"

namespace ds4tp::rdma {

// A receive of up to `bytes` at `addr` (inside the registered memory).
struct RecvWork {
  uint64_t wr_id = 0;
  void *addr = nullptr;
  uint32_t bytes = 0;
};

// A signaled send-with-immediate of `bytes` from `addr` (0 bytes allowed:
// the message then carries only `imm`).
struct SendWork {
  uint64_t wr_id = 0;
  const void *addr = nullptr;
  uint32_t bytes = 0;
  uint32_t imm = 0;
};

struct Completion {
  uint64_t wr_id = 0;
  uint32_t bytes = 0;   // receive: bytes that landed
  uint32_t imm = 0;     // receive: the sender's immediate value
  bool has_imm = false;
  int status = 0;       // 0 = success, else provider status (status_text)
  uint32_t vendor_err = 0;
};

// What the transport asks of a new queue pair.
struct QpRequest {
  bool uc_only = false;      // do not try RC (the peer cannot do it)
  uint32_t send_depth = 256;  // wanted; the device may grant fewer
  uint32_t recv_depth = 512;
  uint32_t max_msg = 1u << 20;  // our cap on one message
};

class QueuePair {
 public:
  virtual ~QueuePair() = default;

  // This end's address for RDMA_INFO: qp_num, psn, lid, gid, gid_index,
  // port, link layer, mtu, qp_type, max_msg and the granted depths. The
  // caller fills attempt and the slab fields.
  virtual wire::RdmaInfo local_info() const = 0;

  // Moves the queue pair to ready-to-send towards `peer` (INIT, RTR, RTS).
  // EIO with the step and the provider's reason on failure.
  virtual int connect(const wire::RdmaInfo &peer, Error &err) = 0;

  // Post `n` work requests in order. EIO (queue full, bad address, queue
  // pair in error) with the provider's reason; nothing is partially posted
  // from the transport's point of view (it fails the pair).
  virtual int post_recv(const RecvWork *w, size_t n, Error &err) = 0;
  virtual int post_send(const SendWork *w, size_t n, Error &err) = 0;

  // Up to `max` completions into `out`: returns the count (0 = none yet)
  // or a negative DS4TP code (EIO: the completion queue itself failed).
  virtual int poll(Completion *out, int max, Error &err) = 0;

  // The provider's words for a completion status ("transport retry counter
  // exceeded"). Failure path only.
  virtual std::string status_text(int status) const = 0;
};

// An opened device: protection domain and the registered slab. Owns the
// queue pairs' shared resources; a QueuePair must be destroyed before its
// Device.
class Device {
 public:
  virtual ~Device() = default;

  // "mlx5_0 port 1 GID 3 (RoCE v2)" or "fake": for logs and messages.
  virtual std::string describe() const = 0;

  // Registers [base, base + bytes) for local writes and remote access; one
  // region at a time (register again after deregister). Sets `rkey`.
  virtual int register_memory(void *base, uint64_t bytes, uint32_t &rkey, Error &err) = 0;
  virtual void deregister_memory() = 0;

  // Creates a queue pair over the registered memory: RC unless
  // `req.uc_only` or the device offers no RC, then UC.
  virtual int create_qp(const QpRequest &req, std::unique_ptr<QueuePair> &out,
                        Error &err) = 0;
};

}  // namespace ds4tp::rdma
