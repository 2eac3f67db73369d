// The shm transport's class, shared by its two halves: transport.cpp
// (row and batch gates, the control page) and big_exchange.cpp (big gates
// streamed through the staging region). Internal to shm/; the public face
// is transport.hpp.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>

#include <sys/types.h>

#include "common/clock.hpp"
#include "common/shared_word.hpp"
#include "os/wait.hpp"
#include "talk/peer_state.hpp"
#include "link/shm/bell.hpp"
#include "link/pair_link.hpp"
#include "link/shm/pair_link.hpp"
#include "wire/gate_header.hpp"

namespace ds4tp::shm {

using wire::GateHeader;
using wire::GateKind;

// ---- the control page -------------------------------------------------
//
// One page after the slab in each rank's segment. Each 64-byte line has
// one writer (the bell's has both: neither spins on it), so a spinning
// reader and the writer never share a line with a third party:
//   header   (owner, before the handshake ends) u32 magic "D4SM",
//            u32 version, u64 slab bytes, u64 owner pid
//   gate[2]  (peer) for tickets of parity 0 and 1: u64 arrive ticket,
//            u64 done ticket, u64 kind, u64 layer | aux << 32, u64 seq,
//            u64 bytes. Two lines, so the peer can start gate t+1 while we
//            still read its header of gate t.
//   big      (peer) u64 chunks it filled into this segment's big_in,
//            u64 chunks it drained from its own big_in
//   bell     (owner sleeps, peer rings) the owner's shm::Bell (bell.hpp),
//            which the peer rings after its stores into this page
//   cpu      (owner) u32: 1 + the CPU the owner last began a wait on, 0 not
//            known (a peer that predates the line leaves it 0)
constexpr uint64_t kCtlBytes = 4096;
constexpr uint64_t kLineHeader = 0, kLineGate = 64, kLineBig = 192, kLineBell = 256,
                   kLineCpu = 320;
constexpr uint64_t kArrive = 0, kDone = 8, kKind = 16, kLayerAux = 24, kSeq = 32, kBytes = 40;
constexpr uint64_t kFilled = 0, kDrained = 8;
constexpr uint32_t kCtlMagic = 0x4d533444u;  // "D4SM"
// 2: the bell at kLineBell (version 1 had a waiting word there).
constexpr uint32_t kCtlVersion = 2;

// Big gates cut the 4 MiB staging region into this many chunks, so the
// writer fills one while the reader drains another.
constexpr uint32_t kBigChunks = 8;
// Sleeps are cut into slices so the peer watch (os/wait.hpp: the data
// connection, the peer process) runs at least this often.
constexpr uint64_t kSleepSliceNs = 2000000;
constexpr uint32_t kNoRegion = UINT32_MAX;
constexpr uint32_t kBatchRegion = 1u << 31;
constexpr uint64_t kNoFlag = UINT64_MAX;

inline SharedWord<uint64_t> word(uint8_t *p) {
  return SharedWord<uint64_t>(p);
}
inline SharedWord<uint32_t> word32(uint8_t *p) {
  return SharedWord<uint32_t>(p);
}

inline const char *aux_name(uint16_t kind) { return kind == uint16_t(GateKind::Batch) ? "rows" : "gate"; }

class PushLink final : public link::PairLink {
 public:
  PushLink(net::Fd fd, shm::Segment mine, shm::Segment peer, pid_t peer_pid,
               uint64_t peer_start, const slab::Layout &layout, const DataConfig &cfg)
      : fd_(std::move(fd)),
        mine_(std::move(mine)),
        peer_(std::move(peer)),
        peer_pid_(peer_pid),
        peer_start_(peer_start),
        layout_(layout),
        cfg_(cfg) {
    my_ctl_ = mine_.base() + layout_.total;
    peer_ctl_ = peer_.base() + layout_.total;
    chunk_ = layout_.big_staging / kBigChunks;
    // The kernel closes the data connection when the peer process dies;
    // the pid is checked too when it names the peer here (start != 0).
    watch_.watch_socket(fd_.get(), "data connection");
    watch_.watch_process(peer_pid_, peer_start_);
    talk::watch_peer(watch_, cfg_.peer);
    os::set_spin(policy_, budget_, cfg_.spin_ns, cfg_.adaptive_spin);
    policy_.tally = cfg_.tally;
    policy_.clock_every = 64;  // acquire loads and pause only; the clock (vDSO) every 64 rounds
  }

  const char *name() const override { return "shm"; }
  int kind() const override { return DS4TP_TRANSPORT_SHM; }
  uint8_t *shared_memory() override { return mine_.base(); }

  int bind(uint8_t *base, const slab::Layout &, Error &) override {
    slab_ = base;
    staged_ = base != mine_.base();  // engine memory: land in the segment, then copy
    return DS4TP_OK;
  }
  void unbind() override { slab_ = nullptr; }

 protected:
  int row(uint32_t layer, uint32_t gate, uint32_t slot, uint64_t seq, uint64_t start_ns,
          Error &err) override {
    GateHeader h{uint16_t(GateKind::Row), layer, gate, seq, layout_.vec_bytes};
    return small_exchange(h, slot, layout_.out_vec(slot), layout_.in_vec(slot),
                          layout_.vec_bytes, layout_.in_seq_flag(slot), start_ns, err);
  }

  int batch(uint32_t index, uint32_t rows, uint64_t seq, uint64_t start_ns,
            Error &err) override {
    // Rows are vec_stride apart: copy the padded run, padding is never data.
    uint64_t bytes = uint64_t(rows - 1) * layout_.vec_stride + layout_.vec_bytes;
    GateHeader h{uint16_t(GateKind::Batch), index, rows, seq, bytes};
    return small_exchange(h, kBatchRegion | index, layout_.batch_out_gate(index),
                          layout_.batch_in_gate(index), bytes, kNoFlag, start_ns, err);
  }

  int big(uint32_t layer, uint64_t seq, const void *out, void *in, uint64_t bytes,
          uint64_t start_ns, Error &err) override;

 private:
  // Row and batch gates (docs/PROTOCOL.md 3.3): announce, land our
  // partial in the peer's in region and publish done, meet the peer's
  // announcement and compare headers, wait for the peer's done.
  int small_exchange(const GateHeader &h, uint32_t region, uint64_t out_off, uint64_t in_off,
                     uint64_t bytes, uint64_t flag_off, uint64_t start_ns, Error &err);

  // The gate line of ticket `t` in a control page.
  static uint8_t *gate_line(uint8_t *ctl, uint64_t t) { return ctl + kLineGate + (t & 1) * 64; }

  // Writes our header for ticket `t` into the peer's gate line, then the
  // arrive ticket (release); `wake` wakes a peer asleep waiting for it.
  void announce(const GateHeader &h, uint64_t t, bool wake) {
    uint8_t *g = gate_line(peer_ctl_, t);
    word(g + kKind).store(h.kind, std::memory_order_relaxed);
    word(g + kLayerAux).store(uint64_t(h.layer) | uint64_t(h.aux) << 32,
                              std::memory_order_relaxed);
    word(g + kSeq).store(h.seq, std::memory_order_relaxed);
    word(g + kBytes).store(h.bytes, std::memory_order_relaxed);
    if (wake)
      publish(g + kArrive, t);
    else
      word(g + kArrive).store(t, std::memory_order_release);
  }

  // Stores `v` into a word of the peer's control page (seq_cst, as
  // Bell::ring wants) and rings the peer's bell: only a sleeping peer
  // costs a system call.
  void publish(uint8_t *w, uint64_t v) {
    word(w).store(v, std::memory_order_seq_cst);
    Bell(peer_ctl_ + kLineBell).ring();
  }

  // 1 when the peer announced ticket `t` (then its header matched ours),
  // 0 not yet, EDESYNC (err set) when it is at another gate.
  int met(const GateHeader &h, uint64_t t, Error &err) {
    uint8_t *g = gate_line(my_ctl_, t);
    if (word(g + kArrive).load(std::memory_order_acquire) < t) return 0;
    // Stable: the peer rewrites this line for ticket t+2, after passing
    // gate t+1, which needs our done t+1, which comes after this check.
    GateHeader p;
    p.kind = uint16_t(word(g + kKind).load(std::memory_order_relaxed));
    uint64_t la = word(g + kLayerAux).load(std::memory_order_relaxed);
    p.layer = uint32_t(la);
    p.aux = uint32_t(la >> 32);
    p.seq = word(g + kSeq).load(std::memory_order_relaxed);
    p.bytes = word(g + kBytes).load(std::memory_order_relaxed);
    int rc = wire::check_gate_header(h, p, err);
    return rc == DS4TP_OK ? 1 : rc;
  }

  bool done(uint64_t t) {
    return word(gate_line(my_ctl_, t) + kDone).load(std::memory_order_acquire) >= t;
  }

  // Waits until ready() returns 1 (OK) or a negative code (returned; err
  // set by ready). Spins for spin_ns, then sleeps on our bell
  // (os::Waiter, Bell::sleep). `deadline` may be moved by ready() on progress.
  // ETIMEDOUT and EPEERCLOSED are returned with err untouched: the caller
  // words them (watch_.why() says how the peer went).
  template <class Ready>
  int wait(Ready &&ready, const uint64_t &deadline);

  // Notes the CPU this wait begins on (for the peer's same check) and
  // says whether the peer's last wait began on it too. Unpinned, the
  // kernel's wake-ups can put both ranks on one CPU, where a spin only
  // holds off the peer it waits for until the window runs out.
  bool shares_cpu_with_peer() {
    const int cpu = os::current_cpu();
    if (cpu < 0) return false;
    const uint32_t mine = uint32_t(cpu) + 1;
    auto line = word32(my_ctl_ + kLineCpu);
    if (line.load(std::memory_order_relaxed) != mine)  // unchanged: keep the peer's copy valid
      line.store(mine, std::memory_order_relaxed);
    return word32(peer_ctl_ + kLineCpu).load(std::memory_order_relaxed) == mine;
  }

  int fail(const GateHeader &h, int code, bool peer_met, uint64_t limit_ns, Error &err) {
    if (code == DS4TP_EPEERCLOSED && watch_.silent())
      return err.set(DS4TP_ETIMEDOUT, "{} during {} (layer {}, {} {}, seq {}) over shm",
                     watch_.why(), wire::gate_kind_name(h.kind), h.layer, aux_name(h.kind),
                     h.aux, h.seq);
    if (code == DS4TP_ETIMEDOUT && !peer_met && cfg_.peer != nullptr)
      return err.set(DS4TP_ETIMEDOUT,
                     "{} (layer {}, {} {}, seq {}) over shm: {}, but it never reached this "
                     "gate in {} ms (peer_arrival_timeout_ms, at least the gate's progress "
                     "deadline)",
                     wire::gate_kind_name(h.kind), h.layer, aux_name(h.kind), h.aux, h.seq,
                     cfg_.peer->where_peer_is(), limit_ns / 1000000);
    if (code == DS4TP_EPEERCLOSED)
      return err.set(DS4TP_EPEERCLOSED,
                     "peer {} (pid {}) during {} (layer {}, {} {}, seq {}) over shm",
                     watch_.why(), peer_pid_, wire::gate_kind_name(h.kind), h.layer,
                     aux_name(h.kind), h.aux, h.seq);
    if (code == DS4TP_ETIMEDOUT)
      return err.set(DS4TP_ETIMEDOUT,
                     "{} (layer {}, {} {}, seq {}) timed out over shm: no progress from the "
                     "peer for {} ms ({}); the peer is stalled or not at this gate",
                     wire::gate_kind_name(h.kind), h.layer, aux_name(h.kind), h.aux, h.seq,
                     limit_ns / 1000000,
                     peer_met ? "it reached the gate but did not finish"
                              : "it has not reached this gate");
    return code;  // EDESYNC: err already names both sides
  }

  net::Fd fd_;
  shm::Segment mine_, peer_;
  pid_t peer_pid_;
  uint64_t peer_start_;  // 0: the pid cannot be checked, rely on the connection
  slab::Layout layout_;
  DataConfig cfg_;
  uint8_t *my_ctl_ = nullptr;    // written by the peer (gate, big, its rings), by us (cpu, sleeping)
  uint8_t *peer_ctl_ = nullptr;  // the reverse
  uint8_t *slab_ = nullptr;
  bool staged_ = false;
  uint64_t chunk_ = 0;
  uint64_t ticket_ = 0;                // gates of any kind so far
  uint32_t prev_region_ = kNoRegion;   // in-region the previous gate wrote
  uint64_t big_sent_ = 0, big_got_ = 0;  // chunks over the pair's lifetime
  os::PeerWatch watch_;
  os::WaitPolicy policy_;
  os::SpinBudget budget_;  // the adaptive policy's window, learned across waits
};

template <class Ready>
int PushLink::wait(Ready &&ready, const uint64_t &deadline) {
  int r = ready();
  if (r != 0) return r > 0 ? DS4TP_OK : r;
  os::Waiter w(policy_, &watch_);
  if (shares_cpu_with_peer()) w.yield_instead();
  const Bell bell(my_ctl_ + kLineBell);
  for (;;) {
    if ((r = ready()) != 0) return r > 0 ? DS4TP_OK : r;
    const int rc = w.idle(deadline, [&](uint64_t left) {
      bell.sleep(ready, std::min(left, kSleepSliceNs));
    });
    if (rc != DS4TP_OK) return rc;
  }
}

}  // namespace ds4tp::shm
