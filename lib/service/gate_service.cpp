#include "service/gate_service.hpp"

#include <atomic>

#include "common/clock.hpp"
#include "common/shared_word.hpp"
#include "os/os.hpp"
#include "os/wait.hpp"
#include "pair/pair.hpp"
#include "slab/schedule.hpp"

namespace ds4tp {
namespace {

// The slab words are plain u64 memory shared with kernels (GPU or CPU);
// SharedWord gives them acquire/release semantics without owning them.
SharedWord<uint64_t> word(uint8_t *base, uint64_t offset) {
  return SharedWord<uint64_t>(base + offset);
}

constexpr uint64_t kScanEveryNs = 1000000;  // misplaced-ready scan, slow path only

}  // namespace

GateService::~GateService() { halt(); }

void GateService::halt() {
  if (!thread_.halt()) return;
  // The pair or its slab is going away: a kernel still waiting (or about
  // to) must give up rather than spin on a word nobody will write.
  if (pair_.slab_base() != nullptr) poison();
}

int GateService::start(const ServiceConfig &cfg, Error &err) {
  if (state() == DS4TP_SERVICE_RUNNING)
    return err.set(DS4TP_ESTATE, "the gate service is already running");
  thread_.join_ended();  // ended after a failure, not yet joined
  if (pair_.failed()) return pair_.refuse(err);
  if (pair_.slab_base() == nullptr)
    return err.set(DS4TP_ESTATE, "start the gate service after ds4tp_attach_slab");
  if (int allowed = 0; cfg.cpu >= 0 && !os::cpu_allowed(cfg.cpu, allowed))
    return err.set(DS4TP_EINVAL,
                   "gate service cpu {} is not in this process's CPU affinity mask ({} CPUs "
                   "allowed)",
                   cfg.cpu, allowed);
  cfg_ = cfg;
  os::set_spin(policy_, budget_, cfg_.spin_ns, cfg_.adaptive_spin);
  policy_.yield_ns = cfg_.yield_ns;
  if (cfg_.words != nullptr) cfg_.words->rearm();
  return thread_.start([this] { run(); }, "gate service", err);
}

int GateService::stop(Error &err) {
  if (!thread_.stop(cfg_.stop_timeout_ns))
    return err.set(DS4TP_ETIMEDOUT,
                   "the gate service thread is still inside row gate seq {} after {} ms; "
                   "it ends by itself within the gate timeout: call "
                   "ds4tp_gate_service_stop again",
                   pair_.last_row_seq(), cfg_.stop_timeout_ns / 1000000);
  return DS4TP_OK;
}

void GateService::run() {
  os::name_this_thread("ds4tp-svc");
  if (cfg_.cpu >= 0) os::pin_thread(cfg_.cpu);  // validated in start()
  const slab::Layout &l = pair_.layout();
  const slab::Schedule &sched = pair_.schedule();
  auto *base = static_cast<uint8_t *>(pair_.slab_base());
  Error err;
  Exit why = Exit::Stopped;
  uint64_t idle_since = now_ns();
  for (;;) {
    const uint64_t seq = pair_.last_row_seq() + 1;
    const auto slot = uint32_t(slab::slot_for_seq(sched, seq));
    if (!wait_ready(slot, seq, idle_since, why, err)) break;
    if (cfg_.words != nullptr) cfg_.words->take(slot, seq);
    if (pair_.service_gate(Pass{}, slot / 2, slot % 2, seq, err) != DS4TP_OK) {
      err.message = "gate service: " + err.message;
      why = Exit::Failed;
      break;
    }
    if (cfg_.words != nullptr)
      cfg_.words->release(slot, seq);
    else
      word(base, l.gpu_release_flag(slot)).store(seq, std::memory_order_release);
    idle_since = now_ns();
  }
  if (why == Exit::Failed) {
    if (err.code != DS4TP_OK) pair_.record(err, true);
    poison();
    thread_.mark_ended(DS4TP_SERVICE_FAILED);
  } else {
    if (cfg_.words != nullptr) cfg_.words->poison();
    thread_.mark_ended(DS4TP_SERVICE_STOPPED);
  }
}

bool GateService::wait_ready(uint32_t slot, uint64_t seq, uint64_t idle_since, Exit &why,
                             Error &err) {
  const slab::Layout &l = pair_.layout();
  auto *base = static_cast<uint8_t *>(pair_.slab_base());
  auto ready = word(base, l.gpu_flag(slot));
  // The peer's death reaches the service as the pair's failure (the
  // liveness watcher raises it).
  os::PeerWatch watch;
  watch.watch_flag([](const void *p) { return static_cast<const Pair *>(p)->failed(); }, &pair_);
  os::Waiter w(policy_, &watch, idle_since);
  uint64_t last_scan = 0;
  for (;;) {
    // Failure first: a failed pair must not exchange again.
    if (watch.flag_raised()) {
      why = Exit::Failed;
      return false;
    }
    if (cfg_.words != nullptr) {
      const auto p = cfg_.words->poll(slot, seq, err);
      if (p == StreamWords::Poll::Ready) return true;
      if (p == StreamWords::Poll::Bad) {
        why = Exit::Failed;
        return false;
      }
    } else if (const uint64_t v = ready.load(std::memory_order_acquire); v == seq) {
      return true;
    } else if (v > seq) {
      err.set(DS4TP_EINVAL,
              "gate service: the ready word of slot {} (layer {}, gate {}) holds seq {} but "
              "the next row gate is seq {}: the engine skipped a gate or wrote a wrong seq",
              slot, slot / 2, slot % 2, v, seq);
      why = Exit::Failed;
      return false;
    }
    // A gate already signalled is served before a stop takes effect.
    if (thread_.stopping()) {
      why = Exit::Stopped;
      return false;
    }
    if (!w.spinning() && w.now() - last_scan >= kScanEveryNs) {
      last_scan = w.now();
      if (misplaced(slot, seq, err)) {
        why = Exit::Failed;
        return false;
      }
    }
    if (w.idle(os::kNoDeadline, [&](uint64_t) { os::sleep_ns(cfg_.sleep_ns); }) ==
        DS4TP_EPEERCLOSED) {
      why = Exit::Failed;
      return false;
    }
  }
}

// A kernel waiting at a slot the schedule does not expect would wait
// forever: find it and fail loudly instead.
bool GateService::misplaced(uint32_t slot, uint64_t seq, Error &err) const {
  if (cfg_.words != nullptr) return cfg_.words->misplaced(slot, seq, err);
  const slab::Layout &l = pair_.layout();
  auto *base = static_cast<uint8_t *>(pair_.slab_base());
  for (uint32_t s = 0; s < l.slots; s++) {
    if (s == slot) continue;
    const uint64_t v = word(base, l.gpu_flag(s)).load(std::memory_order_relaxed);
    if (v >= seq) {
      err.set(DS4TP_EINVAL,
              "gate service: the engine signalled seq {} at slot {} (layer {}, gate {}), but "
              "the identity's schedule puts seq {} at slot {} (layer {}, gate {}); kernels "
              "must fire gates in schedule order",
              v, s, s / 2, s % 2, seq, slot, slot / 2, slot % 2);
      return true;
    }
  }
  return false;
}

void GateService::poison() {
  if (cfg_.words != nullptr) {
    cfg_.words->poison();
    return;
  }
  const slab::Layout &l = pair_.layout();
  auto *base = static_cast<uint8_t *>(pair_.slab_base());
  for (uint32_t s = 0; s < l.slots; s++)
    word(base, l.gpu_release_flag(s)).store(DS4TP_GATE_POISON, std::memory_order_release);
}

}  // namespace ds4tp
