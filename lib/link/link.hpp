// The one data-plane interface. A Link joins this rank to the other
// members of a pair (two) or of a group's lane (two to kMaxMembers) over
// one backend (link/tcp, link/shm, link/rdma), made through that
// backend's descriptor (link/descriptor.hpp). Its one verb is step():
// this member's messages to some members and theirs to it, each message a
// header its protocol encodes and checks, then a body. The pair's gates
// (pair/gates.cpp) and the group's collectives (group/) are two protocols
// over it; link survival (a standby link, rails) wraps a link in
// multipath/, never inside a backend.
//
// Each backend keeps its fast paths inside: shm pushes a two-member step
// straight into the peer's mapping of the bound memory and publishes an
// N-member one in shared slots; rdma pre-posts a pair's receive windows in
// the bound slab and rings for a group; tcp moves every step in one loop
// over non-blocking sockets. A backend tells a pair's gate from a group's
// step by Step::gate (row, batch and big gates have their own message
// shapes on shm and rdma).
//
// Ownership: a link owns its connections (sockets, queue pairs, mapped
// segments) and borrows bound memory between bind() and unbind().
// Threading: one thread steps at a time (the engine's gate thread, or the
// group's caller); abort() may come from any thread. Blocking: step()
// returns when every message moved, or at a deadline, the peer watch's
// verdict or abort(); it never allocates, logs or locks on success.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.hpp"
#include "os/wait.hpp"
#include "slab/layout.hpp"
#include "wire/gate_header.hpp"

namespace ds4tp::talk { struct PeerState; }

namespace ds4tp::link {

constexpr int kMaxMembers = 16;
// A wait blocked in poll() wakes this often to read the peer's liveness
// verdict (talk::PeerState) and abort flags, whatever the backend.
constexpr int kLivenessSliceMs = 20;
// Room before each landing for the message's header, alignment kept.
constexpr size_t kRoom = 64;

// How a pair's gate step failed, for the pair to word (a group's steps are
// worded by the link). kNone on failure: `err` is set already (the peer's
// header did not match, or the backend worded it).
struct End {
  enum class How : uint8_t { kNone, kClosed, kIo, kTimeout, kWatch };
  How how = How::kNone;
  int sys_errno = 0;  // kIo
  bool met = false;   // the peer's bytes came, or its heartbeats put it in the gate
  uint64_t sent = 0, got = 0;  // header + body bytes on the peer's link
};

// Each member's arrival mark for a step, by the member's name (its rank
// in the group): what the member's step header or shm line carried
// (Step::mark). A group's flight recorder reads them (group/flight.hpp).
struct Marks {
  uint32_t at[kMaxMembers] = {};
  uint32_t heard = 0;  // bit r: at[r] holds member r's
  void take(int name, uint32_t mark) {
    if (unsigned(name) >= unsigned(kMaxMembers)) return;
    at[name] = mark;
    heard |= 1u << name;
  }
};

// One step as this member sees it. The caller fills the header and the
// regions; the link fills views, seen_ns and end.
struct Step {
  // ---- the header every message starts with -----------------------------
  // A group's step: `size` encoded bytes (the step header), judged by
  // `check` once a peer's is whole (EDESYNC naming both when the peer is on
  // another step or call). A pair's gate: `gate` is this rank's gate, and
  // the peer's must match it (wire::check_peer_gate_header); the encoded
  // bytes go on the wire where the backend sends headers (tcp).
  const uint8_t *hdr = nullptr;
  size_t size = 0;
  uint64_t number = 0;  // the step's number (a gate's seq), for messages and tags
  uint64_t body = 0;    // body bytes of every message of the step
  uint32_t call = 0;    // what the protocol calls (a group's collective, dtype, op, root)
  int (*check)(const uint8_t *got, const Step &mine, uint64_t body, int member,
               Error &err) = nullptr;
  // The header of a message with `body` bytes (per-member sizes: each
  // member's header differs); null where `hdr` and `alone` serve.
  void (*encode)(const Step &mine, uint64_t body, uint8_t *out) = nullptr;
  // The header of a message without a body (a peer src[] leaves null), or null.
  const uint8_t *alone = nullptr;
  const wire::GateHeader *gate = nullptr;
  // This member's arrival mark, which travels with its header (a group's
  // step header, an shm line); each peer's lands in `marks` (may be null).
  uint32_t mark = 0;
  Marks *marks = nullptr;

  // ---- the regions --------------------------------------------------------
  // src[m]: the body for member m; src null: the header alone to everyone;
  // src[m] null: the `alone` header to m. Several members' bodies may be
  // one buffer (src[m] equal) or its consecutive segments (src[m+1] =
  // src[m] + body: shm then publishes the buffer once).
  const uint8_t *const *src = nullptr;
  // Bodies come from every member, or from `root` alone when root >= 0
  // (the others send their header alone, so every member hears every
  // member at every step).
  int root = -1;
  // Per-member sizes (a group's uneven and personal forms): sizes_out[m]
  // bytes of src[m] go to member m, sizes_in[m] come from it (0: its
  // header alone); `body` is then the largest. Null: `body` and the root
  // rule for every member. Needs `encode`.
  const uint64_t *sizes_out = nullptr;
  const uint64_t *sizes_in = nullptr;
  // dst[m]: where member m's body lands; null: the link's own landing.
  // `room`: the header's bytes before each dst[m] may be written.
  uint8_t *const *dst = nullptr;
  bool room = false;
  // A pair's row gate: this rank's in-seq flag word of the slot (in bound
  // memory), set to the gate's seq when the peer's body landed (shm), or null.
  uint8_t *flag = nullptr;
  // Filled: views[m] is member m's body (this member's: src[self]; null
  // where none came). At most members() entries.
  const void **views = nullptr;

  // ---- waits ---------------------------------------------------------------
  // The caller's clock read as the step began (0: none; the link reads the
  // clock when it first has to wait). A member not yet in the step is
  // waited for up to `arrival_ns` from start_ns while the watch says it is
  // alive; once it is in, a stretch without progress is bounded by
  // `progress_ns`. 0: the link's own step deadline for both.
  uint64_t start_ns = 0;
  uint64_t arrival_ns = 0;
  uint64_t progress_ns = 0;
  os::PeerWatch *watch = nullptr;          // the caller's (a pair's: its sockets, liveness)
  const talk::PeerState *peer = nullptr;   // a pair's peer: its heartbeats say where it is
  // A group's members: true when member m's heartbeats say it is in this
  // step's call (its bytes are late, not it: the progress deadline
  // applies); null where nothing tells.
  bool (*in_call)(const void *ctx, int member) = nullptr;
  const void *in_call_ctx = nullptr;

  // ---- results ---------------------------------------------------------------
  uint64_t seen_ns = 0;  // when the peer's data first showed (a clock read the wait made)
  End end;               // a pair's gate, on failure

  // The header for a member that gets `body_out` bytes of body (with
  // per-member sizes the caller encodes each one itself).
  const uint8_t *header_for(uint64_t body_out) const {
    return body_out == 0 && alone != nullptr ? alone : hdr;
  }
  // What member m sends this member, and this member member m.
  uint64_t in_from(int m) const {
    return sizes_in != nullptr ? sizes_in[m] : root < 0 || m == root ? body : 0;
  }
  uint64_t out_to(int m) const {
    return sizes_out != nullptr ? sizes_out[m] : src != nullptr && src[m] != nullptr ? body : 0;
  }
};

// Step::seen_ns when the peer's first bytes came with its last: the step
// ended as they arrived (the caller's end clock read dates it).
constexpr uint64_t kSeenAtEnd = UINT64_MAX;

// The element sum a protocol runs over the members' views (a group's
// reduce kernels): out[i] = the member-order sum of views[0..n)[i].
struct Sum {
  void (*fn)(const void *ctx, const void *const *views, int n, void *out, size_t count);
  const void *ctx;
  size_t elem_bytes;
};

// Optional, for links whose members share memory (shm): a home buffer per
// member that every member reads, and the all-reduce through them.
class Homes {
 public:
  virtual ~Homes() = default;
  // This member's home (chunk bytes, page-aligned).
  virtual uint8_t *home() = 0;
  // all_reduce of `count` elements (at most chunk bytes) through the homes
  // in steps `step` and `step` + 1: without a copy in when `buf` is this
  // member's home, else `buf` is copied in and the result out. Each
  // member sums its segment of every home with `sum`, so every member has
  // the same bits. `like`: the call (Step::call, encode, check) a member in
  // another call is named by.
  virtual int reduce_home(uint64_t step, uint8_t *buf, size_t count, const Sum &sum,
                          const Step &like, Error &err) = 0;
};

// One data link, as ds4tp_links reports it.
struct LinkInfo {
  int transport = 0;  // DS4TP_TRANSPORT_*
  int role = 0;       // DS4TP_LINK_*
  int state = 1;      // 1 carries gates, 0 idle, -1 lost
  bool row = true;    // row and batch gates run on it
  uint32_t share = 0, rate_mbit = 0, rtt_us = 0;
};

class Link {
 public:
  virtual ~Link() = default;
  // "tcp", "shm", "rdma".
  virtual const char *name() const = 0;
  virtual int kind() const = 0;  // DS4TP_TRANSPORT_*

  // Memory a step's regions may lie in and the link reaches directly (a
  // pair's slab: shm maps it for the peer, rdma registers it). A link that
  // moves through sockets only keeps nothing.
  virtual int bind(uint8_t *base, const slab::Layout &layout, Error &err) {
    (void)base, (void)layout, (void)err;
    return DS4TP_OK;
  }
  virtual void unbind() {}
  // Memory the link allocated where the peer reaches it directly (shm:
  // this rank's segment), which a pair hands out as its slab; null: none.
  virtual uint8_t *shared_memory() { return nullptr; }

  // The data verb (see Step).
  virtual int step(Step &s, Error &err) = 0;
  // This member has finished reading step `number`'s views (shm reuses the
  // slots two steps later); a no-op where views are this member's own.
  virtual void release(uint64_t number) { (void)number; }
  // Fails this step and every later one and shuts the connections down, so
  // the members see this one leave; `culprit` (member rank) and `code`
  // travel where the link can carry them (shm). Any thread.
  virtual void abort(int culprit, int code) = 0;
  // The member the last failed step was about (its rank); -1 when none.
  virtual int culprit() const { return culprit_; }

  // Optional facets.
  virtual Homes *homes() { return nullptr; }
  // The word that counts this member's progress elsewhere (shm: a wait on
  // this member that sees it move restarts its deadline), or null.
  virtual std::atomic<uint64_t> *progress_word() { return nullptr; }
  // Also counts every move of a step into `word` (a tiered leader's steps
  // across hosts, for its host's ranks); null: none. Before the first step.
  void count_progress_in(std::atomic<uint64_t> *word) { progress_word_ = word; }
  // Set-up attempts retried with a recreated queue pair (rdma), or null.
  virtual const std::atomic<uint64_t> *setup_retries() const { return nullptr; }
  // Appends its links when it has more than one connection (a standby,
  // rails); false (nothing appended) otherwise. The stepping thread, or
  // while no step runs.
  virtual bool links(std::vector<LinkInfo> &out) const {
    (void)out;
    return false;
  }

 protected:
  void count_moved() {
    if (progress_word_ != nullptr) progress_word_->fetch_add(1, std::memory_order_relaxed);
  }
  int fail(int rc, int culprit = -1) {
    if (culprit >= 0) culprit_ = culprit;
    return rc;
  }
  int culprit_ = -1;

 private:
  std::atomic<uint64_t> *progress_word_ = nullptr;
};

}  // namespace ds4tp::link
