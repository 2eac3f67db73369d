// The N-member shm link: steps through a shared area (area.hpp), double
// buffered. Used by processes on one host (a POSIX shm segment) and by
// the threads of one process (heap memory).
//
// Step k uses buffer b = k & 1. A contributor first waits until every
// rank has finished reading step k-2 (done >= k-2: the only earlier user
// of buffer b), copies its bytes into its slot b, writes the step's byte
// count beside it, then release-stores stamp[b] = k. Readers wait for
// stamp[b] == k of each contributor, check its count against their own
// (EDESYNC), read the slot, then store done = k. A failing rank stores its rank + 1 in
// the header's abort word; every wait also checks that word, the peer
// processes' liveness (processes only) and the op deadline.
//
// A step whose bodies are consecutive segments of one buffer (a group's
// reduce-scatter) publishes the whole buffer in one copy; each member
// then reads its own segment of every slot.
//
// Each rank also has a home in the area: the group buffer
// (ds4tp_group_buffer). An all-reduce of a vector already in the homes
// runs in place with no copy in (reduce_home).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/clock.hpp"
#include "common/status.hpp"
#include "os/os.hpp"
#include "os/spin_budget.hpp"
#include "link/shm/area.hpp"
#include "link/shm/group_link.hpp"

namespace ds4tp::shm {
namespace {

// A rank seen stopped this long fails the wait (the pairs' default
// peer_silence_ms); os::PeerWatch reads its run state.
constexpr uint64_t kStoppedNs = 1'000'000'000;
// A sleep lasts at most this long, so the watch looks that often.
constexpr uint64_t kSliceNs = 1'000'000;

class Slots final : public link::Link, public link::Homes {
 public:
  Slots(std::shared_ptr<Area> a, int rank, bool watch, uint64_t timeout,
        const os::WaitPolicy &policy, bool adaptive, std::vector<int> ctl,
        std::vector<int> names)
      : a_(std::move(a)), rank_(rank), watch_(watch), timeout_(timeout), policy_(policy),
        names_(std::move(names)) {
    os::set_spin(policy_, budget_, policy.spin_ns, adaptive);
    policy_.clock_every = 64;  // a spin round is one load of a shared word
    // Even where no spin is the default (no spare core), a peer that is
    // about to stamp is met in a few polls rather than after a yield: on 2
    // cores with 2 ranks that halves a 16 KiB all-reduce (2.4 against
    // 4.8 us p50). Not for a rank told never to spin nor yield.
    const bool never = !adaptive && policy.spin_ns == 0 && policy.yield_ns == 0;
    policy_.first_polls = never ? 0 : 64;
    for (int r = 0; r < int(ctl.size()); r++)
      if (ctl[size_t(r)] >= 0) {
        ctl_fd_.push_back(ctl[size_t(r)]);
        ctl_rank_.push_back(name(r));
      }
    area_expect(*a_, rank_, uint32_t(getpid()));
  }

  const char *name() const override { return "shm"; }
  int kind() const override { return DS4TP_TRANSPORT_SHM; }

  // What a member publishes in its slot: one body for every member
  // (src[m] equal: one copy in), a body per member at a stride of `body`
  // (src[m] differ; consecutive segments of one buffer: one copy in), or
  // pieces of their own sizes behind a table of them (sizes_out). src
  // null publishes nothing but the stamp, the count and the call.
  int step(link::Step &s, Error &err) override {
    if (s.gate != nullptr)  // a pair over shm pushes into the peer's mapping (pair_link.cpp)
      return err.set(DS4TP_EINVAL, "a pair's gate is not a step of a group's shm slots");
    const int n = a_->n, b = int(s.number & 1);
    bool pieces = s.sizes_out != nullptr;
    for (int r = 1; s.src != nullptr && !pieces && r < n; r++) pieces = s.src[r] != s.src[0];
    uint32_t count = uint32_t(s.body);
    if (s.src != nullptr) {
      if (int rc = wait_done(s.number - 2, err)) return rc;
      uint8_t *slot = a_->slot(rank_, b);
      if (s.sizes_out != nullptr) {
        if (int rc = put_table(s, slot, err)) return rc;
        count = kPerMember;
      } else if (pieces) {
        if (int rc = put_stride(s, slot, err)) return rc;
        count = uint32_t(s.body * uint64_t(n));
      } else if (s.body) {
        copy(slot, s.src[rank_], s.body);
      }
    } else if (s.sizes_in != nullptr) {
      count = kPerMember;
    }
    // Every rank stamps every step, even one it sends nothing in, and
    // waits for every stamp: no step completes on a rank while another
    // has given up on the group.
    publish_step(s.number, count, s.call, s.mark);
    for (int r = 0; r < n; r++) {
      s.views[r] = nullptr;
      if (r != rank_)
        if (int rc = wait_stamp(r, s, count, err)) return rc;
      uint8_t *slot = a_->slot(r, b);
      if (s.sizes_in != nullptr) {
        if (int rc = take_table(s, r, slot, err)) return rc;
      } else if (pieces && (r != rank_ || s.src != nullptr)) {
        s.views[r] = slot + size_t(rank_) * s.body;
      } else if (s.root < 0 || r == s.root) {
        s.views[r] = slot;
      }
    }
    return DS4TP_OK;
  }

  void release(uint64_t step) override { publish(a_->line(rank_)->done, step); }

  link::Homes *homes() override { return this; }
  uint8_t *home() override { return a_->home(rank_); }

 private:
  // A step's count word where members get pieces of their own sizes.
  static constexpr uint32_t kPerMember = UINT32_MAX;
  // The table before the pieces (an offset and a size per member, u64
  // each), and a piece's room after it.
  static size_t table_bytes(int n) { return (size_t(n) * 16 + 63) & ~size_t(63); }
  static size_t room(uint64_t len) { return size_t((len + 63) & ~uint64_t(63)); }

  int put_stride(const link::Step &s, uint8_t *slot, Error &err) {
    const int n = a_->n;
    if (s.body * uint64_t(n) > a_->chunk)
      return err.set(DS4TP_EINVAL, "shm slots: step {} puts {} bytes for each of {} members in "
                     "a slot of {}", s.number, s.body, n, a_->chunk);
    bool consecutive = true;
    for (int r = 1; r < n; r++) consecutive = consecutive && s.src[r] == s.src[0] + size_t(r) * s.body;
    if (consecutive) {
      copy(slot, s.src[0], size_t(s.body) * size_t(n));
      return DS4TP_OK;
    }
    for (int r = 0; r < n; r++)
      if (s.src[r] != nullptr && s.body) std::memcpy(slot + size_t(r) * s.body, s.src[r], s.body);
    fence_copied(size_t(s.body) * size_t(n));
    return DS4TP_OK;
  }

  // The table (member m's piece: its offset in the slot and its size),
  // then the pieces at 64-byte boundaries; members given the same bytes
  // (src[m] and sizes equal) share one copy.
  int put_table(const link::Step &s, uint8_t *slot, Error &err) {
    const int n = a_->n;
    size_t at = table_bytes(n);
    uint64_t off[link::kMaxMembers];
    bool copy_in[link::kMaxMembers];  // the first member given these bytes
    for (int r = 0; r < n; r++) {
      int same = 0;
      while (same < r && (s.src[same] != s.src[r] || s.sizes_out[same] != s.sizes_out[r])) same++;
      copy_in[r] = same == r;
      off[r] = copy_in[r] ? at : off[same];
      if (copy_in[r]) at += room(s.sizes_out[r]);
    }
    if (at > a_->chunk)
      return err.set(DS4TP_EINVAL, "shm slots: step {}'s pieces take {} bytes of a slot of {}",
                     s.number, at, a_->chunk);
    for (int r = 0; r < n; r++) {
      const uint64_t len = s.sizes_out[r];
      std::memcpy(slot + size_t(r) * 16, &off[r], 8);
      std::memcpy(slot + size_t(r) * 16 + 8, &len, 8);
      if (copy_in[r] && len) std::memcpy(slot + off[r], s.src[r], size_t(len));
    }
    fence_copied(at);
    return DS4TP_OK;
  }

  // This member's piece of member r's table: the size it expected
  // (EDESYNC naming both otherwise) and where it lies.
  int take_table(link::Step &s, int r, const uint8_t *slot, Error &err) {
    if (r == rank_ && s.src == nullptr) return DS4TP_OK;  // published nothing
    const uint64_t want = s.in_from(r);
    uint64_t off = 0, len = 0;
    std::memcpy(&off, slot + size_t(rank_) * 16, 8);
    std::memcpy(&len, slot + size_t(rank_) * 16 + 8, 8);
    if (len != want) {
      culprit_ = name(r);
      return err.set(DS4TP_EDESYNC, "rank {} sends rank {} {} bytes at step {}, which expects {} "
                     "(counts differ)", name(r), name(rank_), len, s.number, want);
    }
    if (len != 0 && (off < table_bytes(a_->n) || off + len > a_->chunk))
      return err.set(DS4TP_EPROTO, "rank {}'s piece for rank {} at {} + {} lies outside its slot "
                     "of {}", name(r), name(rank_), off, len, a_->chunk);
    if (len) s.views[r] = slot + off;
    return DS4TP_OK;
  }

 public:
  // Steps `step` and `step` + 1, in place in every rank's home, so no
  // byte is copied in and each rank reads only its segment of the others
  // and then the other segments once (N=2, 16 KiB f32: about 2/3 of the
  // slot one-shot's time, README "Groups"). Step s: "my home holds my
  // vector"; rank r sums segment r of every home, in rank order, into its
  // own home. Step s+1: "my segment is summed"; each rank copies segment
  // q from rank q's home. The call returns only when every rank has read
  // this rank's segment (done = s+1), since the caller may then write its
  // home again. Segments are 64-byte multiples; the owner sums each
  // element once, so every rank has its bits.
  int reduce_home(uint64_t step, uint8_t *buf, size_t count, const link::Sum &sum,
                  const link::Step &like, Error &err) override {
    link::Step at = like;  // this call's steps: its call, named as its check names it
    uint8_t *home = a_->home(rank_);
    const int n = a_->n;
    const size_t esz = sum.elem_bytes, bytes = count * esz, line = 64 / esz;
    const size_t seg = ((count + size_t(n) - 1) / size_t(n) + line - 1) / line * line;
    auto lo = [&](int r) { return std::min(count, seg * size_t(r)) * esz; };
    // A vector elsewhere in the home moves to its start and back after
    // the last wait (the others read the home until then).
    const auto b = uintptr_t(buf), h = uintptr_t(home);
    const bool inside = buf != home && b < h + a_->chunk && b + bytes > h;
    uint8_t *out = inside ? home : buf;
    if (int rc = wait_done(step - 2, err)) return rc;
    if (buf != home) {
      std::memmove(home, buf, bytes);  // no peer reads it now (see the end)
      fence_copied(bytes);
    }
    at.number = step;
    at.body = bytes;
    publish_step(step, bytes, at.call, at.mark);
    const void *views[link::kMaxMembers];
    for (int r = 0; r < n; r++) {
      if (r != rank_)
        if (int rc = wait_stamp(r, at, uint32_t(bytes), err)) return rc;
      views[r] = a_->home(r) + lo(rank_);
    }
    const size_t mine = (lo(rank_ + 1) - lo(rank_)) / esz;
    if (mine) sum.fn(sum.ctx, views, n, home + lo(rank_), mine);
    at.number = step + 1;
    publish_step(step + 1, bytes, at.call, at.mark);
    for (int r = 0; r < n; r++) {  // each segment as soon as its owner is done
      if (r == rank_) continue;
      if (int rc = wait_stamp(r, at, uint32_t(bytes), err)) return rc;
      if (lo(r + 1) > lo(r)) std::memcpy(out + lo(r), a_->home(r) + lo(r), lo(r + 1) - lo(r));
    }
    if (out != home && mine) std::memcpy(out + lo(rank_), home + lo(rank_), mine * esz);
    release(step + 1);
    if (int rc = wait_done(step + 1, err)) return rc;
    if (inside) std::memmove(buf, home, bytes);
    return DS4TP_OK;
  }
  void abort(int culprit, int code) override {
    uint64_t expect = 0;
    const uint64_t word = uint64_t(uint32_t(-code)) << 32 | uint32_t(culprit + 1);
    a_->header()->abort_word.compare_exchange_strong(expect, word);
    for (int r = 0; r < a_->n; r++)  // blocked waiters look at the abort word
      Bell(a_->line(r)->bell).ring_always();
  }

  std::atomic<uint64_t> *progress_word() override { return &a_->line(rank_)->progress; }

 private:
  int name(int r) const { return names_.empty() ? r : names_[size_t(r)]; }

  // Every other rank has finished reading step `step` (no wait for step 0).
  int wait_done(uint64_t step, Error &err) {
    if (int64_t(step) <= 0) return DS4TP_OK;
    for (int r = 0; r < a_->n; r++) {
      if (r == rank_) continue;  // this thread finished that step itself
      std::atomic<uint64_t> &w = a_->line(r)->done;
      int rc = wait_for(r, [&] { return w.load(std::memory_order_acquire) >= step; }, step,
                        "finish reading step", err);
      if (rc != DS4TP_OK) return rc;
    }
    return DS4TP_OK;
  }
  // Rank r stamped step s.number, for `count` and the call as this rank
  // called it. Both are read before this rank stamps the next step, so
  // before rank r can write the next one into the same line (a rank is
  // never two steps ahead of another). Another call of the same count is
  // EDESYNC as the step's check words it (both calls named).
  int wait_stamp(int r, const link::Step &s, uint32_t count, Error &err) {
    RankLine *l = a_->line(r);
    const int b = int(s.number & 1);
    std::atomic<uint64_t> &w = l->stamp[b];
    // A live rank may be late only where a stopped one shows as stopped.
    const uint64_t arrival = !watch_ || os::sees_stopped_processes() ? s.arrival_ns : 0;
    if (int rc = wait_for(r, [&] { return w.load(std::memory_order_acquire) == s.number; },
                          s.number, "publish step", err, arrival))
      return rc;
    const uint32_t theirs = l->bytes[b].load(std::memory_order_relaxed);
    const uint16_t call = l->call[b].load(std::memory_order_relaxed);
    if (theirs == count && call == uint16_t(s.call)) {
      if (s.marks != nullptr) s.marks->take(name(r), l->mark[b].load(std::memory_order_relaxed));
      return DS4TP_OK;
    }
    culprit_ = name(r);
    if (theirs == count && s.encode != nullptr && s.check != nullptr) {
      link::Step peer = s;
      peer.call = call;
      uint8_t hdr[link::kRoom];
      s.encode(peer, s.body, hdr);
      return s.check(hdr, s, s.body, name(r), err);
    }
    auto words = [](uint32_t c) {
      return c == kPerMember ? std::string("bytes of their own per rank") : fmt::format("{} bytes", c);
    };
    return err.set(DS4TP_EDESYNC, "rank {} is on step {} with {}, this rank (rank {}) with {} "
                   "(collectives or counts differ)",
                   name(r), s.number, words(theirs), name(rank_), words(count));
  }
  void publish_step(uint64_t step, size_t bytes, uint32_t call = 0, uint32_t mark = 0) {
    RankLine *l = a_->line(rank_);
    l->bytes[step & 1].store(uint32_t(bytes), std::memory_order_relaxed);
    l->call[step & 1].store(uint16_t(call), std::memory_order_relaxed);
    l->mark[step & 1].store(mark, std::memory_order_relaxed);
    publish(l->stamp[step & 1], step);  // releases the count, call and mark with the stamp
  }

  // Store into this rank's line, then ring its bell for the ranks asleep on it.
  void publish(std::atomic<uint64_t> &w, uint64_t step) {
    w.store(step, std::memory_order_seq_cst);
    Bell(a_->line(rank_)->bell).ring();
  }

  // Waits through os::Waiter (spin, yield, then asleep on rank r's bell,
  // rung by its publish, at most 1 ms at a time) while a PeerWatch looks
  // at the abort word, the watched sockets and rank r's process. `arrival`
  // (0: none): rank r is not yet in the call and is waited for that long
  // while its process runs, instead of the step deadline.
  template <typename Cond>
  int wait_for(int r, Cond cond, uint64_t step, const char *what, Error &err,
               uint64_t arrival = 0) {
    if (cond()) return DS4TP_OK;  // the usual case at a step's end: no clock read
    RankLine *l = a_->line(r);
    os::PeerWatch watch;
    watch.watch_flag(abort_raised, a_->header());
    uint64_t pid = 0;
    // Rank r writes its pid when it attaches: one that has not yet (it
    // was stopped or is slow in bring-up) is looked for again while we
    // wait, so its stop is seen within kStoppedNs, not at the deadline.
    auto watch_pid = [&] {
      if (!watch_ || pid != 0) return;
      pid = l->pid.load(std::memory_order_acquire);
      if (pid != 0) watch.watch_process(pid_t(pid), a_->info(r)->start_time.load(), kStoppedNs);
    };
    if (watch_)
      for (size_t i = 0; i < ctl_fd_.size(); i++)
        watch.watch_socket(ctl_fd_[i], "group connection", ctl_rank_[i]);
    watch_pid();
    os::Waiter w(policy_, &watch);
    const uint64_t limit = std::max(arrival, timeout_);
    uint64_t deadline = os::deadline_after(w.now(), limit);
    uint64_t progress = l->progress.load(std::memory_order_relaxed);
    const Bell bell(l->bell);
    auto ready = [&]() -> int { return cond() ? 1 : 0; };
    for (;;) {
      if (cond()) return DS4TP_OK;
      const int rc = w.idle(deadline, [&](uint64_t left) {
        watch_pid();
        bell.sleep(ready, std::min(left, kSliceNs));
      });
      if (rc == DS4TP_OK) continue;
      if (rc == DS4TP_ETIMEDOUT) {
        // Rank r moved the call on elsewhere within the window (a tiered
        // leader across hosts): it is not stalled, so it gets another.
        if (const uint64_t p = l->progress.load(std::memory_order_relaxed); p != progress) {
          progress = p;
          deadline = os::deadline_after(w.now(), timeout_);
          continue;
        }
        culprit_ = name(r);
        if (arrival > timeout_)
          return err.set(DS4TP_ETIMEDOUT, "rank {} did not reach step {} within {} ms "
                         "(peer_arrival_timeout_ms; its process ran all along)",
                         name(r), step, arrival / 1'000'000);
        return err.set(DS4TP_ETIMEDOUT, "rank {} did not {} {} within {} ms", name(r), what, step,
                       timeout_ / 1'000'000);
      }
      return gone(r, pid, watch, step, what, err);
    }
  }

  static bool abort_raised(const void *h) {
    return static_cast<const Header *>(h)->abort_word.load(std::memory_order_acquire) != 0;
  }

  // Words what the watch saw, and marks the culprit in the abort word so
  // the ranks that did not see it name it too.
  int gone(int r, uint64_t pid, const os::PeerWatch &watch, uint64_t step, const char *what,
           Error &err) {
    if (watch.flagged()) {  // another rank's verdict: name its cause
      const uint64_t word = a_->header()->abort_word.load(std::memory_order_acquire);
      const int culprit = int(uint32_t(word)) - 1, code = -int(uint32_t(word >> 32));
      culprit_ = culprit;
      return err.set(code < 0 ? code : DS4TP_EFAILED,
                     "group failed: rank {} ({}) at step {}", culprit,
                     code < 0 ? status_message(code) : "failed", step);
    }
    const int dead = watch.socket_tag();
    // A killed rank nobody reaped yet (a zombie) still answers kill(pid, 0)
    // where there is no /proc, but its sockets are closed.
    culprit_ = dead >= 0 ? dead : name(r);
    if (dead >= 0)
      return err.set(DS4TP_EPEERCLOSED,
                     "rank {} closed its connection to the group (exited) while rank {} "
                     "waited for rank {} to {} {}",
                     dead, name(rank_), name(r), what, step);
    if (watch.stopped())
      return err.set(DS4TP_ETIMEDOUT,
                     "rank {} (pid {}) has been stopped (SIGSTOP or a debugger) for {} ms while "
                     "rank {} waited for it to {} {}",
                     name(r), pid, watch.stopped_for_ns() / 1'000'000, name(rank_), what, step);
    return err.set(DS4TP_EPEERCLOSED, "rank {} exited (pid {}) before it could {} {}", name(r),
                   pid, what, step);
  }

  std::shared_ptr<Area> a_;
  int rank_;
  bool watch_;
  uint64_t timeout_;
  os::WaitPolicy policy_;
  os::SpinBudget budget_;  // the adaptive policy's window, learned across waits
  std::vector<int> ctl_fd_, ctl_rank_;  // rendezvous sockets or host links, and their ranks
  std::vector<int> names_;  // member -> rank (see make_slots); culprit_: the rank named
};

}  // namespace

std::unique_ptr<link::Link> make_slots(std::shared_ptr<Area> area, int member, bool watch,
                                       uint64_t timeout_ns, const os::WaitPolicy &policy,
                                       bool adaptive, std::vector<int> ctl,
                                       std::vector<int> names) {
  return std::make_unique<Slots>(std::move(area), member, watch, timeout_ns, policy, adaptive,
                                 std::move(ctl), std::move(names));
}

}  // namespace ds4tp::shm
