#include "link/rdma/group_link.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "link/rdma/setup_link.hpp"
#include "link/rdma/pair_link.hpp"
#include "wire/rdma_frames.hpp"

namespace ds4tp::rdma {
namespace {

constexpr uint32_t kMaxIndex = 0xffff;  // messages of one step (the tag's index)

size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

bool raised(const void *ctx) {
  return static_cast<const std::atomic<bool> *>(ctx)->load(std::memory_order_acquire);
}

// Ring bytes for one peer: two steps of header + chunk at any message
// size up to `cap` (the last message of each step may be short).
size_t ring_bytes(size_t chunk, uint32_t cap) {
  return round_up(2 * (kRoom + chunk + cap), 64);
}

}  // namespace

uint32_t group_tag(uint64_t step, uint32_t index) {
  return (kTagGroupKind << 28) | ((uint32_t(step) & 0xfffu) << 16) | (index & kMaxIndex);
}

struct Mesh::Link {
  QpLink q;  // receive i sits in ring slot i % slots
  std::unique_ptr<SetupLink> setup;
  uint32_t slots = 0;
  uint8_t *ring = nullptr;
  std::vector<Completion> early;  // the next step's receives, polled during this one
  size_t early_at = 0;
  // The step in progress.
  const uint8_t *out = nullptr;
  uint64_t out_len = 0, in_len = 0, got = 0, out_msgs = 0, out_posted = 0;
  uint32_t got_msgs = 0;
  bool recv = false;
  bool busy() const { return recv || out_posted < out_msgs || q.send_done < q.send_posted; }
};

Mesh::Mesh(std::unique_ptr<Device> dev, int rank, int n, const MeshConfig &cfg)
    : dev_(std::move(dev)), rank_(rank), n_(n), cfg_(cfg), links_(size_t(n)),
      region_(nullptr, std::free), policy_(cfg.policy) {
  os::set_spin(policy_, budget_, cfg.policy.spin_ns, cfg.adaptive);  // keeps yield_ns
  policy_.clock_every = 8;
  policy_.grace_ns = kGoneGraceNs;
}

Mesh::~Mesh() {
  links_.clear();  // queue pairs before the memory and the device
  if (registered_) dev_->deregister_memory();
  dev_.reset();
}

int Mesh::open(std::unique_ptr<Device> dev, const std::string &none_why, const MeshConfig &cfg,
               std::unique_ptr<Mesh> &out, std::string &why, Error &err) {
  const bool have = dev != nullptr;
  std::unique_ptr<Mesh> m(new Mesh(std::move(dev), cfg.rank, int(cfg.fds.size()), cfg));
  why = have ? "" : none_why;
  if (int rc = m->setup(cfg.fds, why, err)) return rc;
  if (why.empty()) out = std::move(m);
  return DS4TP_OK;
}

void Mesh::adopt(std::vector<net::Fd> fds) { fds_ = std::move(fds); }

std::string Mesh::describe() const {
  for (int r = 0; r < n_; r++)
    if (r != rank_)
      return fmt::format("{} {}, {} byte messages", dev_->describe(),
                         wire::qp_type_name(links_[size_t(r)].q.qp->local_info().qp_type),
                         links_[size_t(r)].q.msg);
  return dev_->describe();
}

// This rank's part, before any trade: the registered region (send staging,
// then a ring per peer) and a queue pair per peer. `why` on failure.
int Mesh::prepare_local(std::string &why, Error &err) {
  const size_t ring = ring_bytes(cfg_.chunk, cfg_.max_msg);
  staging_bytes_ = round_up(cfg_.chunk + size_t(n_) * 2 * kRoom, 64);
  region_bytes_ = round_up(staging_bytes_ + size_t(n_ - 1) * ring, 4096);
  region_.reset(static_cast<uint8_t *>(std::aligned_alloc(4096, region_bytes_)));
  if (!region_) return err.set(DS4TP_ENOMEM, "rdma: {} bytes for the group's links", region_bytes_);
  landing_.assign(size_t(n_) * (kRoom + cfg_.chunk), 0);
  uint32_t rkey = 0;
  Error e;
  if (dev_->register_memory(region_.get(), region_bytes_, rkey, e) != DS4TP_OK) {
    why = fmt::format("registering {} bytes with {} failed: {}", region_bytes_, dev_->describe(),
                      e.message);
    return DS4TP_OK;
  }
  registered_ = true;
  QpRequest req;
  req.max_msg = cfg_.max_msg;
  // Enough receives for the ring at Apple's 16 KiB messages.
  const uint32_t at16k = uint32_t(2 * ((kRoom + cfg_.chunk + 16383) / 16384));
  req.recv_depth = std::max(req.recv_depth, at16k);
  int idx = 0;
  for (int r = 0; r < n_; r++) {
    if (r == rank_) continue;
    Link &l = links_[size_t(r)];
    l.ring = region_.get() + staging_bytes_ + size_t(idx++) * ring;
    if (dev_->create_qp(req, l.q.qp, e) != DS4TP_OK) {
      why = fmt::format("creating a queue pair for rank {} on {}: {}", name(r), dev_->describe(),
                        e.message);
      return DS4TP_OK;
    }
  }
  return DS4TP_OK;
}

int Mesh::setup(const std::vector<int> &fds, std::string &why, Error &err) {
  const uint64_t deadline = cfg_.setup_deadline_ns;
  if (why.empty())
    if (int rc = prepare_local(why, err)) return rc;
  const bool can = why.empty();
  // Everything out first (a few hundred bytes a link: the socket buffers
  // hold them), then everything in, so no two ranks wait on each other.
  for (int r = 0; r < n_; r++) {
    if (r == rank_) continue;
    Link &l = links_[size_t(r)];
    net::set_nonblocking(fds[size_t(r)]);
    l.setup = make_socket_setup_link(fds[size_t(r)]);
    uint8_t status[wire::kLinkStatusMax];
    const size_t len = wire::encode_link_status(can, why, status);
    if (int rc = net::write_all(fds[size_t(r)], status, len, deadline, "rdma link status", err))
      return err.set(rc, "rdma set-up with rank {}: {}", name(r), err.message);
    if (!can) continue;
    wire::RdmaInfo mine = l.q.qp->local_info();
    mine.slab_addr = reinterpret_cast<uintptr_t>(l.ring);
    mine.slab_bytes = ring_bytes(cfg_.chunk, cfg_.max_msg);
    uint8_t buf[wire::kRdmaInfoPayload];
    wire::encode_rdma_info(mine, buf);
    if (int rc = l.setup->send(wire::kFrameRdmaInfo, buf, sizeof buf, deadline, err))
      return err.set(rc, "rdma set-up with rank {}: {}", name(r), err.message);
  }
  std::vector<wire::RdmaInfo> peer(static_cast<size_t>(n_));
  for (int r = 0; r < n_; r++) {
    if (r == rank_) continue;
    Link &l = links_[size_t(r)];
    uint8_t status[wire::kLinkStatusMax];
    size_t have = 0, need = 1;
    bool peer_can = false;
    std::string peer_why;
    while (have < need) {
      if (int rc = net::read_exact(fds[size_t(r)], status + have, need - have, deadline,
                                   "rdma link status", err))
        return err.set(rc, "rdma set-up with rank {}: {}", name(r), err.message);
      have = need;
      if (int rc = wire::decode_link_status(status, have, peer_can, peer_why, need, err))
        return err.set(rc, "rdma set-up with rank {}: {}", name(r), err.message);
    }
    if (!peer_can) {
      if (why.empty()) why = fmt::format("rank {} cannot: {}", name(r), peer_why);
      continue;
    }
    uint8_t buf[wire::kRdmaInfoPayload];
    if (int rc = l.setup->recv(wire::kFrameRdmaInfo, buf, sizeof buf, deadline, err))
      return err.set(rc, "rdma set-up with rank {}: {}", name(r), err.message);
    if (int rc = wire::decode_rdma_info(buf, sizeof buf, peer[size_t(r)], err))
      return err.set(rc, "rdma set-up with rank {}: {}", name(r), err.message);
  }
  if (!why.empty()) return DS4TP_OK;
  for (int r = 0; r < n_ && why.empty(); r++) {
    if (r == rank_) continue;
    Link &l = links_[size_t(r)];
    const wire::RdmaInfo mine = l.q.qp->local_info(), &p = peer[size_t(r)];
    if (p.qp_type != mine.qp_type) {
      why = fmt::format("this rank made an {} queue pair for rank {}, which made an {} one",
                        wire::qp_type_name(mine.qp_type), name(r), wire::qp_type_name(p.qp_type));
      break;
    }
    l.q.msg = std::min({mine.max_msg, p.max_msg, cfg_.max_msg});
    l.q.rdepth = std::min(mine.recv_depth, p.recv_depth);
    l.q.sdepth = std::min(mine.send_depth, p.send_depth);
    l.slots = 2 * l.q.messages(kRoom + cfg_.chunk);
    if (l.slots > l.q.rdepth || l.slots / 2 > kMaxIndex) {
      why = fmt::format("a receive queue of {} cannot hold the {} receives that two steps of "
                        "{} bytes take at {} byte messages (lower chunk_bytes)",
                        l.q.rdepth, l.slots, cfg_.chunk, l.q.msg);
      break;
    }
    Error e;
    if (l.q.qp->connect(p, e) != DS4TP_OK || post_ring(l, l.slots, e) != DS4TP_OK)
      why = fmt::format("the queue pair to rank {}: {}", name(r), e.message);
    l.early.reserve(l.slots);
  }
  return DS4TP_OK;
}

// Posts `count` more receives of link `l`'s ring, each into its slot.
int Mesh::post_ring(Link &l, uint64_t count, Error &err) {
  return l.q.post_recvs(count, [&l](uint64_t, RecvWork &w) {
    w.addr = l.ring + (w.wr_id % l.slots) * l.q.msg;
    w.bytes = l.q.msg;
  }, err);
}

int Mesh::step(Step &h, Error &err) {
  if (aborted()) return err.set(DS4TP_EFAILED, "group failed: marked failed");
  if (h.gate != nullptr)  // a pair over rdma writes its gates into the slab (transport.cpp)
    return err.set(DS4TP_EINVAL, "a pair's gate is not a step of an rdma group's mesh");
  const uint8_t *const *src = h.src;
  const int root = h.root;
  const void **views = h.views;
  const uint64_t timeout = h.progress_ns != 0 ? h.progress_ns : cfg_.timeout_ns;
  bool shared = h.sizes_out == nullptr;
  for (int r = 0; src != nullptr && r < n_; r++) shared = shared && src[r] == src[0];
  // Each peer's message goes from the registered staging: once for all
  // when they get the same bytes, else one after another.
  uint8_t *const stage = region_.get();
  size_t off = 0;
  const uint8_t *placed = nullptr;
  for (int r = 0; r < n_; r++) {
    views[r] = nullptr;
    if (r == rank_) continue;
    Link &l = links_[size_t(r)];
    const uint64_t body_out = h.out_to(r);
    if (placed == nullptr || !shared) {
      if (off + h.size + body_out > staging_bytes_)
        return err.set(DS4TP_EINVAL, "step {}: {} bytes for {} ranks exceed the staging", h.number,
                       body_out, n_);
      if (h.sizes_out != nullptr)
        h.encode(h, body_out, stage + off);
      else
        std::memcpy(stage + off, h.header_for(body_out), h.size);
      if (body_out > 0) std::memcpy(stage + off + h.size, src[r], body_out);
      placed = stage + off;
      off += round_up(h.size + body_out, 64);
    }
    l.out = placed;
    l.out_len = h.size + body_out;
    l.out_msgs = l.q.messages(l.out_len);
    l.out_posted = 0;
    l.in_len = h.size + h.in_from(r);
    l.got = 0;
    l.got_msgs = 0;
    l.recv = true;
  }
  if (src != nullptr) views[rank_] = src[rank_];
  os::PeerWatch watch;
  watch.watch_flag(raised, &aborted_);
  for (int r = 0; r < n_; r++)
    if (r != rank_ && size_t(r) < fds_.size() && fds_[size_t(r)].valid())
      watch.watch_socket(fds_[size_t(r)].get(), "tcp link", r);
  std::optional<os::Waiter> w;
  uint64_t deadline = 0, began = 0;
  bool met = h.arrival_ns == 0;  // every member sent some of the step (arrival over)
  int pending = n_ - 1;
  while (pending > 0) {
    bool moved = false;
    for (int r = 0; r < n_; r++) {
      Link &l = links_[size_t(r)];
      if (r == rank_ || !l.busy()) continue;
      if (int rc = pump(h, r, moved, err)) return fail(rc, r);
      if (!l.busy()) {
        pending--;
        if (h.sizes_in != nullptr ? h.sizes_in[r] > 0 : root < 0 || r == root)
          views[r] = landing_.data() + size_t(r) * (kRoom + cfg_.chunk) + kRoom;
      }
    }
    if (moved) count_moved();
    if (pending == 0) break;
    const bool met_before = met;
    if (!met) {
      met = true;
      for (int r = 0; r < n_ && met; r++)
        met = r == rank_ || links_[size_t(r)].got > 0 ||
              (h.in_call != nullptr && h.in_call(h.in_call_ctx, r));
    }
    if (!w) {
      w.emplace(policy_, &watch);
      began = w->now();
      deadline = met ? os::deadline_after(began, timeout) : os::deadline_after(began, h.arrival_ns);
    } else if (moved) {
      w->progress();
      deadline = met ? os::deadline_after(w->last_progress(), timeout)
                     : os::deadline_after(began, h.arrival_ns);
    } else if (met != met_before) {  // every member in: the progress deadline from now
      deadline = os::deadline_after(w->now(), timeout);
    }
    if (moved) continue;
    const int rc = w->idle(deadline, [&](uint64_t left) { watch.nap(std::min(left, kNapNs)); });
    if (rc == DS4TP_ETIMEDOUT && !met) {
      int late = 0;
      while (late < n_ && (late == rank_ || links_[size_t(late)].got > 0 ||
                           (h.in_call != nullptr && h.in_call(h.in_call_ctx, late))))
        late++;
      culprit_ = late;
      return err.set(DS4TP_ETIMEDOUT, "step {}: rank {} did not reach it within {} ms "
                     "(peer_arrival_timeout_ms; it was alive all along)",
                     h.number, name(late), h.arrival_ns / 1'000'000);
    }
    if (rc == DS4TP_ETIMEDOUT) {
      int late = 0;
      while (late < n_ && (late == rank_ || !links_[size_t(late)].busy())) late++;
      culprit_ = late;
      return err.set(DS4TP_ETIMEDOUT, "step {}: rank {} made no progress within {} ms", h.number,
                     name(late), timeout / 1'000'000);
    }
    if (rc != DS4TP_OK && watch.socket_tag() >= 0) {
      culprit_ = watch.socket_tag();
      return err.set(DS4TP_EPEERCLOSED, "rank {} closed its connection (step {})", name(culprit_),
                     h.number);
    }
    if (rc != DS4TP_OK) return err.set(DS4TP_EFAILED, "group failed: marked failed");
  }
  return DS4TP_OK;
}

// Posts what link r's send queue has room for, takes the receives polled
// early, then polls its completions once.
int Mesh::pump(const Step &h, int r, bool &moved, Error &err) {
  Link &l = links_[size_t(r)];
  const uint64_t posted = l.out_posted;
  const uint32_t msg = l.q.msg;
  if (int rc = l.q.post_sends(l.out_msgs, l.out_posted, [&](uint64_t k, SendWork &s) {
        s.addr = l.out + k * msg;
        s.bytes = l.q.piece(k, l.out_len);
        s.imm = group_tag(h.number, uint32_t(k));
      }, err))
    return err.set(rc, "rdma step {} with rank {}: {}", h.number, name(r), err.message);
  moved = moved || l.out_posted != posted;
  while (l.recv && l.early_at < l.early.size()) {
    if (int rc = take(h, r, l.early[l.early_at++], err)) return rc;
    moved = true;
  }
  if (l.early_at == l.early.size()) l.early.clear(), l.early_at = 0;
  if (!l.busy()) return DS4TP_OK;
  int judged = DS4TP_OK;  // take()'s verdict, worded already
  const int k = l.q.poll([&](const Completion &c) {
    if (!l.recv) {
      l.early.push_back(c);  // reserved for a whole ring: no allocation
      return int(DS4TP_OK);
    }
    return judged = take(h, r, c, err);
  }, err);
  if (k < 0 && judged != DS4TP_OK) return judged;
  if (k < 0) return err.set(k, "rdma step {} with rank {}: {}", h.number, name(r), err.message);
  if (k > 0) moved = true;
  return DS4TP_OK;
}

// One of rank r's messages of this step (its status and place checked by
// the link): its tag and length checked, copied to its landing, and its
// receive posted again.
int Mesh::take(const Step &h, int r, const Completion &c, Error &err) {
  Link &l = links_[size_t(r)];
  const uint32_t want = group_tag(h.number, l.got_msgs);
  if (!c.has_imm || c.imm != want)
    return err.set(DS4TP_EDESYNC,
                   "rank {}: message {} of step {} was due but tag {:#010x} arrived (a message "
                   "was lost on the link, or the ranks are on different steps)",
                   name(r), l.got_msgs, h.number, c.has_imm ? c.imm : 0);
  const uint8_t *slot = l.ring + (c.wr_id % l.slots) * l.q.msg;
  const uint64_t left = l.in_len - l.got;
  const size_t keep = size_t(std::min<uint64_t>(c.bytes, left));
  uint8_t *landing = landing_.data() + size_t(r) * (kRoom + cfg_.chunk) + kRoom;
  std::memcpy(landing - h.size + l.got, slot, keep);
  const bool header_done = l.got < h.size && l.got + keep >= h.size;
  l.got += keep;
  l.got_msgs++;
  if (int rc = post_ring(l, 1, err))
    return err.set(rc, "rdma: posting a receive for rank {} failed: {}", name(r), err.message);
  if (header_done)
    if (int rc = h.check(landing - h.size, h, l.in_len - h.size, name(r), err)) return rc;
  if (c.bytes != std::min<uint64_t>(l.q.msg, left))
    return err.set(DS4TP_EDESYNC, "rank {} sent {} bytes as message {} of step {}, {} expected",
                   name(r), c.bytes, l.got_msgs - 1, h.number, std::min<uint64_t>(l.q.msg, left));
  if (l.got == l.in_len) l.recv = false;
  return DS4TP_OK;
}

void Mesh::abort(int, int) {
  aborted_.store(true, std::memory_order_release);
  for (auto &f : fds_)
    if (f.valid()) ::shutdown(f.get(), SHUT_RDWR);
}

}  // namespace ds4tp::rdma
