// Big gates over shm: meet, then stream kBigChunks chunks through each
// segment's big_in staging region, both directions at once.
#include "link/shm/pair_link_impl.hpp"

namespace ds4tp::shm {

int PushLink::big(uint32_t layer, uint64_t seq, const void *out, void *in,
                           uint64_t bytes, uint64_t start_ns, Error &err) {
  // The peer writes into this rank's big-in staging while the gate runs:
  // buffers there would be overwritten under the copy.
  auto overlaps = [&](const void *p) {
    return slab::ranges_overlap(p, bytes, mine_.base() + layout_.big_in, layout_.big_staging);
  };
  if (overlaps(out) || overlaps(in))
    return err.set(DS4TP_EINVAL,
                   "big gate (layer {}, seq {}) over shm: its {} buffer overlaps the slab's big-in "
                   "staging (offset {}, {} bytes), where the peer's bytes land; pass other memory",
                   layer, seq, overlaps(out) ? "out" : "in", layout_.big_in, layout_.big_staging);
  GateHeader h{uint16_t(GateKind::Big), layer, 0, seq, bytes};
  const uint64_t t = ++ticket_;
  prev_region_ = kNoRegion;  // staging has its own flow control
  bool peer_met = false;
  seen_ns_ = 0;
  auto meet = [&]() -> int {
    int m = met(h, t, err);
    if (m > 0) peer_met = true;
    return m;
  };
  // Meet: the peer may be a prefill step behind.
  announce(h, t, true);
  const uint64_t arrival = cfg_.arrival(true);
  uint64_t deadline = os::deadline_after(start_ns, arrival);
  int rc = wait(meet, deadline);
  if (rc != DS4TP_OK) return fail(h, rc, peer_met, arrival, err);
  publish(gate_line(peer_ctl_, t) + kDone, t);

  // Stream: chunk i of the pair's life goes to staging slot i % kBigChunks
  // once the peer has drained chunk i - kBigChunks from it.
  const auto *src = static_cast<const uint8_t *>(out);
  auto *dst = static_cast<uint8_t *>(in);
  const uint64_t chunks = (bytes + chunk_ - 1) / chunk_;
  const uint64_t send_end = big_sent_ + chunks, recv_end = big_got_ + chunks;
  uint64_t sent_bytes = 0, got_bytes = 0;
  uint8_t *const peer_staging = peer_.base() + layout_.big_in;
  uint8_t *const my_staging = mine_.base() + layout_.big_in;
  uint8_t *const my_big = my_ctl_ + kLineBig;
  uint8_t *const peer_big = peer_ctl_ + kLineBig;
  auto can_send = [&] {
    return big_sent_ < send_end &&
           big_sent_ - word(my_big + kDrained).load(std::memory_order_acquire) < kBigChunks;
  };
  auto can_recv = [&] {
    return big_got_ < recv_end &&
           word(my_big + kFilled).load(std::memory_order_acquire) > big_got_;
  };
  seen_ns_ = now_ns();  // met: the rest is moving bytes, with its own deadline
  deadline = seen_ns_ + cfg_.big_gate_timeout_ns;
  while (big_sent_ < send_end || big_got_ < recv_end) {
    bool progress = false;
    if (can_send()) {
      uint64_t n = std::min(chunk_, bytes - sent_bytes);
      copy(peer_staging + (big_sent_ % kBigChunks) * chunk_, src + sent_bytes, n);
      sent_bytes += n;
      publish(peer_big + kFilled, ++big_sent_);
      progress = true;
    }
    if (can_recv()) {
      uint64_t n = std::min(chunk_, bytes - got_bytes);
      std::memcpy(dst + got_bytes, my_staging + (big_got_ % kBigChunks) * chunk_, n);
      got_bytes += n;
      publish(peer_big + kDrained, ++big_got_);
      progress = true;
    }
    if (progress) {
      deadline = now_ns() + cfg_.big_gate_timeout_ns;
      continue;
    }
    rc = wait([&]() -> int { return can_send() || can_recv() ? 1 : 0; }, deadline);
    if (rc != DS4TP_OK) return fail(h, rc, true, cfg_.big_gate_timeout_ns, err);
  }
  // Zero chunks: the peer's done still says it read our header.
  rc = wait([&]() -> int { return done(t) ? 1 : 0; }, deadline);
  if (rc != DS4TP_OK) return fail(h, rc, true, cfg_.big_gate_timeout_ns, err);
  return DS4TP_OK;
}

}  // namespace ds4tp::shm
