// Pair: creation, the failure rule every entry point applies, the gate
// service, the slab hand-off and tracing. Bring-up is in connect.cpp, the
// gates in gates.cpp.
#include "pair/pair.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

#include "common/status.hpp"
#include "os/signal_calls.hpp"
#include "session/session.hpp"
#include "session/worker_loop.hpp"
#include "talk/liveness.hpp"

namespace ds4tp {

int Pair::create(const Options &opt, wire::Identity id, std::unique_ptr<Pair> &out,
                 Error &err) {
  std::unique_ptr<Pair> p(new Pair);
  p->opt_ = opt;
  p->log_ = Logger(opt.log_fn, opt.log_user_data, opt.log_level);
  if (const char *d = std::getenv("DS4TP_PAIR_DUMP"); d != nullptr && *d != 0) p->dump_path_ = d;
  if (!slab::compute_layout(id.n_layer, id.n_embd, p->layout_))
    return err.set(DS4TP_EINVAL,
                   "identity: n_layer {} and n_embd {} must be in 1..{} and 1..{}",
                   id.n_layer, id.n_embd, slab::kMaxLayers, slab::kMaxEmbd);
  slab::Schedule &s = p->schedule_;
  s.slots = p->layout_.slots;
  s.start = id.gate_slot_start;
  s.step = id.gate_slot_step;
  s.per_token = id.gates_per_token;
  for (uint32_t i = 0; i < slab::kMaskWords; i++) s.mask[i] = id.gate_slot_mask[i];
  std::string bad = slab::validate_schedule(s);
  if (!bad.empty()) return err.set(DS4TP_EINVAL, "identity: {}", bad);
  p->id_ = std::move(id);

  connect::BringupConfig bc;
  bc.role = opt.role;
  bc.host = opt.role == DS4TP_ROLE_LEADER ? opt.listen_host : opt.leader_host;
  bc.port = opt.role == DS4TP_ROLE_LEADER ? opt.listen_port : opt.leader_port;
  bc.connect_timeout_ms = opt.connect_timeout_ms;
  bc.hello_timeout_ms = opt.hello_timeout_ms;
  bc.key = opt.psk;
  if (!opt.psk.empty())
    p->log_.info("authentication on: pre-shared key ({} bytes) from {}", opt.psk.size(),
                 opt.psk_source);
  p->bringup_ = std::make_unique<connect::Bringup>(bc, p->log_);
  if (opt.role == DS4TP_ROLE_LEADER) {
    int rc = p->bringup_->listen(err);
    if (rc != DS4TP_OK) return rc;
  }
  p->service_ = std::make_unique<GateService>(*p);
  out = std::move(p);
  return DS4TP_OK;
}

Pair::~Pair() {
  os::forget_signal_calls(this);  // no signal's dump reads it from here on
  service_.reset();   // joins the service thread before anything it uses goes
  liveness_.reset();  // joins the watcher before the control fd closes
  if (trace_) {
    Error e;
    if (trace_write(e) != DS4TP_OK) log_.warn("{}", e.message);
  }
  link_.reset();
  if (owned_slab_ != nullptr) munmap(owned_slab_, owned_bytes_);
}

int Pair::port() const {
  if (opt_.role == DS4TP_ROLE_LEADER) return bringup_ ? bringup_->port() : opt_.listen_port;
  return opt_.leader_port;
}

void Pair::record(const Error &e, bool fatal) {
  std::lock_guard<std::mutex> lock(msg_mu_);
  message_ = e.message;
  if (fatal && !failed_.load(std::memory_order_relaxed)) {
    failure_ = e.message;
    failed_.store(true, std::memory_order_release);
    if (session_) session_->abandon();  // blocked control waits give up now
  }
}

void Pair::mark_failed(const std::string &reason) {
  Error e;
  e.set(DS4TP_EFAILED, "marked failed by the engine: {}", reason.empty() ? "no reason given" : reason);
  record(e, true);
}

std::string Pair::failure() const {
  std::lock_guard<std::mutex> lock(msg_mu_);
  return failure_;
}

std::string Pair::message() const {
  std::lock_guard<std::mutex> lock(msg_mu_);
  return message_;
}

int Pair::refuse(Error &err) const {
  std::lock_guard<std::mutex> lock(msg_mu_);
  return err.set(DS4TP_EFAILED, "the pair failed earlier and is unusable: {}", failure_);
}

int Pair::settle(int rc, Error &err) {
  switch (rc) {
    case DS4TP_OK:
    case DS4TP_EINVAL:
    case DS4TP_ESTATE:
    case DS4TP_EFAILED:
    case DS4TP_EDIVERGED: return rc;
    default:
      if (err.message.empty()) err.message = status_message(rc);
      stats_.failed_call(rc);
      record(err, true);
      dump_on_failure(rc);
      return rc;
  }
}

int Pair::refuse_if_service(Error &err) const {
  if (!service_->running()) return DS4TP_OK;
  return err.set(DS4TP_ESTATE,
                 "the gate service is running and is the only gate caller: call "
                 "ds4tp_gate_service_stop before calling gates directly");
}

int Pair::connect(Error &err) { return settle(connect_once(err), err); }

int Pair::start_service(ServiceConfig cfg, Error &err) {
  if (cfg.stop_timeout_ns == 0) cfg.stop_timeout_ns = ms_to_ns(opt_.gate_timeout_ms + 1000);
  return service_->start(cfg, err);
}

int Pair::stop_service(Error &err) { return service_->stop(err); }

int Pair::start_stream(ServiceConfig cfg, uint32_t bits, int mode, Error &err) {
  if (service_->running())
    return err.set(DS4TP_ESTATE, "the gate service is already running");
  if (slab_ == nullptr)
    return err.set(DS4TP_ESTATE, "start the gate stream after ds4tp_attach_slab");
  if (!stream_words_) {
    if (int rc = StreamWords::create(layout().slots, bits, mode, 0, "gate stream",
                                     stream_words_, err))
      return rc;
  } else if (stream_words_->bits() != bits || stream_words_->mode() != mode) {
    if (int rc = stream_words_->reconfigure(bits, mode, err)) return rc;
  }
  cfg.words = stream_words_.get();
  return start_service(cfg, err);
}

int Pair::run_worker(session::WorkerEngine &engine, Error &err) {
  return control(err, [&](session::Session &s, Error &e) {
    if (s.role() != DS4TP_ROLE_WORKER)
      return e.set(DS4TP_ESTATE, "ds4tp_worker_run is a worker call; this rank is the leader");
    session::WorkerEnv env;
    env.session = &s;
    env.engine = &engine;
    env.failed = [this] { return failed(); };
    env.log = log_;
    int rc = session::run_worker(env, e);
    // A failed callback ends the lockstep, though EFAILED otherwise means
    // "failed earlier" and does not latch.
    if (rc == DS4TP_EFAILED) record(e, true);
    return rc;
  });
}

int Pair::attach_slab(void *base, uint64_t bytes, Error &err) {
  if (!connected_) return err.set(DS4TP_ESTATE, "attach the slab after ds4tp_connect");
  if (slab_ != nullptr) return err.set(DS4TP_ESTATE, "a slab is already attached; detach it first");
  if (base == nullptr && link_->shared_memory() != nullptr) {
    base = link_->shared_memory();  // shm: the segment the peer writes into
  } else if (base == nullptr) {
    if (owned_slab_ == nullptr) {
      void *m = mmap(nullptr, layout_.total, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED)
        return err.set(DS4TP_ENOMEM, "cannot allocate a {} byte slab: {}", layout_.total,
                       std::strerror(errno));
      owned_slab_ = m;
      owned_bytes_ = layout_.total;
    }
    base = owned_slab_;
  } else {
    if (reinterpret_cast<uintptr_t>(base) % slab::kVectorAlign != 0)
      return err.set(DS4TP_EINVAL, "slab base {} is not {}-byte aligned", base,
                     slab::kVectorAlign);
    if (bytes < layout_.total)
      return err.set(DS4TP_EINVAL, "slab of {} bytes is smaller than the {} bytes the layout needs",
                     bytes, layout_.total);
  }
  auto *b = static_cast<uint8_t *>(base);
  // Bookkeeping regions start clean whatever the engine left there.
  std::memset(b + layout_.in_seq, 0, uint64_t(layout_.slots) * layout_.flag_stride);
  std::memset(b + layout_.token, 0, 64);
  std::memset(b + layout_.gpu_flags, 0, uint64_t(layout_.slots) * layout_.flag_stride);
  std::memset(b + layout_.gpu_release, 0, uint64_t(layout_.slots) * layout_.flag_stride);
  int rc = link_->bind(b, layout_, err);
  if (rc != DS4TP_OK) return rc;
  slab_ = b;
  return DS4TP_OK;
}

void Pair::detach_slab() {
  service_->halt();  // the service must not outlive the slab
  if (slab_ == nullptr) return;
  link_->unbind();
  slab_ = nullptr;
}

int Pair::trace_meta(stats::TraceMeta &m) const {
  m.rank = rank();
  m.role = opt_.role == DS4TP_ROLE_LEADER ? "leader" : "worker";
  m.transport = transport_name(transport());
  char hex[33];
  auto h = host_identity();
  for (int i = 0; i < 16; i++) std::snprintf(hex + 2 * i, 3, "%02x", h[size_t(i)]);
  m.host_id = hex;
  m.gates_per_token = schedule_.per_token;
  return DS4TP_OK;
}

int Pair::trace_start(const std::string &path, Error &err) {
  if (path.empty()) return err.set(DS4TP_EINVAL, "trace path is empty");
  if (trace_) return err.set(DS4TP_ESTATE, "a trace to {} is already recording", trace_->path());
  uint32_t cap = 1u << 16;  // gates; DS4TP_TRACE_EVENTS overrides
  if (const char *v = std::getenv("DS4TP_TRACE_EVENTS"); v != nullptr && std::atoi(v) > 0)
    cap = uint32_t(std::min(std::atoi(v), 1 << 24));
  trace_ = std::make_unique<stats::Trace>(path, cap);
  stats_.set_trace(trace_.get());
  return DS4TP_OK;
}

int Pair::trace_write(Error &err) {
  if (!trace_) return err.set(DS4TP_ESTATE, "no trace is recording: call ds4tp_trace_start");
  stats::TraceMeta m;
  trace_meta(m);
  std::string why;
  if (!trace_->write(m, why)) return err.set(DS4TP_EIO, "trace: {}", why);
  return DS4TP_OK;
}

}  // namespace ds4tp
