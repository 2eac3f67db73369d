// A backend's link among a group's members (tcp/mesh.hpp, rdma/mesh.hpp),
// made through the backend's descriptor (descriptor.hpp) as a pair's
// transport is: one step moves this rank's message to each peer and each
// peer's message to this rank. Each message is a step header (the
// caller's bytes, checked by the caller's function once whole) and a body.
// Over tcp a pair's gates are steps of a two-member mesh too (GateStep).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.hpp"
#include "os/wait.hpp"
#include "wire/gate_header.hpp"

namespace ds4tp::talk { struct PeerState; }

namespace ds4tp::transport {

// How a pair's gate step failed, for the pair to word (a group's steps
// are worded by the mesh). kNone on failure: `err` is set already (the
// peer's header did not match).
struct StepEnd {
  enum class How : uint8_t { kNone, kClosed, kIo, kTimeout, kWatch };
  How how = How::kNone;
  int sys_errno = 0;  // kIo
  bool met = false;  // the peer's bytes came, or its heartbeats put it in the gate
  uint64_t sent = 0, got = 0;  // header + body bytes on the peer's link
};

// What a pair's gate (row, batch, duplex big: tcp/transport.cpp) adds to
// a step over its two-member mesh: its own landings, the peer's header
// checked against this rank's gate, the arrival wait until the peer is
// met (its first bytes, or its heartbeats saying it is in the gate) and
// the progress wait after, the pair's watch (data socket, the peer's
// liveness), and what the pair's stats and messages read back. A group's
// step has none (StepHeader::gate null).
struct GateStep {
  const wire::GateHeader *mine = nullptr;
  uint8_t *const *dst = nullptr;  // dst[r]: peer r's body lands here
  bool room = false;              // its header in the `size` bytes before dst[r]
  uint64_t start_ns = 0;          // the caller's clock read as the gate began
  uint64_t meet_ns = 0, progress_ns = 0;
  os::PeerWatch *watch = nullptr;
  const talk::PeerState *peer = nullptr;  // the pair's; null: no heartbeats
  uint64_t seen_ns = 0;  // out: Transport::peer_seen_ns()
  StepEnd end;           // out, on failure
};

// A step's header: `bytes` of it go first on every link; `check` judges
// the header a peer sent (EDESYNC naming both when it is on another step).
// A step that sends its body to some peers only (a ring's shift: src[r]
// null for the rest) sends those the `alone` header (a body of 0).
struct StepHeader {
  const uint8_t *bytes;
  size_t size;
  uint64_t step;
  uint64_t body;  // body bytes of every message of the step
  int (*check)(const uint8_t *got, uint64_t step, uint64_t body, int peer, Error &err);
  const uint8_t *alone = nullptr;  // `size` bytes: the header of a message without a body
  GateStep *gate = nullptr;        // a pair's gate (then `check` is not used)
  // The header for a peer that gets `body_out` bytes of body.
  const uint8_t *for_body(uint64_t body_out) const {
    return body_out == 0 && alone != nullptr ? alone : bytes;
  }
};

class MeshLink {
 public:
  static constexpr int kMaxPeers = 16;
  static constexpr size_t kRoom = 64;  // before each landing: header room, alignment kept
  virtual ~MeshLink() = default;

  // Sends src[r] to every peer r (the header alone when src is null, or
  // hdr.alone alone where src[r] is null: a shift to some peers) and
  // receives every peer's message: bodies from every peer, or only from
  // `root` when root >= 0 (the others send their header alone, so each
  // rank hears every rank at every step). views[r] then points at rank
  // r's body (this rank's: src[rank]; null where none came). `hdr.bytes`
  // encodes this rank's body size and may sit in the kRoom before src[r].
  // Waits at most the link's step deadline without progress (a pair's
  // gate: as hdr.gate says, on a mesh that runs them).
  virtual int step(const StepHeader &hdr, int root, const uint8_t *const *src,
                   const void **views, Error &err) = 0;
  // Fails this step and every later one, and shuts the links down, so
  // the peers see this rank leave; from any thread.
  virtual void abort() = 0;
  // The peer the last failed step was about (its name); -1 when none.
  virtual int culprit() const = 0;
  // Also counts every move of a step (bytes sent or received) into
  // `word`, for ranks that wait on this one meanwhile (a tiered leader's
  // host); null: none. Set before the first step.
  void count_progress_in(std::atomic<uint64_t> *word) { progress_word_ = word; }

 protected:
  void count_moved() {
    if (progress_word_ != nullptr) progress_word_->fetch_add(1, std::memory_order_relaxed);
  }

 private:
  std::atomic<uint64_t> *progress_word_ = nullptr;
};

// One rank's end of a group's mesh, as bring-up left it: the tcp links to
// every other member (the full mesh the group dialled and accepted, each
// proven with the group's token), and how its steps wait.
struct MeshConnection {
  std::vector<int> fds;  // fds[r]: the link to member r (-1 at `rank`); borrowed
  int rank = 0;
  size_t chunk = 0;         // the largest body of a step
  uint64_t timeout_ns = 0;  // a step's wait without progress
  os::WaitPolicy policy;    // budget ignored: adaptive is the link's own
  bool adaptive = false;
  std::vector<int> names;  // member r's rank in messages and culprit(); empty: r
  uint64_t setup_deadline_ns = 0;  // absolute, for the set-up handshake
};

}  // namespace ds4tp::transport
