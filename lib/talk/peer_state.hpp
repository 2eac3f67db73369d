// The pair's knowledge of its peer's liveness, shared by the liveness
// watcher that writes it and every wait that reads it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "os/wait.hpp"

namespace ds4tp::talk {

// What this process knows about the peer's liveness, written by the pair's
// liveness watcher (talk/liveness.cpp) from the peer's heartbeats and read
// by every wait through os::PeerWatch (watch_peer below): the hot path
// reads one atomic. It also
// holds this rank's last completed gate, which the watcher puts in the
// heartbeats it sends, and the peer's, which it read from the last
// heartbeat. Owned by the pair; outlives every transport and the watcher.
struct PeerState {
  static constexpr uint32_t kAlive = 0;
  static constexpr uint32_t kSilent = 1;  // no heartbeat for silence_ns: stays
  std::atomic<uint32_t> verdict{kAlive};
  std::atomic<uint64_t> silent_for_ns{0};  // when judged silent, how long it had been
  uint64_t silence_ns = 0;                 // the limit (set before the watcher starts)
  const char *peer = "peer";               // "worker" / "leader", for messages
  // Last completed gates: kind and seq in one word (gate_word), so no
  // reader pairs one gate's kind with another's seq (the waits decide on
  // them), and the gate's layer beside it, for messages only.
  static constexpr int kSeqBits = 56;
  static uint64_t seq_of(uint64_t word) { return word & ((uint64_t(1) << kSeqBits) - 1); }
  static uint16_t kind_of(uint64_t word) { return uint16_t(word >> kSeqBits); }
  static uint64_t gate_word(uint16_t kind, uint64_t seq) {
    return uint64_t(kind) << kSeqBits | seq_of(seq);
  }
  std::atomic<uint64_t> my_gate{0}, my_layer{0};
  std::atomic<uint64_t> peer_gate{0}, peer_layer{0};
  // Gates entered so far (any kind): this rank's, counted as each gate
  // begins (the gate thread writes it), and the peer's from its heartbeat
  // (0 from a library that does not send it). In lockstep the counts name
  // the same gates, so a peer whose count has reached this rank's is in
  // this rank's gate or past it.
  std::atomic<uint64_t> my_entered{0}, peer_entered{0};
  std::atomic<uint64_t> heartbeats{0};     // received so far
  std::atomic<uint64_t> heartbeats_missed{0};  // our beat periods with none received (stats)

  bool silent() const { return verdict.load(std::memory_order_relaxed) == kSilent; }
  // True once the peer's heartbeats say it completed the gate of this
  // kind and seq (or a later one of the kind): it was there.
  bool peer_passed(uint16_t kind, uint64_t seq) const {
    const uint64_t w = peer_gate.load(std::memory_order_relaxed);
    return kind_of(w) == kind && seq_of(w) >= seq;
  }
  // True when the peer's heartbeats say it entered the gate this rank is
  // in (or a later one): it is there, its data lost if none came.
  bool peer_reached() const {
    const uint64_t mine = my_entered.load(std::memory_order_relaxed);
    return mine != 0 && peer_entered.load(std::memory_order_relaxed) >= mine;
  }
  // Either: the peer is in this rank's gate (of `kind` and `seq`) or past
  // it, so its data for the gate left it; a wait for them is bounded by
  // the gate's progress deadline, not the arrival one.
  bool peer_in_gate(uint16_t kind, uint64_t seq) const {
    return peer_passed(kind, seq) || peer_reached();
  }
  void entering() { my_entered.store(my_entered.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  void completed(uint16_t kind, uint32_t layer, uint64_t seq) {
    my_layer.store(layer, std::memory_order_relaxed);
    my_gate.store(gate_word(kind, seq), std::memory_order_relaxed);
  }
  // "the worker is alive, its last completed gate is row gate layer 12
  // seq 3409" (or "... has completed no gate yet"). Allocates: failures only.
  std::string where_peer_is() const;
  // "the worker went silent: no heartbeat for 1020 ms (peer_silence_ms
  // 1000): it is stopped, frozen, or the link is cut".
  std::string silence() const;
};

// Makes `watch` read `state`'s verdict at every check (nothing when null).
inline void watch_peer(os::PeerWatch &watch, const PeerState *state) {
  if (state == nullptr) return;
  watch.watch_silence([](const void *c) { return static_cast<const PeerState *>(c)->silent(); },
                      [](const void *c) { return static_cast<const PeerState *>(c)->silence(); },
                      state);
}

}  // namespace ds4tp::talk
