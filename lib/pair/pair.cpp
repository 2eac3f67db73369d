#include "pair/pair.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "common/status.hpp"
#include "common/clock.hpp"
#include "talk/beat_clock.hpp"
#include "talk/liveness.hpp"
#include "wire/gate_header.hpp"
#include "connect/negotiate.hpp"
#include "os/os.hpp"
#include "os/spin_budget.hpp"
#include "session/session.hpp"
#include "session/worker_loop.hpp"
#include "transport/descriptor.hpp"

namespace ds4tp {

std::array<uint8_t, 16> host_identity() {
  std::string seed = os::host_seed();
  // Test-only: lets a test pretend the ranks run on different hosts.
  if (const char *fake = std::getenv("DS4TP_TEST_HOST_ID"); fake != nullptr && *fake != 0) {
    seed += "/test:";
    seed += fake;
  }
  // Two FNV-1a lanes: enough to tell hosts apart, not a security measure.
  uint64_t a = 1469598103934665603ull, b = 0x9e3779b97f4a7c15ull;
  for (unsigned char c : seed) {
    a = (a ^ c) * 1099511628211ull;
    b = (b ^ c) * 0x100000001b3ull + 0x7f4a7c15ull;
  }
  std::array<uint8_t, 16> out{};
  for (int i = 0; i < 8; i++) {
    out[i] = uint8_t(a >> (8 * i));
    out[8 + i] = uint8_t(b >> (8 * i));
  }
  return out;
}

namespace {

// The control channel's spin under the adaptive default: the fixed 200 us
// that was the default before it (frames are rare next to gates).
constexpr uint64_t kAdaptiveControlSpinNs = 200000;

uint64_t random_cookie() {
  uint64_t v = 0;
  while (v == 0) {
    if (!os::random_bytes(&v, sizeof v)) v = now_ns() ^ uint64_t(getpid()) << 32;
  }
  return v;
}

}  // namespace

int Pair::create(const Options &opt, wire::Identity id, std::unique_ptr<Pair> &out,
                 Error &err) {
  std::unique_ptr<Pair> p(new Pair);
  p->opt_ = opt;
  p->log_ = Logger(opt.log_fn, opt.log_user_data, opt.log_level);
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
  service_.reset();   // joins the service thread before anything it uses goes
  liveness_.reset();  // joins the watcher before the control fd closes
  if (trace_) {
    Error e;
    if (trace_write(e) != DS4TP_OK) log_.warn("{}", e.message);
  }
  transport_.reset();
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

int Pair::gate(uint32_t layer, uint32_t gate, uint64_t seq, Error &err) {
  if (int rc = refuse_if_service(err)) return rc;
  return settle(row_exchange(layer, gate, seq, err), err);
}

int Pair::batch_gate(uint32_t index, uint32_t rows, uint64_t seq, Error &err) {
  if (int rc = refuse_if_service(err)) return rc;
  return settle(batch_exchange(index, rows, seq, err), err);
}

int Pair::big_gate(uint32_t layer, uint64_t seq, const void *out, void *in, uint64_t bytes,
                   Error &err) {
  if (int rc = refuse_if_service(err)) return rc;
  return settle(big_exchange(layer, seq, out, in, bytes, err), err);
}

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

int Pair::connect_once(Error &err) {
  if (connected_ || !bringup_)
    return err.set(DS4TP_ESTATE, "ds4tp_connect was already called on this pair");
  wire::Hello mine;
  mine.role = uint8_t(opt_.role);
  mine.transport_request = uint8_t(opt_.transport);
  const uint64_t started = now_ns();
  // Every backend this rank can run is offered; one that was not probed
  // (a costly check this rank's request rules out) is not. The reasons
  // are kept for the error (an rdma request this rank cannot serve) or
  // logged once (auto).
  namespace tr = ds4tp::transport;
  tr::Query query{&layout_, opt_.rdma_device, opt_.rdma_port, opt_.rdma_gid_index};
  std::vector<tr::Availability> offers(tr::all().size());
  auto index_of = [](const tr::Descriptor *d) {
    return size_t(std::find(tr::all().begin(), tr::all().end(), d) - tr::all().begin());
  };
  auto offer = [&](int id) -> const tr::Availability & {
    static const tr::Availability kNone;
    const tr::Descriptor *d = tr::find(id);
    return d != nullptr ? offers[index_of(d)] : kNone;
  };
  mine.caps = 0;
  for (size_t i = 0; i < offers.size(); i++) {
    const tr::Descriptor &d = *tr::all()[i];
    if (d.probe_on_request && opt_.transport != DS4TP_TRANSPORT_AUTO && opt_.transport != d.id)
      continue;
    d.available(query, offers[i]);
    if (offers[i].usable)
      mine.caps |= d.cap;
    else if (d.probe_on_request && opt_.transport == DS4TP_TRANSPORT_AUTO)
      log_.info("{} not offered, auto will use shm or tcp: {}", d.name, offers[i].why);
  }
  mine.host_id = host_identity();
  mine.cookie = opt_.role == DS4TP_ROLE_LEADER ? random_cookie() : 0;
  mine.id = id_;

  int chosen = DS4TP_TRANSPORT_TCP;
  connect::HelloJudge judge = [&](const wire::Preamble &, const wire::Hello &peer,
                                  Error &e) {
    return connect::judge_hello(mine, peer, offer(DS4TP_TRANSPORT_RDMA).why, chosen, e);
  };
  connect::BringupResult res;
  int rc = bringup_->run(mine, judge, res, err);
  bringup_.reset();  // closes the listener: a pair takes exactly one worker
  if (rc != DS4TP_OK) return rc;

  peer_ = std::move(res.peer);
  control_ = std::move(res.control);
  data_ = std::move(res.data);
  transport_kind_ = chosen;

  tr::Connection c;
  c.data = std::move(data_);
  c.control_fd = control_.get();
  c.rank = rank();
  c.cookie = opt_.role == DS4TP_ROLE_LEADER ? mine.cookie : peer_.cookie;
  c.layout = layout_;
  c.schedule = schedule_;
  c.data_config.gate_timeout_ns = ms_to_ns(opt_.gate_timeout_ms);
  c.data_config.big_gate_timeout_ns = ms_to_ns(opt_.big_gate_timeout_ms);
  // Adaptive (the default): the transport learns its window, at most 1 ms.
  c.data_config.adaptive_spin = opt_.spin_us == DS4TP_SPIN_ADAPTIVE;
  c.data_config.spin_ns = c.data_config.adaptive_spin ? os::SpinBudget::kDefaultCapNs
                                                      : uint64_t(opt_.spin_us) * 1000;
  // Waits judged by liveness: a live peer may arrive this late; a silent
  // one ends the wait after peer_silence_ms (the watcher's verdict).
  c.data_config.arrival_ns = opt_.peer_arrival_timeout_ms == DS4TP_ARRIVAL_UNLIMITED
                                 ? os::kNoDeadline
                                 : ms_to_ns(opt_.peer_arrival_timeout_ms);
  c.data_config.peer = &peer_state_;
  peer_state_.silence_ns = ms_to_ns(opt_.peer_silence_ms);
  peer_state_.peer = opt_.role == DS4TP_ROLE_LEADER ? "worker" : "leader";
  c.deadline_ns = std::max(started + ms_to_ns(opt_.connect_timeout_ms),
                           now_ns() + ms_to_ns(opt_.hello_timeout_ms));
  c.frame_timeout_ns = ms_to_ns(opt_.frame_timeout_ms);
  c.forced = mine.transport_request == chosen || peer_.transport_request == chosen;
  c.log = log_;
  const tr::Descriptor *d = tr::find(chosen);
  if (d == nullptr)
    return err.set(DS4TP_EUNSUPPORTED, "transport {} is not built into this library",
                   transport_name(chosen));
  std::unique_ptr<tr::State> prepared;
  std::string fallback;
  if ((rc = d->setup(c, offer(d->id), prepared, fallback, err))) return rc;
  if (!prepared && !fallback.empty()) {  // both ranks saw the same failure: tcp on the same socket
    log_.warn("{} unavailable, using tcp: {}", d->what, fallback);
    d = &tr::kTcp;
    transport_kind_ = d->id;
    if ((rc = d->setup(c, offer(d->id), prepared, fallback, err))) return rc;
  }
  transport_ = d->make(c, std::move(prepared));
  stats::Sources src;
  src.heartbeats = &peer_state_.heartbeats;
  src.heartbeats_missed = &peer_state_.heartbeats_missed;
  src.rdma_retries = transport_->setup_retries();
  stats_.set_sources(src);
  if (int crc = start_control_plane(err)) return crc;
  connected_ = true;
  log_.info("pair up: rank {} of 2, transport {}, gate timeout {} ms, peer ctx {}",
            rank(), transport_->name(), opt_.gate_timeout_ms, peer_.id.ctx_size);
  if (std::string p = stats::trace_path_from_env(rank()); !p.empty() && !trace_) {
    Error te;
    if (trace_start(p, te) != DS4TP_OK) log_.warn("DS4TP_TRACE: {}", te.message);
  }
  return DS4TP_OK;
}

int Pair::attach_slab(void *base, uint64_t bytes, Error &err) {
  if (!connected_) return err.set(DS4TP_ESTATE, "attach the slab after ds4tp_connect");
  if (slab_ != nullptr) return err.set(DS4TP_ESTATE, "a slab is already attached; detach it first");
  if (base == nullptr && transport_->shared_slab() != nullptr) {
    base = transport_->shared_slab();  // shm: the segment the peer writes into
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
  int rc = transport_->attach(b, layout_, err);
  if (rc != DS4TP_OK) return rc;
  slab_ = b;
  return DS4TP_OK;
}

void Pair::detach_slab() {
  service_->halt();  // the service must not outlive the slab
  if (slab_ == nullptr) return;
  transport_->detach();
  slab_ = nullptr;
}

int Pair::row_exchange(uint32_t layer, uint32_t gate, uint64_t seq, Error &err) {
  if (slab_ == nullptr) return err.set(DS4TP_ESTATE, "gate before ds4tp_attach_slab");
  if (layer >= layout_.slots / 2 || gate >= DS4TP_GATES_PER_LAYER)
    return err.set(DS4TP_EINVAL, "gate (layer {}, gate {}) is outside {} layers x 2 gates",
                   layer, gate, layout_.slots / 2);
  uint32_t slot = layer * 2 + gate;
  const uint64_t last = last_row_seq_.load(std::memory_order_relaxed);
  if (seq != last + 1)
    return err.set(DS4TP_EINVAL,
                   "row gate seq {} for layer {} gate {}: seqs must rise by one per gate "
                   "(last was {})",
                   seq, layer, gate, last);
  int64_t want = slab::slot_for_seq(schedule_, seq);
  if (want != int64_t(slot))
    return err.set(DS4TP_EINVAL,
                   "row gate seq {} must hit slot {} (layer {}, gate {}) by the identity's "
                   "schedule, but the call is for layer {} gate {}",
                   seq, want, want / 2, want % 2, layer, gate);
  last_row_seq_.store(seq, std::memory_order_relaxed);
  gates_started_ = true;
  if (hooks_.before_exchange) {
    int h = hooks_.before_exchange(Stage::Row, layer, gate, seq, slab_ + layout_.out_vec(slot),
                                   layout_.vec_bytes);
    if (h != 0) return hook_failed("before_exchange", h, "row", layer, gate, seq, err);
  }
  const uint64_t t0 = gate_clock();
  int rc = transport_->gate(layer, gate, slot, seq, err);
  stats_.gate_done(stats::kRow, layer, seq, layout_.vec_bytes,
                   gate_started(t0), transport_->peer_seen_ns(), rc);
  if (rc == DS4TP_OK) peer_state_.completed(uint16_t(wire::GateKind::Row), layer, seq);
  if (rc == DS4TP_OK && hooks_.after_exchange) {
    int h = hooks_.after_exchange(Stage::Row, layer, gate, seq, slab_ + layout_.in_vec(slot),
                                  layout_.vec_bytes);
    if (h != 0) return hook_failed("after_exchange", h, "row", layer, gate, seq, err);
  }
  return rc;
}

int Pair::batch_exchange(uint32_t index, uint32_t rows, uint64_t seq, Error &err) {
  if (slab_ == nullptr) return err.set(DS4TP_ESTATE, "batch gate before ds4tp_attach_slab");
  if (index >= layout_.batch_gates)
    return err.set(DS4TP_EINVAL, "batch gate index {} is outside 0..{}", index,
                   layout_.batch_gates - 1);
  if (rows == 0 || rows > layout_.batch_rows)
    return err.set(DS4TP_EINVAL, "batch gate rows {} outside 1..{}", rows, layout_.batch_rows);
  if (seq == 0) return err.set(DS4TP_EINVAL, "batch gate seq must be nonzero");
  gates_started_ = true;
  const uint64_t bytes = uint64_t(rows - 1) * layout_.vec_stride + layout_.vec_bytes;
  if (hooks_.before_exchange) {
    int h = hooks_.before_exchange(Stage::Batch, index, rows, seq,
                                   slab_ + layout_.batch_out_gate(index), bytes);
    if (h != 0) return hook_failed("before_exchange", h, "batch", index, rows, seq, err);
  }
  const uint64_t t0 = gate_clock();
  int rc = transport_->batch_gate(index, rows, seq, err);
  stats_.gate_done(stats::kBatch, index, seq, bytes, gate_started(t0), transport_->peer_seen_ns(),
                   rc);
  if (rc == DS4TP_OK) peer_state_.completed(uint16_t(wire::GateKind::Batch), index, seq);
  if (rc == DS4TP_OK && hooks_.after_exchange) {
    int h = hooks_.after_exchange(Stage::Batch, index, rows, seq,
                                  slab_ + layout_.batch_in_gate(index), bytes);
    if (h != 0) return hook_failed("after_exchange", h, "batch", index, rows, seq, err);
  }
  return rc;
}

int Pair::set_staging_hooks(StagingHooks hooks, Error &err) {
  if (service_->running())
    return err.set(DS4TP_ESTATE, "staging hooks cannot change while the gate service runs");
  if (gates_started_)
    return err.set(DS4TP_ESTATE,
                   "staging hooks must be set before the first row or batch gate (row gate "
                   "seq {} already ran)",
                   last_row_seq());
  hooks_ = std::move(hooks);
  return DS4TP_OK;
}

int Pair::hook_failed(const char *which, int value, const char *kind, uint32_t a, uint32_t b,
                      uint64_t seq, Error &err) {
  const bool row = kind[0] == 'r';
  return err.set(DS4TP_EIO,
                 "staging hook {} returned {} at {} gate ({} {}, {} {}, seq {}): the "
                 "engine's device copy failed",
                 which, value, kind, row ? "layer" : "index", a, row ? "gate" : "rows", b,
                 seq);
}

int Pair::big_exchange(uint32_t layer, uint64_t seq, const void *out, void *in,
                       uint64_t bytes, Error &err) {
  if (!connected_) return err.set(DS4TP_ESTATE, "big gate before ds4tp_connect");
  if (slab_ == nullptr) return err.set(DS4TP_ESTATE, "big gate before ds4tp_attach_slab");
  if (bytes > 0 && (out == nullptr || in == nullptr))
    return err.set(DS4TP_EINVAL, "big gate buffers must not be NULL");
  auto o = reinterpret_cast<uintptr_t>(out), i = reinterpret_cast<uintptr_t>(in);
  if (bytes > 0 && o < i + bytes && i < o + bytes)
    return err.set(DS4TP_EINVAL, "big gate out and in buffers overlap");
  if (seq == 0) return err.set(DS4TP_EINVAL, "big gate seq must be nonzero");
  const uint64_t t0 = gate_clock();
  int rc = transport_->big_gate(layer, seq, out, in, bytes, err);
  stats_.gate_done(stats::kBig, layer, seq, bytes, gate_started(t0), transport_->peer_seen_ns(),
                   rc);
  if (rc == DS4TP_OK) peer_state_.completed(uint16_t(wire::GateKind::Big), layer, seq);
  return rc;
}

int Pair::start_control_plane(Error &err) {
  session::SessionConfig sc;
  sc.role = opt_.role;
  sc.max_frame_bytes = opt_.max_frame_bytes;
  sc.frame_timeout_ms = opt_.frame_timeout_ms;
  // Control frames keep a fixed spin: the adaptive default's is the old 200 us.
  sc.spin_ns = opt_.spin_us == DS4TP_SPIN_ADAPTIVE ? kAdaptiveControlSpinNs
                                                   : uint64_t(opt_.spin_us) * 1000;
  sc.n_layer = layout_.slots / 2;
  sc.n_embd = id_.n_embd;
  sc.peer = &peer_state_;
  sc.arrival_ms = opt_.peer_arrival_timeout_ms;  // DS4TP_ARRIVAL_UNLIMITED is -1
  sc.stats = &stats_;
  session_ = std::make_unique<session::Session>(control_.get(), sc, log_);
  talk::LivenessConfig lc;
  lc.role = opt_.role;
  lc.max_frame_bytes = opt_.max_frame_bytes;
  lc.channel = &session_->channel();
  lc.peer = &peer_state_;
  lc.heartbeat_ns = talk::beat_period(100000000, peer_state_.silence_ns);
  talk::LivenessHooks hooks;
  session::Session *s = session_.get();
  hooks.close_expected = [s] { return s->stopped(); };
  hooks.dead = [this, s](int code, const std::string &why, int status) {
    if (failed()) return;  // the first failure's message stays the one users read
    if (status != 0) s->set_remote_status(status);
    Error e;
    e.code = code;
    e.message = why;
    record(e, true);
  };
  return talk::Liveness::start(control_.get(), lc, std::move(hooks), log_, liveness_, err);
}

int Pair::trace_meta(stats::TraceMeta &m) const {
  m.rank = rank();
  m.role = opt_.role == DS4TP_ROLE_LEADER ? "leader" : "worker";
  m.transport = transport_name(transport_kind_);
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
