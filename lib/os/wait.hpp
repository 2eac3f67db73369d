// The one spin-then-block waiter and the one peer-death check, used by
// every transport (tcp, shm, rdma) and the gate service. Portable: built
// on os.hpp only, the same on every platform.
//
// A wait loop polls its own condition (bytes moved, a word in shared
// memory, completions) and calls Waiter::idle() whenever a poll found
// nothing. idle() applies the policy: busy-poll (cpu_relax) for spin_ns
// after the last progress, then yield the CPU for yield_ns, then let the
// caller block (`block(left_ns)`: poll(), a shared-word sleep, a nap);
// it ends the wait at the deadline, or when the PeerWatch says the peer
// is gone. The adaptive policy (WaitPolicy::budget set) takes spin_ns from
// the owner's SpinBudget when the wait begins (and yields the part of the
// learned window it does not spin; waits too long to serve skip the yield
// phase too) and reports how the wait ended when the Waiter goes out of
// scope (spin_budget.hpp). A WaitTally (WaitPolicy::tally) gets each
// wait's time by phase as it ends (wait_tally.hpp). Threading: one thread
// per Waiter and PeerWatch; neither allocates, logs or locks on the gate
// path.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include <sys/types.h>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "os/os.hpp"
#include "os/spin_budget.hpp"
#include "os/wait_tally.hpp"

namespace ds4tp::os {

constexpr uint64_t kNoDeadline = UINT64_MAX;
// A spin_ns that never runs out (DS4TP_SPIN_ALWAYS): far from overflow
// when a yield_ns is added to it.
constexpr uint64_t kSpinForever = uint64_t(1) << 62;

// `base + span`, kNoDeadline when it would overflow (an unlimited span).
inline uint64_t deadline_after(uint64_t base, uint64_t span) {
  return span > kNoDeadline - base ? kNoDeadline : base + span;
}

// Everything that says the peer went away, looked at in one place:
//  - up to kMaxSockets sockets that close when the peer process dies (a
//    pair's data and control connections; a group's rendezvous
//    connections, one per rank), watched for a hang-up without reading
//    them;
//  - the peer process itself, when it runs on this host, and optionally
//    how long it has been stopped (SIGSTOP, a debugger): a peer stopped
//    that long is judged silent;
//  - a failure flag another thread raises (the pair's liveness watcher);
//  - the peer's liveness verdict (talk::PeerState, through watch_silence),
//    read at every check: a peer silent for peer_silence_ms ends the wait
//    like a dead one, but code() is then ETIMEDOUT, not EPEERCLOSED.
// Sockets are looked at every kSocketCheckNs, the process every
// kProcessCheckNs, the flag at every check.
class PeerWatch {
 public:
  static constexpr uint64_t kSocketCheckNs = 1000000;
  static constexpr uint64_t kProcessCheckNs = 20000000;
  static constexpr int kMaxSockets = 16;

  // `what` names the socket in messages ("data connection"); static text.
  // `tag` is the caller's (a group's rank), read back with socket_tag().
  void watch_socket(int fd, const char *what, int tag = -1);
  // `stopped_ns` > 0: a process seen stopped for that long (looked at
  // every kProcessCheckNs) ends the wait as silent (ETIMEDOUT).
  void watch_process(pid_t pid, uint64_t start_time, uint64_t stopped_ns = 0);
  void watch_flag(bool (*raised)(const void *ctx), const void *ctx);
  // `silent(ctx)`: the liveness verdict, read at every check; `why(ctx)`
  // words it (failure path only). talk::watch_peer sets the pair's.
  void watch_silence(bool (*silent)(const void *ctx), std::string (*why)(const void *ctx),
                     const void *ctx) {
    silent_ = silent;
    silence_why_ = why;
    silence_ctx_ = ctx;
  }

  // The first wait that uses this watch starts at `now`: its first socket
  // and process looks come a period later, so a wait that ends within a
  // period (most gates) makes no system call for them. The flag and the
  // verdict are read at every check from the start. Later calls keep the
  // schedule. Waiter's constructor calls it.
  void arm(uint64_t now) {
    if (next_socket_ == 0) next_socket_ = now + kSocketCheckNs;
    if (next_process_ == 0) next_process_ = now + kProcessCheckNs;
  }
  // True once the peer is known gone (and stays true). Cheap between
  // the periods above.
  bool check(uint64_t now);
  // True when the flag alone says so (no system call).
  bool flag_raised() const { return raised_ != nullptr && raised_(ctx_); }
  // Sleeps at most `ns`, waking early when a watched socket hangs up;
  // then as check().
  bool nap(uint64_t ns);

  bool gone() const { return how_ != How::kAlive; }
  // The socket that went (its `what`), or nullptr when it was not a socket.
  const char *socket_name() const;
  // That socket's tag, -1 when it was not a socket.
  int socket_tag() const;
  // What ended the wait, for callers that word it themselves.
  bool exited() const { return how_ == How::kExited; }
  bool stopped() const { return how_ == How::kStopped; }
  bool flagged() const { return how_ == How::kFlag; }
  // How long the process had been seen stopped (stopped() only).
  uint64_t stopped_for_ns() const { return stopped_for_; }
  // How the peer went, for messages: "closed the data connection",
  // "reset the control connection", "process has exited", "failed".
  std::string why() const;
  // The status a wait that ended this way returns: ETIMEDOUT for a silent
  // peer, EPEERCLOSED otherwise.
  int code() const {
    return how_ == How::kSilent || how_ == How::kStopped ? DS4TP_ETIMEDOUT : DS4TP_EPEERCLOSED;
  }
  bool silent() const { return how_ == How::kSilent || how_ == How::kStopped; }

 private:
  enum class How { kAlive, kClosed, kReset, kExited, kFlag, kSilent, kStopped };
  void saw_hangup(int index, Hangup h);
  bool look_sockets(uint64_t timeout_ns);
  bool look_process(uint64_t now);

  // Filled up to nfds_ (no initialiser: a gate builds one per call).
  int fds_[kMaxSockets];
  const char *names_[kMaxSockets];
  int tags_[kMaxSockets];
  int nfds_ = 0;
  pid_t pid_ = 0;
  uint64_t start_ = 0;  // 0: the process is not watched
  uint64_t stopped_limit_ = 0, stopped_since_ = 0, stopped_for_ = 0;
  bool (*raised_)(const void *) = nullptr;
  const void *ctx_ = nullptr;
  bool (*silent_)(const void *) = nullptr;
  std::string (*silence_why_)(const void *) = nullptr;
  const void *silence_ctx_ = nullptr;
  uint64_t next_socket_ = 0, next_process_ = 0;
  How how_ = How::kAlive;
  int which_ = -1;
};

struct WaitPolicy {
  uint64_t spin_ns = 0;      // busy-poll this long after the last progress
  uint64_t yield_ns = 0;     // then yield the CPU this long, then block
  uint64_t grace_ns = 0;     // peer gone: keep polling this long (late completions)
  uint32_t clock_every = 1;  // while spinning, read the clock every this many rounds
  // Polls of a wait that only relax the CPU, before any clock read and
  // whatever spin_ns says: a peer a few hundred ns away (shared memory)
  // is then met without the cost of a yield. 0: none.
  uint32_t first_polls = 0;
  // Adaptive: spin_ns is the budget's window, per wait. Owned by whoever
  // owns the policy (the transport, the gate service); one thread at a time.
  SpinBudget *budget = nullptr;
  // Where the waits' time goes by phase (the handle's stats); null: not
  // counted. Owned by the handle; one writer at a time.
  WaitTally *tally = nullptr;
};

// Sets `p` to spin a fixed spin_ns, or, when `adaptive`, the window that
// `budget` learns, at most spin_ns. `budget` stays the caller's (it must
// outlive every Waiter built from `p`).
inline void set_spin(WaitPolicy &p, SpinBudget &budget, uint64_t spin_ns, bool adaptive) {
  p.spin_ns = spin_ns;
  budget = SpinBudget(spin_ns);
  p.budget = adaptive ? &budget : nullptr;
}

class Waiter {
 public:
  // `last_progress`: when the wait's spin window starts, in the past; 0
  // (the default) is now. `now`: a clock read the caller just made (a
  // gate's start, which the pair reads), so the Waiter makes none; 0 (the
  // default): one clock read here.
  explicit Waiter(const WaitPolicy &policy, PeerWatch *watch, uint64_t last_progress = 0,
                  uint64_t now = 0)
      : p_(policy), watch_(watch), now_(now != 0 ? now : now_ns()) {
    last_ = last_progress != 0 ? last_progress : now_;
    if (watch_ != nullptr) watch_->arm(now_);
    if (p_.budget != nullptr) {
      p_.spin_ns = p_.budget->begin();
      // With spinning quartered or off, the learned window's unspun part
      // is yielded instead (spin_budget.hpp); after a spin the policy's own
      // yield phase stays. Waits too long to serve have neither: they
      // block at once, as a yield loop then competes for the core like a
      // spin does (measured: the gate service's yield was as slow as its
      // spin there).
      const uint64_t rest = p_.budget->yield_after(p_.spin_ns);
      p_.yield_ns = p_.spin_ns == 0 ? rest : std::max(p_.yield_ns, rest);
    }
    spinning_ = now_ - last_ < p_.spin_ns;
  }
  Waiter(const Waiter &) = delete;
  Waiter &operator=(const Waiter &) = delete;

  // Tells the budget how long the wait's last quiet stretch was, and the
  // tally where a wait that polled in vain went. The clock is read again
  // only when the wait yielded or blocked since the last read: a spinning
  // wait ends within clock_every polls of now_, a stretch neither counts.
  ~Waiter() {
    const bool tally = p_.tally != nullptr && idled_;
    if (p_.budget == nullptr && !tally) return;
    const uint64_t end = kernel_ ? now_ns() : now_;
    if (tally) {
      phase_ns_[phase_] += end - now_;
      p_.tally->add(phase_ns_);
    }
    if (p_.budget != nullptr)
      p_.budget->ended(p_.spin_ns, end > last_ ? end - last_ : 0, preempted_);
  }

  // This wait yields where it would have spun (the thread it waits for
  // shares this CPU: a spin would only hold it off, a sleep would pull the
  // two closer at its wake-up) and tells the budget nothing, since it says
  // nothing about how late the peer is. Adaptive waits only.
  void yield_instead() {
    if (p_.budget == nullptr) return;
    p_.yield_ns += p_.spin_ns;
    p_.spin_ns = 0;
    p_.budget = nullptr;
    spinning_ = false;
  }

  // Something moved: the spin window starts again.
  void progress() {
    const uint64_t t = now_ns();
    phase_ns_[phase_] += t - now_;
    phase_ = WaitTally::kSpin;  // polling again
    last_ = now_ = t;
    spinning_ = p_.spin_ns > 0;
    kernel_ = false;
  }
  // The same without a clock read, for a poll pass that began right after
  // one (the wait's first): progress is dated at that read.
  void progress_at_last_read() {
    last_ = now_;
    spinning_ = p_.spin_ns > 0;
    kernel_ = false;
  }
  uint64_t last_progress() const { return last_; }
  // The clock as the last idle() read it.
  uint64_t now() const { return now_; }
  // True while inside the spin window (as of the last idle()).
  bool spinning() const { return spinning_; }

  // A poll found nothing. DS4TP_OK: poll again. DS4TP_ETIMEDOUT: the
  // deadline passed. DS4TP_EPEERCLOSED: the watch saw the peer go, grace_ns
  // ago and at least one poll before. Never sets an Error: the caller words
  // the failure with what it was waiting for.
  template <class Block>
  int idle(uint64_t deadline, Block &&block) {
    idled_ = true;
    if (first_polls_ < p_.first_polls) {
      first_polls_++;
      cpu_relax();
      return DS4TP_OK;
    }
    if (spinning_ && ++rounds_ < p_.clock_every) {
      cpu_relax();
      return DS4TP_OK;
    }
    rounds_ = 0;
    const uint64_t t = now_ns();
    // A spin whose clock reads lie this far apart was descheduled, a yield
    // that took this long gave the core to another thread (the budget's
    // signs of a busy core); no extra clock read.
    if (spinning_ && t - now_ > SpinBudget::kPreemptedNs) preempted_ = true;
    if (phase_ == WaitTally::kYield && t - now_ > SpinBudget::kYieldedNs) preempted_ = true;
    phase_ns_[phase_] += t - now_;
    now_ = t;
    kernel_ = false;
    if (gone_at_ != 0) {
      if (now_ - gone_at_ >= p_.grace_ns) return DS4TP_EPEERCLOSED;
    } else if (now_ >= deadline) {
      return DS4TP_ETIMEDOUT;
    } else if (watch_ != nullptr && watch_->check(now_)) {
      gone_at_ = now_;  // one more poll first: the peer may have finished
      return DS4TP_OK;
    }
    const uint64_t quiet = now_ - last_;
    spinning_ = quiet < p_.spin_ns;
    if (spinning_) {
      phase_ = WaitTally::kSpin;
      cpu_relax();
    } else if (quiet < p_.spin_ns + p_.yield_ns) {
      phase_ = WaitTally::kYield;
      yield_thread();
      kernel_ = true;
    } else {
      phase_ = WaitTally::kSleep;
      kernel_ = true;
      block(deadline > now_ ? deadline - now_ : 0);
      if (gone_at_ == 0 && watch_ != nullptr && watch_->gone()) gone_at_ = now_ns();
    }
    return DS4TP_OK;
  }

 private:
  WaitPolicy p_;
  PeerWatch *watch_;
  uint64_t last_;
  uint64_t now_;
  uint64_t gone_at_ = 0;
  uint32_t rounds_ = 0;
  uint32_t first_polls_ = 0;
  bool spinning_ = false;
  bool kernel_ = false;     // yielded or blocked since now_ was read
  bool preempted_ = false;  // a spin or a yield of this wait lost the core
  bool idled_ = false;      // a poll found nothing: the tally counts this wait
  int phase_ = WaitTally::kSpin;                     // where the time since now_ goes
  uint64_t phase_ns_[WaitTally::kPhases] = {0, 0, 0};  // this wait's split so far
};

}  // namespace ds4tp::os
