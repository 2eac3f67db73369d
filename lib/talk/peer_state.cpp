#include "talk/peer_state.hpp"

#include <fmt/format.h>

#include "wire/gate_header.hpp"

namespace ds4tp::talk {

std::string PeerState::where_peer_is() const {
  const uint64_t g = peer_gate.load(std::memory_order_relaxed);
  const uint64_t seq = seq_of(g);
  if (heartbeats.load(std::memory_order_relaxed) == 0)
    return fmt::format("no heartbeat from the {} arrived yet", peer);
  if (seq == 0) return fmt::format("the {} is alive and has completed no gate yet", peer);
  return fmt::format("the {} is alive, its last completed gate is {} layer {} seq {}", peer,
                     wire::gate_kind_name(kind_of(g)), peer_layer.load(std::memory_order_relaxed),
                     seq);
}

std::string PeerState::silence() const {
  return fmt::format("the {} went silent: no heartbeat for {} ms (peer_silence_ms {}): it is "
                     "stopped, frozen, or the link is cut",
                     peer, silent_for_ns.load(std::memory_order_relaxed) / 1000000,
                     silence_ns / 1000000);
}

}  // namespace ds4tp::talk
