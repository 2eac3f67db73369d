// Row and batch gates over shm (docs/PROTOCOL.md 3.3), the control page
// header both ranks check at set-up, and the transport's factory.
#include "link/shm/pair_link_impl.hpp"

#include <unistd.h>

namespace ds4tp {
namespace shm {

int PushLink::small_exchange(const GateHeader &h, uint32_t region, uint64_t out_off,
                                 uint64_t in_off, uint64_t bytes, uint64_t flag_off,
                                 uint64_t start_ns, Error &err) {
  const uint64_t t = ++ticket_;
  // The peer may read in[region] until it enters its next gate: when the
  // previous gate wrote the same region, wait for the peer to arrive first.
  const bool reuse = region == prev_region_;
  prev_region_ = region;
  uint8_t *const peer = peer_.base();
  uint8_t *const line = gate_line(peer_ctl_, t);
  const uint64_t arrival = cfg_.arrival(false);
  uint64_t deadline = os::deadline_after(start_ns, arrival);
  bool peer_met = false;
  seen_ns_ = 0;
  // Our payload lands and is published before we look for the peer, so a
  // peer that arrives later finds everything in place and never waits for
  // us to wake up.
  auto land = [&] {
    copy(peer + in_off, slab_ + out_off, bytes);
    if (flag_off != kNoFlag) word(peer + flag_off).store(h.seq, std::memory_order_release);
    publish(line + kDone, t);
  };
  announce(h, t, reuse);
  if (!reuse) land();
  int rc = wait(
      [&]() -> int {
        if (!peer_met) {
          int m = met(h, t, err);
          if (m <= 0) return m;
          peer_met = true;
          // The peer showed up: progress, and the moment peer_seen_ns() reports.
          seen_ns_ = now_ns();
          deadline = seen_ns_ + cfg_.gate_timeout_ns;
          if (reuse) land();
        }
        return done(t) ? 1 : 0;
      },
      deadline);
  if (rc != DS4TP_OK)
    return fail(h, rc, peer_met, peer_met ? cfg_.gate_timeout_ns : arrival, err);
  if (staged_) {
    std::memcpy(slab_ + in_off, mine_.base() + in_off, bytes);
    if (flag_off != kNoFlag) word(slab_ + flag_off).store(h.seq, std::memory_order_release);
  }
  return DS4TP_OK;
}

namespace {

void write_ctl_header(uint8_t *ctl, uint64_t slab_bytes) {
  uint8_t *h = ctl + kLineHeader;
  word32(h).store(kCtlMagic, std::memory_order_relaxed);
  word32(h + 4).store(kCtlVersion, std::memory_order_relaxed);
  word(h + 8).store(slab_bytes, std::memory_order_relaxed);
  word(h + 16).store(uint64_t(getpid()), std::memory_order_relaxed);
}

}  // namespace

void init_control_page(const Segment &mine, const slab::Layout &layout) {
  write_ctl_header(mine.base() + layout.total, layout.total);
}

int check_control_page(const Segment &peer, const slab::Layout &layout, Error &err) {
  uint8_t *ph = peer.base() + layout.total + kLineHeader;
  uint32_t magic = word32(ph).load(std::memory_order_relaxed);
  uint32_t version = word32(ph + 4).load(std::memory_order_relaxed);
  uint64_t slab = word(ph + 8).load(std::memory_order_relaxed);
  if (magic != kCtlMagic || version != kCtlVersion || slab != layout.total)
    return err.set(DS4TP_EPROTO,
                   "the peer's shm segment has control magic 0x{:08x} version {} slab {} "
                   "bytes; expected 0x{:08x} version {} slab {} bytes",
                   magic, version, slab, kCtlMagic, kCtlVersion, layout.total);
  return DS4TP_OK;
}

std::unique_ptr<link::Link> make_transport(net::Fd fd, Segment mine, Segment peer, pid_t peer_pid,
                                          uint64_t peer_start, const slab::Layout &layout,
                                          const DataConfig &cfg) {
  return std::make_unique<PushLink>(std::move(fd), std::move(mine), std::move(peer),
                                        peer_pid, peer_start, layout, cfg);
}

}  // namespace shm

uint64_t shm_segment_bytes(const slab::Layout &layout) { return layout.total + shm::kCtlBytes; }

}  // namespace ds4tp
