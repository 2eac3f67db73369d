#include "group/stream.hpp"

#include "common/clock.hpp"
#include "os/wait.hpp"

namespace ds4tp::group {
namespace {
constexpr uint64_t kScanEveryNs = 1000000;  // out-of-order scan, slow path only

// What fixes the block's layout; bits and mode may change on a restart.
bool same_layout(const StreamSpec &a, const StreamSpec &b) {
  return a.slots == b.slots && a.count == b.count && a.dtype == b.dtype;
}
}  // namespace

int GroupStream::start(const ServiceConfig &cfg, const StreamSpec &spec, Error &err) {
  if (running()) return err.set(DS4TP_ESTATE, "the group stream service is already running");
  thread_.join_ended();  // ended after a failure
  if (g_.failed() != 0)
    return err.set(DS4TP_EFAILED, "group failed earlier: {}", g_.message());
  if (g_.transport() == DS4TP_TRANSPORT_AUTO)
    return err.set(DS4TP_ESTATE, "start the group stream after the group is connected");
  if (spec.count == 0)
    return err.set(DS4TP_EINVAL, "group stream: count is 0 (elements per slot vector)");
  // A slot holds at most 1 GiB (StreamWords); checked before multiplying,
  // so a huge count cannot wrap to a small slot.
  if (spec.count > (uint64_t(1) << 30) / dtype_bytes(spec.dtype))
    return err.set(DS4TP_EINVAL, "group stream: count {} of {} is above 1 GiB per slot vector",
                   spec.count, dtype_name(spec.dtype));
  if (!words_) {
    const uint64_t bytes = spec.count * dtype_bytes(spec.dtype);
    if (int rc = StreamWords::create(spec.slots, spec.bits, spec.mode, bytes, "group stream",
                                     words_, err))
      return rc;
    spec_ = spec;
  } else if (!same_layout(spec, spec_)) {
    return err.set(DS4TP_EINVAL,
                   "group stream words exist with {} slots of {} {}; asked for {} slots of "
                   "{} {} (the block is kept for the group's life)",
                   spec_.slots, spec_.count, dtype_name(spec_.dtype), spec.slots, spec.count,
                   dtype_name(spec.dtype));
  } else if (spec.bits != spec_.bits || spec.mode != spec_.mode) {
    if (int rc = words_->reconfigure(spec.bits, spec.mode, err)) return rc;
    spec_ = spec;
  }
  if (int allowed = 0; cfg.cpu >= 0 && !os::cpu_allowed(cfg.cpu, allowed))
    return err.set(DS4TP_EINVAL, "group stream cpu {} is not in this process's CPU mask", cfg.cpu);
  cfg_ = cfg;
  os::set_spin(policy_, budget_, cfg_.spin_ns, cfg_.adaptive_spin);
  policy_.yield_ns = cfg_.yield_ns;
  if (cfg_.stop_timeout_ns == 0) cfg_.stop_timeout_ns = g_.op_timeout_ns() + 1000000000ull;
  words_->rearm();
  return thread_.start([this] { run(); }, "group stream", err);
}

int GroupStream::stop(Error &err) {
  if (!thread_.stop(cfg_.stop_timeout_ns))
    return err.set(DS4TP_ETIMEDOUT,
                   "the group stream thread is still inside the all-reduce after seq {} "
                   "after {} ms; it ends within the op timeout: call "
                   "ds4tp_group_stream_stop again",
                   seq(), cfg_.stop_timeout_ns / 1000000);
  return DS4TP_OK;
}

void GroupStream::halt() { thread_.halt(); }

void GroupStream::run() {
  if (cfg_.cpu >= 0) os::pin_thread(cfg_.cpu);
  Error err;
  bool failed = false;
  uint64_t idle_since = now_ns();
  for (;;) {
    const uint64_t seq = seq_.load(std::memory_order_relaxed) + 1;
    const auto slot = uint32_t((seq - 1) % spec_.slots);
    if (!wait_ready(slot, seq, idle_since, failed, err)) break;
    words_->take(slot, seq);
    uint8_t *vec = words_->data() + uint64_t(slot) * words_->slot_bytes();
    if (g_.all_reduce(vec, spec_.count, spec_.dtype, Op::Sum, err) != DS4TP_OK) {
      failed = true;  // all_reduce latched the group failed with its message
      err.clear();
      break;
    }
    words_->release(slot, seq);
    seq_.store(seq, std::memory_order_release);
    idle_since = now_ns();
  }
  if (failed && err.code != DS4TP_OK) g_.abort_with(err.code, err.message);
  // Failed or stopped: no stream may wait on a word nobody will write.
  words_->poison();
  thread_.mark_ended(failed ? DS4TP_SERVICE_FAILED : DS4TP_SERVICE_STOPPED);
}

bool GroupStream::wait_ready(uint32_t slot, uint64_t seq, uint64_t idle_since, bool &failed,
                             Error &err) {
  // A peer's death or mark_failed reaches us as the group's failure.
  os::PeerWatch watch;
  watch.watch_flag([](const void *p) { return static_cast<const Group *>(p)->failed() != 0; },
                   &g_);
  os::Waiter w(policy_, &watch, idle_since);
  uint64_t last_scan = 0;
  for (;;) {
    if (watch.flag_raised()) {
      failed = true;
      return false;
    }
    const auto p = words_->poll(slot, seq, err);
    if (p == StreamWords::Poll::Ready) return true;
    if (p == StreamWords::Poll::Bad) {
      failed = true;
      return false;
    }
    if (thread_.stopping()) return false;  // after serving a ready
    if (!w.spinning() && w.now() - last_scan >= kScanEveryNs) {
      last_scan = w.now();
      if (words_->misplaced(slot, seq, err)) {
        failed = true;
        return false;
      }
    }
    if (w.idle(os::kNoDeadline, [&](uint64_t) { os::sleep_ns(cfg_.sleep_ns); }) ==
        DS4TP_EPEERCLOSED) {
      failed = true;
      return false;
    }
  }
}

}  // namespace ds4tp::group
