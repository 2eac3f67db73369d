// Collectives on top of the lanes' steps (lane.hpp), chunked by
// chunk_bytes, and the group's failure latch.
#include "group/group.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "common/clock.hpp"
#include "common/env.hpp"
#include "group/plan.hpp"
#include "group/wire.hpp"
#include "os/os.hpp"
#include "os/signal_calls.hpp"
#include "link/shm/area.hpp"
#include "link/shm/group_link.hpp"

namespace ds4tp::group {

Group::Group(Options o) : opt_(std::move(o)) {
  auto *b = static_cast<uint8_t *>(
      std::aligned_alloc(64, kBufferRoom + ((opt_.chunk_bytes + 63) & ~size_t(63))));
  if (b == nullptr) throw std::bad_alloc();
  buffer_ = b + kBufferRoom;
  if (const char *d = std::getenv("DS4TP_GROUP_DUMP"); d != nullptr && *d != 0) dump_path_ = d;
  std::memset(buffer_, 0, opt_.chunk_bytes);
  scratch_ = static_cast<uint8_t *>(std::aligned_alloc(64, (opt_.chunk_bytes + 63) & ~size_t(63)));
  if (scratch_ == nullptr) {
    std::free(b);
    throw std::bad_alloc();
  }
}

Group::~Group() {
  os::forget_signal_calls(this);  // no signal's dump reads it from here on
  worker_.reset();     // idle: every call waited for its last chunk
  heartbeat_.reset();  // no verdict after this point
  abort_lanes(opt_.rank, DS4TP_EPEERCLOSED);
  local_.link.reset();
  cross_.link.reset();
  std::free(buffer_ - kBufferRoom);
  std::free(scratch_);
}

int Group::make_local(int n, const Options &o, std::vector<std::unique_ptr<Group>> &out,
                      Error &err) {
  auto area = shm::area_heap(n, o.chunk_bytes, home_threshold(n),
                             two_shot_threshold(DS4TP_TRANSPORT_SHM), err);
  if (!area) return err.code;
  out.clear();
  for (int r = 0; r < n; r++) {
    Options ro = o;
    ro.rank = r;
    ro.size = n;
    auto g = std::make_unique<Group>(std::move(ro));
    g->make_lane(g->local_, g->shm_link(area, r, false, o.op_timeout_ns, n), n, r,
                 area_crossovers(*area));
    g->layout_ = layout_of(std::vector<RosterPeer>(size_t(n)), r);  // threads of one process
    out.push_back(std::move(g));
  }
  return DS4TP_OK;
}

std::string Group::plan() const {
  if (!connected()) return "";
  PlanFacts f;
  f.host_of = layout_.host_of;
  f.transport = transport();
  f.chunk_bytes = opt_.chunk_bytes;
  if (tiered_) {  // the leaders' mesh, from the roster (a host's rank has none)
    f.two_shot_bytes = crossovers_.two_shot_bytes;
    f.ring_bytes = ring_for(crossovers_.ring_bytes, layout_.hosts());
    f.leaders = layout_.leaders();
  } else {
    f.two_shot_bytes = local_.x.two_shot_bytes;
    f.home_bytes = local_.x.home_bytes;
    f.ring_bytes = local_.x.ring_bytes;
  }
  return describe_plan(f);
}

int Group::place(int rank, Place &out, Error &err) const {
  if (!connected()) return err.set(DS4TP_ESTATE, "group_topology: the group is not connected yet");
  if (rank < 0 || rank >= opt_.size)
    return err.set(DS4TP_EINVAL, "group_topology: rank {} outside 0..{}", rank, opt_.size - 1);
  out.host = int(layout_.host_of[size_t(rank)]);
  const auto &on = layout_.ranks_of[size_t(out.host)];
  out.local = int(std::find(on.begin(), on.end(), rank) - on.begin());
  out.tiered = tiered_;
  return DS4TP_OK;
}

std::string Group::message() const {
  std::lock_guard<std::mutex> l(mu_);
  return msg_;
}

bool Group::fail(int code, const std::string &msg) {
  std::lock_guard<std::mutex> l(mu_);
  int expect = 0;
  if (!failed_.compare_exchange_strong(expect, code, std::memory_order_acq_rel)) return false;
  msg_ = msg;
  return true;
}

void Group::mark_failed() {
  if (fail(DS4TP_EFAILED, "marked failed by ds4tp_group_mark_failed") && heartbeat_)
    heartbeat_->tell(opt_.rank, DS4TP_EFAILED, "marked failed by ds4tp_group_mark_failed");
  abort_lanes(opt_.rank, DS4TP_EFAILED);
}

void Group::abort_with(int code, const std::string &msg, int culprit) {
  fail(code, msg);
  abort_lanes(culprit >= 0 ? culprit : opt_.rank, code);
}

void Group::abort_lanes(int culprit, int code) {
  if (local_) local_.link->abort(culprit, code);
  if (cross_) cross_.link->abort(culprit, code);
}

// Any failure inside a collective ends the group: peers may be mid-step,
// so no later step could line up again. A failure latched first (the
// heartbeat's verdict, mark_failed) is the cause the caller gets.
//
// One cause on every rank: a rank whose tcp link closed under it waits a
// moment for the verdict of the rank that closed it (relayed by rank 0)
// before it names the closing rank; a rank that latches its own failure
// tells the others through the heartbeat (shm ranks read it from the
// segment's abort word).
int Group::finish(Lane &l, int rc, Error &err) {
  if (rc != DS4TP_OK) {
    stats_.failed_call(rc);
    int culprit = l ? l.link->culprit() : -1;
    std::string why = err.message;
    if (rc == DS4TP_EPEERCLOSED && heartbeat_) {
      const uint64_t until = now_ns() + std::min<uint64_t>(opt_.peer_silence_ns / 4, kVerdictWaitNs);
      while (failed() == 0 && now_ns() < until && !heartbeat_->hub_gone())
        os::sleep_ns(1'000'000);
      // Rank 0 gone as well: it went first (it relays every verdict, so
      // another rank's failure would have reached us through it), and the
      // link that closed is a survivor leaving. Every survivor names it.
      if (failed() == 0 && culprit != 0 && heartbeat_->hub_gone()) {
        why = fmt::format("rank 0 closed its rendezvous connection (exited or crashed); rank {} "
                          "saw: {}", opt_.rank, why);
        culprit = 0;
      }
    }
    const int named = culprit >= 0 ? culprit : opt_.rank;
    if (fail(rc, why) && heartbeat_) heartbeat_->tell(named, rc, why);
    abort_lanes(named, rc);
    rc = failed();
    err.set(rc, "{}", message());
  }
  return rc;
}

// tcp and tiered groups beat on the rendezvous connections
// (talk/group_beat.hpp); the ranks of a flat shm group read each other's
// process state instead (shm.cpp).
int Group::start_heartbeat(Error &err) {
  if (transport() == DS4TP_TRANSPORT_SHM) return DS4TP_OK;  // tcp and rdma beat
  talk::HeartbeatConfig hc;
  hc.rank = opt_.rank;
  hc.size = opt_.size;
  hc.entered = &calls_entered_;
  hc.silence_ns = opt_.peer_silence_ns;
  hc.clock_rounds = std::move(clock_rounds_);
  for (int r = 0; r < int(ctl_.size()); r++)
    if (ctl_[size_t(r)].valid()) hc.links.push_back({ctl_[size_t(r)].get(), opt_.rank == 0 ? r : 0});
  auto verdict = [this](int code, int culprit, const std::string &why) {
    abort_with(code, why, culprit);
  };
  const int rc = talk::Heartbeat::start(hc, verdict, heartbeat_, err);
  local_.beat = cross_.beat = heartbeat_.get();
  // The lanes are up and the peers were told to go: they see this rank
  // leave at once rather than at their deadline.
  if (rc != DS4TP_OK) abort_lanes(opt_.rank, rc);
  return rc;
}

namespace {
// Microseconds from the environment, negative read as 0; -1 when unset.
int64_t env_us(const char *name) {
  const auto us = env_number(name);
  return !us ? -1 : *us < 0 ? 0 : *us;
}

// The CPUs this process may run on (its affinity: a rank started under
// taskset has fewer than the host), else the host's.
unsigned usable_cpus() {
  int allowed = 0;
  os::cpu_allowed(0, allowed);
  return allowed > 0 ? unsigned(allowed) : std::thread::hardware_concurrency();
}
}  // namespace

uint64_t two_shot_threshold(int transport) {  // read per medium, so a test can set it
  const int64_t env = env_number("DS4TP_GROUP_TWO_SHOT_BYTES").value_or(-1);
  if (env >= 0) return uint64_t(env);
  return transport == DS4TP_TRANSPORT_SHM ? kTwoShotShmBytes : kTwoShotTcpBytes;
}

uint64_t ring_threshold() {  // read per group, so a test can set it
  const int64_t env = env_number("DS4TP_GROUP_RING_BYTES").value_or(-1);
  if (env == 0) return UINT64_MAX;
  return env > 0 ? uint64_t(env) : kRingBytes;
}

uint64_t home_threshold(int ranks) {  // read per segment, so a test can set it
  const int64_t env = env_number("DS4TP_GROUP_HOME_BYTES").value_or(-1);
  if (env >= 0) return uint64_t(env);
  return std::thread::hardware_concurrency() >= unsigned(ranks) ? kHomeBytes
                                                                : kHomeOversubscribedBytes;
}

Waiting waiting(int ranks, int64_t spin_option_ns, int64_t yield_option_ns,
                os::WaitTally *tally) {
  static const int64_t spin_env = env_us("DS4TP_GROUP_SPIN_US"),
                       yield_env = env_us("DS4TP_GROUP_YIELD_US");
  Waiting w;
  w.policy.tally = tally;
  w.policy.yield_ns = yield_option_ns >= 0 ? uint64_t(yield_option_ns)
                      : yield_env >= 0    ? uint64_t(yield_env) * 1000
                                          : 200'000;
  if (spin_env >= 0) {
    w.policy.spin_ns = uint64_t(spin_env) * 1000;
  } else if (spin_option_ns == kSpinAlways) {
    w.policy.spin_ns = os::kSpinForever;
    w.policy.yield_ns = 0;
  } else if (spin_option_ns == kSpinNever) {
    w.policy.yield_ns = 0;
  } else if (spin_option_ns >= 0) {
    w.policy.spin_ns = uint64_t(spin_option_ns);
  } else if (usable_cpus() >= unsigned(ranks)) {
    w.adaptive = true;
    w.policy.spin_ns = kAdaptiveSpinCapNs;
  }  // else no spin at all: a learned window of 0 would skip the yield too
  return w;
}

// Two-shot: step 1 reduce-scatters (member r sums segment r of every
// member's vector, in member order), step 2 all-gathers the summed
// segments. Each element is still the member-order sum of the same n
// values, so the bits equal the one-shot result on every member. Steps
// hold at most chunk_bytes; a count that does not split into n equal
// segments is padded in scratch_.
int Group::two_shot(Lane &l, uint8_t *p, uint64_t count, Dtype t, Op op, Error &err) {
  const size_t esz = dtype_bytes(t);
  const uint64_t n = uint64_t(l.n), me = uint64_t(l.me);
  const uint64_t per = opt_.chunk_bytes / esz / n * n;
  const void *views[kMaxRanks];
  for (uint64_t off = 0; off < count;) {
    const uint64_t m = count - off < per ? count - off : per;
    const uint64_t seg = (m + n - 1) / n;
    const size_t segb = size_t(seg * esz);
    uint8_t *dst = p + off * esz, *src = dst;
    if (seg * n != m) {
      std::memcpy(scratch_, dst, size_t(m * esz));
      std::memset(scratch_ + m * esz, 0, size_t((seg * n - m) * esz));
      src = scratch_;
    }
    uint64_t step = ++l.step;
    int rc = l.exchange_segments(step, src, segb, views, err);
    if (rc != DS4TP_OK) return finish(l, rc, err);
    group::reduce(t, op, views, l.n, src + me * segb, size_t(seg));  // may alias views[me]
    l.done(step);
    step = ++l.step;
    rc = l.exchange(step, src + me * segb, segb, -1, views, err);
    if (rc != DS4TP_OK) return finish(l, rc, err);
    for (uint64_t r = 0; r < n; r++) {
      const uint64_t lo = r * seg, hi = (r + 1) * seg < m ? (r + 1) * seg : m;
      if (hi > lo) std::memmove(dst + lo * esz, views[r], size_t((hi - lo) * esz));
    }
    l.done(step);
    off += m;
  }
  return DS4TP_OK;
}

// One-shot: every member publishes its vector (in chunk_bytes steps) and
// sums every member's, in member order.
int Group::one_shot(Lane &l, uint8_t *p, uint64_t count, Dtype t, Op op, Error &err) {
  const size_t esz = dtype_bytes(t);
  const uint64_t per = opt_.chunk_bytes / esz;
  const void *views[kMaxRanks];
  uint64_t off = 0;
  do {
    uint64_t m = count - off < per ? count - off : per;
    uint64_t step = ++l.step;
    int rc = l.exchange(step, p + off * esz, m * esz, -1, views, err);
    if (rc != DS4TP_OK) return finish(l, rc, err);
    group::reduce(t, op, views, l.n, p + off * esz, m);
    l.done(step);
    off += m;
  } while (off < count);
  return DS4TP_OK;
}

// The all-reduce of lane `l`'s members, by the algorithm its medium's
// thresholds pick for the size (group/plan.hpp): the call's (`call_bytes`,
// where `count` is one chunk of it), so a call's chunks share one.
int Group::reduce(Lane &l, uint8_t *p, uint64_t count, Dtype t, Op op, Error &err, uint64_t call_bytes) {
  const uint64_t bytes = call_bytes != 0 ? call_bytes : count * dtype_bytes(t);
  Algorithm a = all_reduce_algorithm(bytes, l.x.home_bytes, l.x.two_shot_bytes,
                                     opt_.chunk_bytes, l.x.ring_bytes);
  link::Homes *homes = l.link->homes();
  if ((a == Algorithm::Home && homes == nullptr) || (a != Algorithm::Home && count < uint64_t(l.n)))
    a = Algorithm::OneShot;
  call_algorithm_ = algorithm_name(a);
  if (a == Algorithm::Home) {
    l.step += 2;
    const int rc = homes->reduce_home(l.step - 1, p, size_t(count), sum_of(t, op), l.like(), err);
    return rc != DS4TP_OK ? finish(l, rc, err) : DS4TP_OK;
  }
  if (a == Algorithm::Ring) return ring(l, p, count, t, op, err);
  return a == Algorithm::TwoShot ? two_shot(l, p, count, t, op, err) : one_shot(l, p, count, t, op, err);
}

int Group::all_reduce(void *buf, uint64_t count, Dtype t, Op op, Error &err) {
  if (int rc = begin(err, call_word(Kind::AllReduce, int(t), op))) return rc;
  auto *p = static_cast<uint8_t *>(buf);
  const int rc = tiered_ ? tiered_all_reduce(p, count, t, op, err) : reduce(local_, p, count, t, op, err);
  // Bytes: this rank's contribution out, every other rank's in.
  const uint64_t b = count * dtype_bytes(t);
  return ended(rc, b, b * uint64_t(opt_.size - 1));
}

// A flat group's all-gather or broadcast: steps of at most chunk_bytes;
// step by step `mine(off)` is this rank's bytes (or null) and `take`
// copies out of the views.
template <typename Mine, typename Take>
int Group::flat_steps(uint64_t bytes, int root, Mine mine, Take take, Error &err) {
  const void *views[kMaxRanks];
  uint64_t off = 0;
  do {
    const uint64_t m = std::min<uint64_t>(bytes - off, opt_.chunk_bytes);
    const uint64_t step = ++local_.step;
    if (int rc = local_.exchange(step, mine(off), m, root, views, err))
      return finish(local_, rc, err);
    if (m) take(off, m, views);
    local_.done(step);
    off += m;
  } while (off < bytes);
  return DS4TP_OK;
}

int Group::all_gather(const void *in, void *out, uint64_t bytes, Error &err) {
  if (int rc = begin(err, call_word(Kind::AllGather))) return rc;
  const auto *src = static_cast<const uint8_t *>(in);
  auto *dst = static_cast<uint8_t *>(out);
  const int rc = tiered_ ? tiered_all_gather(src, dst, bytes, err)
                        : flat_steps(
                              bytes, -1, [&](uint64_t off) { return src + off; },
                              [&](uint64_t off, uint64_t m, const void **views) {
                                for (int r = 0; r < opt_.size; r++)
                                  std::memmove(dst + uint64_t(r) * bytes + off, views[r], m);
                              },
                              err);
  return ended(rc, bytes, bytes * uint64_t(opt_.size - 1));
}

int Group::broadcast(void *buf, uint64_t bytes, int root, Error &err) {
  if (int rc = begin(err, call_word(Kind::Broadcast, -1, Op::Sum, root))) return rc;
  auto *p = static_cast<uint8_t *>(buf);
  const bool me = root == opt_.rank;
  const int rc = tiered_ ? tiered_broadcast(p, bytes, root, err)
                        : flat_steps(
                              bytes, root, [&](uint64_t off) { return me ? p + off : nullptr; },
                              [&](uint64_t off, uint64_t m, const void **views) {
                                if (!me) std::memcpy(p + off, views[root], m);
                              },
                              err);
  return ended(rc, me ? bytes : 0, me ? 0 : bytes);
}

int Group::barrier(Error &err) {
  if (int rc = begin(err, call_word(Kind::Barrier))) return rc;
  if (tiered_) {
    return ended(tiered_barrier(err), 0, 0);
  }
  const void *views[kMaxRanks];
  static const uint8_t none = 0;
  uint64_t step = ++local_.step;
  int rc = local_.exchange(step, &none, 0, -1, views, err);
  if (rc != DS4TP_OK) return ended(finish(local_, rc, err), 0, 0);
  local_.done(step);
  return ended(DS4TP_OK, 0, 0);
}

}  // namespace ds4tp::group
