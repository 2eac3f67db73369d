// The collectives of a tiered group (group/layout.hpp): the ranks of a
// host meet over shm at their leader, the leaders meet over tcp, and each
// leader hands the result back to its host's ranks. A host with one rank
// has no shm step; a leader takes part in both lanes. Every lane numbers
// its own steps, so the hosts' shm steps need not line up with each
// other, only within a host.
#include <algorithm>
#include <cstring>
#include <exception>

#include "common/clock.hpp"
#include "group/group.hpp"

namespace ds4tp::group {
namespace {

const uint8_t kNone = 0;

// A collective's time in its host steps and its steps across, for the
// stats' step histograms (when the group times its calls).
class LaneClock {
 public:
  explicit LaneClock(bool on) : on_(on) {}
  uint64_t start() const { return on_ ? now_ns() : 0; }
  void host(uint64_t t0) { if (on_) host_ += now_ns() - t0; }
  void across(uint64_t t0) { if (on_) across_ += now_ns() - t0; }
  void add_across(uint64_t ns) { across_ += ns; }
  void report(stats::Stats &s, bool has_host, bool has_across) const {
    if (!on_) return;
    if (has_host) s.steps_done(stats::hHostStep, host_);
    if (has_across) s.steps_done(stats::hAcrossStep, across_);
  }

 private:
  bool on_;
  uint64_t host_ = 0, across_ = 0;
};

}  // namespace

// Host-major: the leader sums its host's vectors in local order, the
// leaders all-reduce those sums in host order (one-shot or two-shot by
// the tcp thresholds), and each leader hands the result back, so every
// rank has the leaders' bits.
int Group::tiered_all_reduce(uint8_t *p, uint64_t count, Dtype t, Op op, Error &err) {
  const size_t esz = dtype_bytes(t);
  const uint64_t per = opt_.chunk_bytes / esz;
  if (local_ && count > per) return pipelined_all_reduce(p, count, t, op, err);
  const bool leader = layout_.leader();
  LaneClock clock(stats_.timed());
  uint64_t off = 0;
  do {
    const uint64_t m = std::min(count - off, per);
    uint8_t *q = p + off * esz;
    uint64_t t0 = clock.start();
    if (local_) {
      if (int rc = host_sum(q, m, t, op, err)) return rc;
      clock.host(t0);
      t0 = clock.start();
    }
    if (cross_) {
      if (int rc = reduce(cross_, q, m, t, op, err, count * esz)) return rc;
      clock.across(t0);
      t0 = clock.start();
    }
    if (local_) {
      if (int rc = rooted_step(local_, q, m * esz, 0, leader, err)) return rc;
      clock.host(t0);
    }
    off += m;
  } while (off < count);
  clock.report(stats_, local_.link != nullptr, cross_.link != nullptr);
  return DS4TP_OK;
}

// The host's vectors of chunk q at the leader, summed in local order.
int Group::host_sum(uint8_t *q, uint64_t m, Dtype t, Op op, Error &err) {
  const void *views[kMaxRanks];
  const uint64_t s = ++local_.step;
  if (int rc = local_.exchange(s, q, m * dtype_bytes(t), -1, views, err))
    return finish(local_, rc, err);
  if (layout_.leader()) group::reduce(t, op, views, local_.n, q, size_t(m));
  local_.done(s);
  if (cross_ && !host_marked_) {  // before the call's first step across (no worker runs yet)
    host_marked_ = true;
    cross_.mark = latest_mark(local_.mark, local_.marks);
  }
  return DS4TP_OK;
}

int Group::cross_chunk(void *self, uint8_t *q, uint64_t m, Error &err) {
  auto *g = static_cast<Group *>(self);
  return g->reduce(g->cross_, q, m, g->worker_dtype_, g->worker_op_, err, g->worker_call_bytes_);
}

// A call of several chunks on a host of several ranks: the leader's
// second thread (CrossWorker) takes chunk k across hosts while this
// thread sums chunk k + 1 on the host, then hands chunk k back. Every
// rank of the host runs its shm steps in this order: sum 0, sum 1, hand
// back 0, sum 2, hand back 1, ..., hand back the last; the bits are
// tiered_all_reduce's. A failure on either thread aborts both lanes, and
// the call returns only once the chunk across hosts has stopped (it is
// in the caller's buffer).
int Group::pipelined_all_reduce(uint8_t *p, uint64_t count, Dtype t, Op op, Error &err) {
  const size_t esz = dtype_bytes(t);
  const uint64_t per = opt_.chunk_bytes / esz;
  const bool leader = layout_.leader() && cross_.link != nullptr;
  if (leader && !worker_) {
    try {
      worker_ = std::make_unique<CrossWorker>(&Group::cross_chunk, this);
    } catch (const std::exception &e) {  // no thread: the group fails, every rank told why
      err.set(DS4TP_ENOMEM, "all_reduce: the leader's thread across hosts: {}", e.what());
      return finish(local_, DS4TP_ENOMEM, err);
    }
  }
  worker_dtype_ = t;
  worker_op_ = op;
  worker_call_bytes_ = count * esz;
  LaneClock clock(stats_.timed());
  uint64_t across_ns = 0, prev = 0, prev_m = 0;
  bool pending = false;
  int rc = DS4TP_OK;
  for (uint64_t off = 0;; off += per) {
    const bool more = off < count;
    const uint64_t m = more ? std::min(count - off, per) : 0;
    uint64_t t0 = clock.start();
    if (more && (rc = host_sum(p + off * esz, m, t, op, err)) != DS4TP_OK) break;
    clock.host(t0);
    if (pending) {
      if (leader && (rc = worker_->wait(err, across_ns)) != DS4TP_OK) break;
      t0 = clock.start();
      if ((rc = rooted_step(local_, p + prev * esz, prev_m * esz, 0, leader, err)) != DS4TP_OK)
        break;
      clock.host(t0);
      pending = false;
    }
    if (!more) break;
    if (leader) worker_->post(p + off * esz, m);
    pending = true, prev = off, prev_m = m;
  }
  if (leader && worker_->busy()) {  // failed here: the lanes are aborted, the chunk stops
    Error ignored;
    worker_->wait(ignored, across_ns);
  }
  if (rc != DS4TP_OK) return rc;
  clock.add_across(across_ns);
  clock.report(stats_, true, leader);
  return DS4TP_OK;
}

// Each step moves `m` bytes of every rank: the host's pieces to the
// leader (packed in local order in scratch_), the packs between leaders
// (each padded to the largest host's), then the whole row of the step in
// rank order from the leader to its ranks.
int Group::tiered_all_gather(const uint8_t *src, uint8_t *dst, uint64_t bytes, Error &err) {
  const uint64_t n = uint64_t(opt_.size);
  const uint64_t per = std::max<uint64_t>(1, opt_.chunk_bytes / n);
  const uint64_t widest = layout_.most_on_a_host();
  const bool leader = layout_.leader();
  const void *views[kMaxRanks];
  LaneClock clock(stats_.timed());
  uint64_t off = 0;
  do {
    const uint64_t m = std::min(bytes - off, per);
    uint64_t t0 = clock.start();
    if (local_) {
      const uint64_t s = ++local_.step;
      if (int rc = local_.exchange(s, src + off, m, -1, views, err))
        return finish(local_, rc, err);
      if (leader && m)
        for (int i = 0; i < local_.n; i++) std::memcpy(scratch_ + uint64_t(i) * m, views[i], m);
      local_.done(s);
    } else if (m) {
      std::memcpy(scratch_, src + off, m);
    }
    clock.host(t0);
    t0 = clock.start();
    if (cross_) {
      // Every host sends the widest host's pack; a narrower one pads it
      // with zeros rather than an earlier call's bytes.
      const uint64_t filled = uint64_t(layout_.mine().size()) * m;
      if (filled < widest * m) std::memset(scratch_ + filled, 0, widest * m - filled);
      const uint64_t s = ++cross_.step;
      if (int rc = cross_.exchange(s, scratch_, widest * m, -1, views, err))
        return finish(cross_, rc, err);
      for (int h = 0; h < layout_.hosts() && m; h++) {
        const auto &ranks = layout_.ranks_of[size_t(h)];
        const auto *pack = static_cast<const uint8_t *>(views[h]);
        for (size_t i = 0; i < ranks.size(); i++)
          std::memcpy(dst + uint64_t(ranks[i]) * bytes + off, pack + i * m, m);
      }
      cross_.done(s);
      clock.across(t0);
    }
    t0 = clock.start();
    if (local_) {
      if (leader && m)
        for (uint64_t r = 0; r < n; r++) std::memcpy(scratch_ + r * m, dst + r * bytes + off, m);
      const uint64_t s = ++local_.step;
      if (int rc = local_.exchange(s, leader ? scratch_ : nullptr, n * m, 0, views, err))
        return finish(local_, rc, err);
      const auto *row = static_cast<const uint8_t *>(views[0]);
      if (!leader && m)
        for (uint64_t r = 0; r < n; r++) std::memcpy(dst + r * bytes + off, row + r * m, m);
      local_.done(s);
    }
    clock.host(t0);
    off += m;
  } while (off < bytes);
  clock.report(stats_, local_.link != nullptr, cross_.link != nullptr);
  return DS4TP_OK;
}

// One step of lane `l` from member `root` (this rank when `give`): its
// `m` bytes at q land at q on every other member.
int Group::rooted_step(Lane &l, uint8_t *q, uint64_t m, int root, bool give, Error &err) {
  const void *views[kMaxRanks];
  const uint64_t s = ++l.step;
  if (int rc = l.exchange(s, give ? q : nullptr, m, root, views, err)) return finish(l, rc, err);
  if (!give && m) std::memcpy(q, views[root], m);
  l.done(s);
  return DS4TP_OK;
}

// The root's host first hands the bytes to all its ranks (leader
// included) when the root is not its leader; the leaders pass them on
// from the root's host; every other host's leader hands them out (the
// root's too when the root leads it). Where the root's host already has
// the bytes, its ranks still wait for their leader's stamp after the
// leaders' step, so no rank finishes a broadcast whose cross-host step
// failed (one verdict per call).
int Group::tiered_broadcast(uint8_t *p, uint64_t bytes, int root, Error &err) {
  const int rh = int(layout_.host_of[size_t(root)]);
  const auto &rr = layout_.ranks_of[size_t(rh)];
  const int rl = int(std::find(rr.begin(), rr.end(), root) - rr.begin());
  const bool home = layout_.host == rh, leader = layout_.leader(), me = root == opt_.rank;
  const void *views[kMaxRanks];
  LaneClock clock(stats_.timed());
  uint64_t off = 0;
  do {
    const uint64_t m = std::min<uint64_t>(bytes - off, opt_.chunk_bytes);
    uint8_t *q = p + off;
    uint64_t t0 = clock.start();
    if (local_ && home && rl != 0)
      if (int rc = rooted_step(local_, q, m, rl, me, err)) return rc;
    clock.host(t0);
    t0 = clock.start();
    if (cross_) {
      if (int rc = rooted_step(cross_, q, m, rh, home, err)) return rc;
      clock.across(t0);
    }
    t0 = clock.start();
    if (local_ && (!home || rl == 0)) {
      if (int rc = rooted_step(local_, q, m, 0, leader, err)) return rc;
    } else if (local_) {  // the bytes are here: the leader's stamp alone
      const uint64_t s = ++local_.step;
      if (int rc = local_.exchange(s, &kNone, 0, -1, views, err)) return finish(local_, rc, err);
      local_.done(s);
    }
    clock.host(t0);
    off += m;
  } while (off < bytes);
  clock.report(stats_, local_.link != nullptr, cross_.link != nullptr);
  return DS4TP_OK;
}

// Every rank of a host at its leader, the leaders with each other, then
// the leaders release their hosts.
int Group::tiered_barrier(Error &err) {
  const void *views[kMaxRanks];
  LaneClock clock(stats_.timed());
  for (Lane *l : {&local_, &cross_, &local_}) {
    if (!*l) continue;
    const uint64_t t0 = clock.start(), s = ++l->step;
    if (int rc = l->exchange(s, &kNone, 0, -1, views, err)) return finish(*l, rc, err);
    l->done(s);
    l == &cross_ ? clock.across(t0) : clock.host(t0);
  }
  clock.report(stats_, local_.link != nullptr, cross_.link != nullptr);
  return DS4TP_OK;
}

}  // namespace ds4tp::group
