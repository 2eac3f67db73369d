// The C ABI. The only place where C meets C++: every argument is checked
// here, every status and message is recorded here, and no exception ever
// crosses back into C.
#include "ds4tp/ds4tp.h"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "pair/pair.hpp"
#include "session/session.hpp"
#include "session/worker_loop.hpp"
#include "service/gate_service.hpp"
#include "slab/layout.hpp"
#include "slab/schedule.hpp"
#include "transport/probe.hpp"

struct ds4tp_pair {
  std::unique_ptr<ds4tp::Pair> impl;
  // Declared after impl: destroyed (stopped and joined) before the pair.
  std::unique_ptr<ds4tp::GateService> service;
};

namespace {

using ds4tp::Error;

thread_local std::string t_last_error;
thread_local std::string t_errmsg_copy;

// Records a result: the thread's last error, and the handle's message
// (latching failure for fatal codes).
int finish(ds4tp_pair *p, int rc, const Error &err, bool fatal_on_error) {
  if (rc == DS4TP_OK) return rc;
  t_last_error = err.message.empty() ? ds4tp_strerror(rc) : err.message;
  if (p != nullptr && p->impl) {
    Error e = err;
    if (e.message.empty()) e.message = t_last_error;
    bool fatal = fatal_on_error && rc != DS4TP_EINVAL && rc != DS4TP_ESTATE &&
                 rc != DS4TP_EFAILED;
    p->impl->record(e, fatal);
  }
  return rc;
}

int invalid(ds4tp_pair *p, const char *what) {
  Error e;
  e.set(DS4TP_EINVAL, "{}", what);
  return finish(p, DS4TP_EINVAL, e, false);
}

// Copies a caller struct that starts with a uint32_t size field into our
// (default-filled) version: an older, smaller caller struct stays safe.
template <typename T>
bool copy_sized(const T *src, T &dst) {
  uint32_t sz = src->size;
  if (sz < sizeof(uint32_t) * 2 || sz > (1u << 16)) return false;
  std::memcpy(&dst, src, sz < sizeof(T) ? sz : sizeof(T));
  dst.size = sizeof(T);
  return true;
}

bool valid_ms(int32_t v) { return v > 0 && v <= 24 * 3600 * 1000; }

template <typename F>
int guarded(ds4tp_pair *p, F &&f) {
  try {
    return f();
  } catch (const std::bad_alloc &) {
    Error e;
    e.message = "out of memory";
    return finish(p, DS4TP_ENOMEM, e, false);
  } catch (const std::exception &ex) {
    Error e;
    e.message = std::string("internal error: ") + ex.what();
    return finish(p, DS4TP_EFAILED, e, true);
  } catch (...) {
    Error e;
    e.message = "internal error";
    return finish(p, DS4TP_EFAILED, e, true);
  }
}

int identity_from_c(const ds4tp_identity *cid, ds4tp::wire::Identity &id, Error &err) {
  ds4tp_identity c;
  ds4tp_identity_init(&c);
  if (!copy_sized(cid, c))
    return err.set(DS4TP_EINVAL, "identity size field {} is invalid: call ds4tp_identity_init",
                   cid->size);
  if (c.engine_blob_bytes > DS4TP_ENGINE_BLOB_MAX)
    return err.set(DS4TP_EINVAL, "engine_blob_bytes {} exceeds {}", c.engine_blob_bytes,
                   DS4TP_ENGINE_BLOB_MAX);
  if (c.engine_blob_bytes > 0 && c.engine_blob == nullptr)
    return err.set(DS4TP_EINVAL, "engine_blob is NULL but engine_blob_bytes is {}",
                   c.engine_blob_bytes);
  id.model_bytes = c.model_bytes;
  id.model_id = c.model_id;
  id.n_layer = c.n_layer;
  id.n_embd = c.n_embd;
  id.n_vocab = c.n_vocab;
  id.quant_bits = c.quant_bits;
  id.ctx_size = c.ctx_size;
  id.gate_slot_start = c.gate_slot_start;
  id.gate_slot_step = c.gate_slot_step;
  id.gates_per_token = c.gates_per_token;
  for (int i = 0; i < DS4TP_GATE_MASK_WORDS; i++) id.gate_slot_mask[i] = c.gate_slot_mask[i];
  id.features = c.features;
  const auto *b = static_cast<const uint8_t *>(c.engine_blob);
  id.blob.assign(b, b + c.engine_blob_bytes);
  return DS4TP_OK;
}

int options_from_c(const ds4tp_options *copt, ds4tp::Options &o, Error &err) {
  ds4tp_options c;
  ds4tp_options_init(&c);
  if (!copy_sized(copt, c))
    return err.set(DS4TP_EINVAL, "options size field {} is invalid: call ds4tp_options_init",
                   copt->size);
  if (c.role != DS4TP_ROLE_LEADER && c.role != DS4TP_ROLE_WORKER)
    return err.set(DS4TP_EINVAL, "options.role must be DS4TP_ROLE_LEADER or DS4TP_ROLE_WORKER (got {})",
                   c.role);
  if (c.transport < DS4TP_TRANSPORT_AUTO || c.transport > DS4TP_TRANSPORT_RDMA)
    return err.set(DS4TP_EINVAL, "options.transport {} is not a ds4tp_transport", c.transport);
  if (c.role == DS4TP_ROLE_LEADER) {
    if (c.listen_port < 0 || c.listen_port > 65535)
      return err.set(DS4TP_EINVAL, "options.listen_port {} outside 0..65535", c.listen_port);
  } else if (c.leader_port <= 0 || c.leader_port > 65535) {
    return err.set(DS4TP_EINVAL, "options.leader_port {} outside 1..65535 (the worker needs the leader's port)",
                   c.leader_port);
  }
  struct {
    const char *name;
    int32_t v;
  } ms[] = {{"connect_timeout_ms", c.connect_timeout_ms},
            {"hello_timeout_ms", c.hello_timeout_ms},
            {"gate_timeout_ms", c.gate_timeout_ms},
            {"big_gate_timeout_ms", c.big_gate_timeout_ms},
            {"frame_timeout_ms", c.frame_timeout_ms}};
  for (auto &m : ms)
    if (!valid_ms(m.v))
      return err.set(DS4TP_EINVAL, "options.{} {} must be 1..86400000 ms", m.name, m.v);
  if (c.spin_us < 0 || c.spin_us > 10000000)
    return err.set(DS4TP_EINVAL, "options.spin_us {} outside 0..10000000", c.spin_us);
  if (c.rdma_port < 1 || c.rdma_port > 255)
    return err.set(DS4TP_EINVAL, "options.rdma_port {} outside 1..255", c.rdma_port);
  if (c.rdma_gid_index < -1 || c.rdma_gid_index > 65535)
    return err.set(DS4TP_EINVAL, "options.rdma_gid_index {} outside -1 (pick)..65535",
                   c.rdma_gid_index);
  if (c.log_level < DS4TP_LOG_ERROR || c.log_level > DS4TP_LOG_DEBUG)
    return err.set(DS4TP_EINVAL, "options.log_level {} outside 0..3", c.log_level);
  if (c.max_frame_bytes < 4096 || c.max_frame_bytes > (1u << 30))
    return err.set(DS4TP_EINVAL, "options.max_frame_bytes {} outside 4096..{}", c.max_frame_bytes,
                   1u << 30);
  o.role = c.role;
  o.transport = c.transport;
  o.listen_host = c.listen_host ? c.listen_host : "127.0.0.1";
  o.listen_port = c.listen_port;
  o.leader_host = c.leader_host ? c.leader_host : "127.0.0.1";
  o.leader_port = c.leader_port;
  o.connect_timeout_ms = c.connect_timeout_ms;
  o.hello_timeout_ms = c.hello_timeout_ms;
  o.gate_timeout_ms = c.gate_timeout_ms;
  o.big_gate_timeout_ms = c.big_gate_timeout_ms;
  o.frame_timeout_ms = c.frame_timeout_ms;
  o.spin_us = c.spin_us;
  o.log_fn = c.log_fn;
  o.log_user_data = c.log_user_data;
  o.log_level = c.log_level;
  o.max_frame_bytes = c.max_frame_bytes;
  o.rdma_device = c.rdma_device ? c.rdma_device : "";
  o.rdma_port = c.rdma_port;
  o.rdma_gid_index = c.rdma_gid_index;
  // Authentication: explicit bytes, else a key file, else the environment.
  if (c.psk == nullptr && c.psk_bytes != 0)
    return err.set(DS4TP_EINVAL, "options.psk is NULL but psk_bytes is {}", c.psk_bytes);
  if (c.psk != nullptr && c.psk_bytes == 0)
    return err.set(DS4TP_EINVAL, "options.psk is set but psk_bytes is 0");
  if (c.psk != nullptr && c.psk_file != nullptr)
    return err.set(DS4TP_EINVAL, "set options.psk or options.psk_file, not both");
  return ds4tp::auth::load_key(c.psk, c.psk_bytes, c.psk_file, o.psk, o.psk_source, err);
}

bool to_schedule(const ds4tp_identity *cid, ds4tp::slab::Schedule &s) {
  ds4tp_identity c;
  ds4tp_identity_init(&c);
  if (!copy_sized(cid, c) || c.n_layer == 0 || c.n_layer > ds4tp::slab::kMaxLayers)
    return false;
  s.slots = c.n_layer * 2;
  s.start = c.gate_slot_start;
  s.step = c.gate_slot_step;
  s.per_token = c.gates_per_token;
  for (int i = 0; i < DS4TP_GATE_MASK_WORDS; i++) s.mask[i] = c.gate_slot_mask[i];
  return ds4tp::slab::validate_schedule(s).empty();
}

void fill_layout(const ds4tp::slab::Layout &l, ds4tp_slab_layout *out) {
  ds4tp_slab_layout c{};
  c.size = sizeof c;
  c.slots = l.slots;
  c.batch_gates = l.batch_gates;
  c.batch_rows = l.batch_rows;
  c.total_bytes = l.total;
  c.vec_bytes = l.vec_bytes;
  c.vec_stride = l.vec_stride;
  c.flag_stride = l.flag_stride;
  c.out_offset = l.out;
  c.in_offset = l.in;
  c.in_seq_offset = l.in_seq;
  c.token_offset = l.token;
  c.gpu_flags_offset = l.gpu_flags;
  c.batch_out_offset = l.batch_out;
  c.batch_in_offset = l.batch_in;
  c.batch_gate_stride = l.batch_gate_stride;
  c.big_out_offset = l.big_out;
  c.big_in_offset = l.big_in;
  c.big_staging_bytes = l.big_staging;
  c.gpu_release_offset = l.gpu_release;
  uint32_t sz = out->size < sizeof c ? out->size : uint32_t(sizeof c);
  std::memcpy(out, &c, sz);
  out->size = sz;
}

// Entry checks shared by every call on a live handle.
#define DS4TP_CHECK_PAIR(p)                                      \
  do {                                                           \
    if ((p) == nullptr || !(p)->impl) return invalid(nullptr, "pair is NULL"); \
  } while (0)
#define DS4TP_CHECK_LIVE(p)                                      \
  do {                                                           \
    DS4TP_CHECK_PAIR(p);                                         \
    if ((p)->impl->failed()) {                                   \
      Error e_;                                                  \
      (p)->impl->refuse(e_);                                     \
      t_last_error = e_.message;                                 \
      return DS4TP_EFAILED;                                      \
    }                                                            \
  } while (0)

// While the gate service runs it is the only gate caller.
int refuse_if_service(ds4tp_pair *p) {
  if (!p->service || !p->service->running()) return DS4TP_OK;
  Error e;
  e.set(DS4TP_ESTATE,
        "the gate service is running and is the only gate caller: call "
        "ds4tp_gate_service_stop before calling gates directly");
  return finish(p, DS4TP_ESTATE, e, false);
}

}  // namespace

extern "C" {

unsigned ds4tp_version(void) { return DS4TP_VERSION_HEX; }

const char *ds4tp_version_string(void) {
#define DS4TP_STR2_(x) #x
#define DS4TP_STR_(x) DS4TP_STR2_(x)
  return DS4TP_STR_(DS4TP_VERSION_MAJOR) "." DS4TP_STR_(DS4TP_VERSION_MINOR) "." DS4TP_STR_(
      DS4TP_VERSION_PATCH);
}

unsigned ds4tp_protocol_version(void) { return DS4TP_PROTOCOL_VERSION; }

const char *ds4tp_strerror(int status) {
#define DS4TP_STRERROR_(name, value, msg) \
  case value:                             \
    return msg;
  switch (status) {
    DS4TP_STATUS_MAP(DS4TP_STRERROR_)
    default: return "unknown status";
  }
#undef DS4TP_STRERROR_
}

const char *ds4tp_err_name(int status) {
#define DS4TP_ERRNAME_(name, value, msg) \
  case value:                            \
    return "DS4TP_" #name;
  switch (status) {
    DS4TP_STATUS_MAP(DS4TP_ERRNAME_)
    default: return "DS4TP_UNKNOWN";
  }
#undef DS4TP_ERRNAME_
}

const char *ds4tp_last_error(void) { return t_last_error.c_str(); }

const char *ds4tp_transport_name(int t) {
  switch (t) {
    case DS4TP_TRANSPORT_AUTO: return "auto";
    case DS4TP_TRANSPORT_TCP: return "tcp";
    case DS4TP_TRANSPORT_SHM: return "shm";
    case DS4TP_TRANSPORT_RDMA: return "rdma";
    default: return "?";
  }
}

int ds4tp_transport_available(int transport, char *why, size_t why_len) {
  try {
    std::string reason;
    bool ok = ds4tp::transport_available(transport, reason);
    if (why != nullptr && why_len > 0) {
      size_t n = reason.size() < why_len - 1 ? reason.size() : why_len - 1;
      std::memcpy(why, reason.data(), n);
      why[n] = 0;
    }
    return ok ? 1 : 0;
  } catch (...) {
    if (why != nullptr && why_len > 0) why[0] = 0;
    return 0;
  }
}

void ds4tp_options_init(ds4tp_options *opt) {
  if (opt == nullptr) return;
  std::memset(opt, 0, sizeof *opt);
  opt->size = sizeof *opt;
  opt->role = DS4TP_ROLE_NONE;
  opt->transport = DS4TP_TRANSPORT_AUTO;
  opt->listen_host = "127.0.0.1";
  opt->leader_host = "127.0.0.1";
  opt->connect_timeout_ms = 60000;
  opt->hello_timeout_ms = 2000;
  opt->gate_timeout_ms = 750;
  opt->big_gate_timeout_ms = 10000;
  opt->frame_timeout_ms = 30000;
  opt->spin_us = 200;
  opt->log_level = DS4TP_LOG_INFO;
  opt->max_frame_bytes = 64u << 20;
  opt->rdma_port = 1;
  opt->rdma_gid_index = -1;
}

void ds4tp_identity_init(ds4tp_identity *id) {
  if (id == nullptr) return;
  std::memset(id, 0, sizeof *id);
  id->size = sizeof *id;
}

int64_t ds4tp_schedule_slot(const ds4tp_identity *id, uint64_t seq) {
  if (id == nullptr || seq == 0) return -1;
  ds4tp::slab::Schedule s;
  if (!to_schedule(id, s)) return -1;
  return ds4tp::slab::slot_for_seq(s, seq);
}

int ds4tp_slab_layout_compute(const ds4tp_identity *id, ds4tp_slab_layout *out) {
  if (id == nullptr || out == nullptr) return invalid(nullptr, "identity and layout must not be NULL");
  if (out->size < sizeof(uint32_t)) return invalid(nullptr, "layout size field must be set");
  ds4tp_identity c;
  ds4tp_identity_init(&c);
  if (!copy_sized(id, c)) return invalid(nullptr, "identity size field is invalid");
  ds4tp::slab::Layout l;
  if (!ds4tp::slab::compute_layout(c.n_layer, c.n_embd, l))
    return invalid(nullptr, "identity n_layer/n_embd out of range");
  fill_layout(l, out);
  return DS4TP_OK;
}

int ds4tp_new(ds4tp_pair **out, const ds4tp_options *opt, const ds4tp_identity *id) {
  if (out == nullptr) return invalid(nullptr, "ds4tp_new: out is NULL");
  *out = nullptr;
  if (opt == nullptr || id == nullptr) return invalid(nullptr, "ds4tp_new: options and identity must not be NULL");
  return guarded(nullptr, [&]() -> int {
    Error err;
    ds4tp::Options o;
    ds4tp::wire::Identity wid;
    int rc = options_from_c(opt, o, err);
    if (rc == DS4TP_OK) rc = identity_from_c(id, wid, err);
    std::unique_ptr<ds4tp::Pair> impl;
    if (rc == DS4TP_OK) rc = ds4tp::Pair::create(o, std::move(wid), impl, err);
    if (rc != DS4TP_OK) return finish(nullptr, rc, err, false);
    auto *p = new ds4tp_pair;
    p->impl = std::move(impl);
    p->service = std::make_unique<ds4tp::GateService>(*p->impl);
    *out = p;
    return DS4TP_OK;
  });
}

int ds4tp_connect(ds4tp_pair *p) {
  DS4TP_CHECK_LIVE(p);
  return guarded(p, [&] {
    Error err;
    int rc = p->impl->connect(err);
    return finish(p, rc, err, rc != DS4TP_ESTATE);
  });
}

void ds4tp_free(ds4tp_pair *p) {
  if (p == nullptr) return;
  try {
    delete p;
  } catch (...) {
  }
}

int ds4tp_listen_port(const ds4tp_pair *p) {
  if (p == nullptr || !p->impl) return -1;
  return p->impl->port();
}

int ds4tp_rank(const ds4tp_pair *p) {
  if (p == nullptr || !p->impl) return -1;
  return p->impl->rank();
}

int ds4tp_transport_active(const ds4tp_pair *p) {
  if (p == nullptr || !p->impl) return DS4TP_TRANSPORT_AUTO;
  return p->impl->transport();
}

uint32_t ds4tp_peer_ctx_size(const ds4tp_pair *p) {
  if (p == nullptr || !p->impl) return 0;
  return p->impl->peer_ctx();
}

int ds4tp_failed(const ds4tp_pair *p) {
  if (p == nullptr || !p->impl) return 1;
  return p->impl->failed() ? 1 : 0;
}

void ds4tp_mark_failed(ds4tp_pair *p, const char *reason) {
  if (p == nullptr || !p->impl) return;
  try {
    p->impl->mark_failed(reason ? reason : "");
  } catch (...) {
  }
}

const char *ds4tp_errmsg(const ds4tp_pair *p) {
  if (p == nullptr || !p->impl) return "pair is NULL";
  try {
    t_errmsg_copy = p->impl->message();
  } catch (...) {
    return "out of memory";
  }
  return t_errmsg_copy.c_str();
}

int ds4tp_slab_layout_get(const ds4tp_pair *p, ds4tp_slab_layout *out) {
  if (p == nullptr || !p->impl || out == nullptr) return invalid(nullptr, "pair and layout must not be NULL");
  if (out->size < sizeof(uint32_t)) return invalid(nullptr, "layout size field must be set");
  fill_layout(p->impl->layout(), out);
  return DS4TP_OK;
}

uint64_t ds4tp_slab_bytes(const ds4tp_pair *p) {
  if (p == nullptr || !p->impl) return 0;
  return p->impl->layout().total;
}

uint64_t ds4tp_slab_out_offset(const ds4tp_pair *p, uint32_t layer, uint32_t gate) {
  if (p == nullptr || !p->impl) return UINT64_MAX;
  const auto &l = p->impl->layout();
  if (layer >= l.slots / 2 || gate >= DS4TP_GATES_PER_LAYER) return UINT64_MAX;
  return l.out_vec(layer * 2 + gate);
}

uint64_t ds4tp_slab_in_offset(const ds4tp_pair *p, uint32_t layer, uint32_t gate) {
  if (p == nullptr || !p->impl) return UINT64_MAX;
  const auto &l = p->impl->layout();
  if (layer >= l.slots / 2 || gate >= DS4TP_GATES_PER_LAYER) return UINT64_MAX;
  return l.in_vec(layer * 2 + gate);
}

uint64_t ds4tp_slab_batch_out_offset(const ds4tp_pair *p, uint32_t index) {
  if (p == nullptr || !p->impl) return UINT64_MAX;
  const auto &l = p->impl->layout();
  return index < l.batch_gates ? l.batch_out_gate(index) : UINT64_MAX;
}

uint64_t ds4tp_slab_batch_in_offset(const ds4tp_pair *p, uint32_t index) {
  if (p == nullptr || !p->impl) return UINT64_MAX;
  const auto &l = p->impl->layout();
  return index < l.batch_gates ? l.batch_in_gate(index) : UINT64_MAX;
}

uint64_t ds4tp_slab_gpu_flags_offset(const ds4tp_pair *p) {
  if (p == nullptr || !p->impl) return UINT64_MAX;
  return p->impl->layout().gpu_flags;
}

int ds4tp_attach_slab(ds4tp_pair *p, void *base, uint64_t bytes) {
  DS4TP_CHECK_LIVE(p);
  return guarded(p, [&] {
    Error err;
    int rc = p->impl->attach_slab(base, bytes, err);
    return finish(p, rc, err, false);
  });
}

void *ds4tp_slab_base(const ds4tp_pair *p) {
  if (p == nullptr || !p->impl) return nullptr;
  return p->impl->slab_base();
}

void ds4tp_detach_slab(ds4tp_pair *p) {
  if (p == nullptr || !p->impl) return;
  if (p->service) p->service->halt();  // the service must not outlive the slab
  p->impl->detach_slab();
}

int ds4tp_gate_exchange(ds4tp_pair *p, uint32_t layer, uint32_t gate, uint64_t seq) {
  DS4TP_CHECK_LIVE(p);
  if (int rc = refuse_if_service(p)) return rc;
  return guarded(p, [&] {
    Error err;
    int rc = p->impl->gate(layer, gate, seq, err);
    return finish(p, rc, err, true);
  });
}

int ds4tp_batch_gate_exchange(ds4tp_pair *p, uint32_t index, uint32_t rows, uint64_t seq) {
  DS4TP_CHECK_LIVE(p);
  if (int rc = refuse_if_service(p)) return rc;
  return guarded(p, [&] {
    Error err;
    int rc = p->impl->batch_gate(index, rows, seq, err);
    return finish(p, rc, err, true);
  });
}

int ds4tp_big_gate_exchange(ds4tp_pair *p, uint32_t layer, uint64_t seq, const void *out,
                            void *in, uint64_t bytes) {
  DS4TP_CHECK_LIVE(p);
  if (int rc = refuse_if_service(p)) return rc;
  return guarded(p, [&] {
    Error err;
    int rc = p->impl->big_gate(layer, seq, out, in, bytes, err);
    return finish(p, rc, err, true);
  });
}

}  // extern "C"

// ---- engine integration: callbacks, staging hooks, gate service -------

namespace {

// Callback convention: 1 = success, 0 = failure with the pair latched
// failed (whatever the code), so machinery that marks failed on 0 and the
// library agree.
int callback_result(void *pair, int rc) {
  if (rc == DS4TP_OK) return 1;
  auto *p = static_cast<ds4tp_pair *>(pair);
  if (p != nullptr && p->impl && !p->impl->failed()) {
    try {
      Error e;
      e.code = rc;
      e.message = t_last_error;
      p->impl->record(e, true);
    } catch (...) {
      p->impl->mark_failed("gate callback failed");
    }
  }
  return 0;
}

}  // namespace

extern "C" {

int ds4tp_gate_callback(void *pair, uint32_t layer, uint32_t gate, uint64_t seq) {
  return callback_result(pair,
                         ds4tp_gate_exchange(static_cast<ds4tp_pair *>(pair), layer, gate, seq));
}

int ds4tp_batch_gate_callback(void *pair, uint32_t index, uint32_t rows, uint64_t seq) {
  return callback_result(
      pair, ds4tp_batch_gate_exchange(static_cast<ds4tp_pair *>(pair), index, rows, seq));
}

int ds4tp_big_gate_callback(void *pair, uint32_t layer, uint64_t seq, const void *out,
                            void *in, uint64_t bytes) {
  return callback_result(pair, ds4tp_big_gate_exchange(static_cast<ds4tp_pair *>(pair), layer,
                                                       seq, out, in, bytes));
}

int ds4tp_set_staging_hooks(ds4tp_pair *p, const ds4tp_staging_hooks *hooks) {
  DS4TP_CHECK_LIVE(p);
  return guarded(p, [&] {
    Error err;
    if (p->service->running()) {
      err.set(DS4TP_ESTATE, "staging hooks cannot change while the gate service runs");
      return finish(p, DS4TP_ESTATE, err, false);
    }
    ds4tp_staging_hooks h{};
    h.size = sizeof h;
    if (hooks != nullptr && !copy_sized(hooks, h)) {
      err.set(DS4TP_EINVAL,
              "staging hooks size field {} is invalid: set it to sizeof(ds4tp_staging_hooks)",
              hooks->size);
      return finish(p, DS4TP_EINVAL, err, false);
    }
    int rc = p->impl->set_staging_hooks(hooks != nullptr ? &h : nullptr, err);
    return finish(p, rc, err, false);
  });
}

void ds4tp_gate_service_options_init(ds4tp_gate_service_options *opt) {
  if (opt == nullptr) return;
  std::memset(opt, 0, sizeof *opt);
  opt->size = sizeof *opt;
  opt->spin_us = 1000;
  opt->yield_us = 10000;
  opt->sleep_us = 20;
  opt->stop_timeout_ms = 0;
  opt->cpu = -1;
}

int ds4tp_gate_service_start(ds4tp_pair *p, const ds4tp_gate_service_options *opt) {
  DS4TP_CHECK_LIVE(p);
  return guarded(p, [&] {
    Error err;
    ds4tp_gate_service_options o;
    ds4tp_gate_service_options_init(&o);
    int rc = DS4TP_OK;
    if (opt != nullptr && !copy_sized(opt, o))
      rc = err.set(DS4TP_EINVAL,
                   "gate service options size field {} is invalid: call "
                   "ds4tp_gate_service_options_init",
                   opt->size);
    else if (o.spin_us < 0 || o.spin_us > 10000000)
      rc = err.set(DS4TP_EINVAL, "gate service spin_us {} outside 0..10000000", o.spin_us);
    else if (o.yield_us < 0 || o.yield_us > 10000000)
      rc = err.set(DS4TP_EINVAL, "gate service yield_us {} outside 0..10000000", o.yield_us);
    else if (o.sleep_us < 1 || o.sleep_us > 100000)
      rc = err.set(DS4TP_EINVAL, "gate service sleep_us {} outside 1..100000", o.sleep_us);
    else if (o.stop_timeout_ms < 0 || o.stop_timeout_ms > 24 * 3600 * 1000)
      rc = err.set(DS4TP_EINVAL, "gate service stop_timeout_ms {} outside 0..86400000",
                   o.stop_timeout_ms);
    else if (o.cpu < -1)
      rc = err.set(DS4TP_EINVAL, "gate service cpu {} must be -1 (no pinning) or a CPU number",
                   o.cpu);
    if (rc != DS4TP_OK) return finish(p, rc, err, false);
    ds4tp::ServiceConfig c;
    c.spin_ns = uint64_t(o.spin_us) * 1000;
    c.yield_ns = uint64_t(o.yield_us) * 1000;
    c.sleep_ns = uint64_t(o.sleep_us) * 1000;
    int stop_ms = o.stop_timeout_ms > 0 ? o.stop_timeout_ms
                                        : p->impl->options().gate_timeout_ms + 1000;
    c.stop_timeout_ns = ds4tp::ms_to_ns(stop_ms);
    c.cpu = o.cpu;
    rc = p->service->start(c, err);
    return finish(p, rc, err, false);
  });
}

int ds4tp_gate_service_stop(ds4tp_pair *p) {
  DS4TP_CHECK_PAIR(p);  // a failed pair's service must still be stoppable
  return guarded(p, [&] {
    Error err;
    int rc = p->service->stop(err);
    return finish(p, rc, err, false);
  });
}

int ds4tp_gate_service_state(const ds4tp_pair *p) {
  if (p == nullptr || !p->service) return DS4TP_SERVICE_STOPPED;
  return p->service->state();
}

uint64_t ds4tp_gate_seq(const ds4tp_pair *p) {
  if (p == nullptr || !p->impl) return 0;
  return p->impl->last_row_seq();
}

}  // extern "C"

// ===========================================================================
// Control plane: lockstep mirroring (lib/session). Every call checks its
// arguments, runs under guarded(), and records its result; transport and
// lockstep errors latch the pair failed, a hash divergence does not.
// ===========================================================================

namespace {

using ds4tp::session::Session;

template <typename F>
int control_call(ds4tp_pair *p, F &&f) {
  DS4TP_CHECK_LIVE(p);
  return guarded(p, [&]() -> int {
    Error err;
    Session *s = p->impl->session();
    if (s == nullptr) {
      err.set(DS4TP_ESTATE, "control calls need a connected pair: call ds4tp_connect first");
      return finish(p, DS4TP_ESTATE, err, false);
    }
    int rc = f(*s, err);
    return finish(p, rc, err, rc != DS4TP_EDIVERGED);
  });
}

// ds4tp_batch_item and the wire item share one layout (checked in
// session/worker_loop.cpp), so arrays pass through without copies.
const ds4tp::wire::BatchItem *wire_items(const ds4tp_batch_item *items) {
  return reinterpret_cast<const ds4tp::wire::BatchItem *>(items);
}

}  // namespace

extern "C" {

const char *ds4tp_command_name(int kind) {
  return kind >= 0 && kind <= 0xffff ? ds4tp::wire::frame_name(uint16_t(kind)) : "?";
}

int ds4tp_send_session_create(ds4tp_pair *p, uint64_t session_id, uint32_t ctx_size) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_session_create(session_id, ctx_size, e); });
}

int ds4tp_send_session_destroy(ds4tp_pair *p, uint64_t session_id) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_session_destroy(session_id, e); });
}

int ds4tp_send_sync(ds4tp_pair *p, uint64_t session_id, const int32_t *tokens, uint32_t n_tokens,
                    uint32_t logits_floats) {
  return control_call(p, [&](Session &s, Error &e) {
    return s.send_sync(session_id, tokens, n_tokens, logits_floats, e);
  });
}

int ds4tp_send_sync_images(ds4tp_pair *p, uint64_t session_id, const int32_t *tokens,
                           uint32_t n_tokens, const ds4tp_image_span *images, uint32_t n_images,
                           uint32_t logits_floats) {
  return control_call(p, [&](Session &s, Error &e) -> int {
    if (n_images > 0 && images == nullptr)
      return e.set(DS4TP_EINVAL, "images is NULL but n_images is {}", n_images);
    std::vector<ds4tp::wire::ImageMeta> meta(n_images);
    std::vector<const float *> embd(n_images);
    for (uint32_t i = 0; i < n_images; i++) {
      const ds4tp_image_span &c = images[i];
      ds4tp::wire::ImageMeta &m = meta[i];
      m.token_start = c.token_start;
      m.token_count = c.token_count;
      m.data_width = c.data_width;
      m.width = c.width;
      m.height = c.height;
      m.content_width = c.content_width;
      m.content_height = c.content_height;
      std::memcpy(m.fingerprint.data(), c.fingerprint, m.fingerprint.size());
      embd[i] = c.embd;
    }
    return s.send_sync_images(session_id, tokens, n_tokens, meta.data(), embd.data(), n_images,
                              logits_floats, e);
  });
}

int ds4tp_send_eval(ds4tp_pair *p, uint64_t session_id, uint64_t seq, int32_t token,
                    uint32_t logits_floats) {
  return control_call(p, [&](Session &s, Error &e) {
    return s.send_eval(session_id, seq, token, logits_floats, e);
  });
}

int ds4tp_send_mtp(ds4tp_pair *p, uint64_t session_id, uint64_t seq, int32_t token,
                   uint32_t limit) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_mtp(session_id, seq, token, limit, e); });
}

int ds4tp_send_rewind(ds4tp_pair *p, uint64_t session_id, int32_t pos) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_rewind(session_id, pos, e); });
}

int ds4tp_send_invalidate(ds4tp_pair *p, uint64_t session_id) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_invalidate(session_id, e); });
}

int ds4tp_send_spec_restore(ds4tp_pair *p, uint64_t session_id, int32_t pos) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_spec_restore(session_id, pos, e); });
}

int ds4tp_send_eval_batch(ds4tp_pair *p, const ds4tp_batch_item *items, uint32_t count,
                          uint32_t logits_floats) {
  return control_call(p, [&](Session &s, Error &e) {
    return s.send_eval_batch(wire_items(items), count, logits_floats, e);
  });
}

int ds4tp_send_mixed_batch(ds4tp_pair *p, uint64_t prefill_session_id, const int32_t *prompt,
                           uint32_t prompt_count, const ds4tp_batch_item *items, uint32_t count,
                           uint32_t logits_floats) {
  return control_call(p, [&](Session &s, Error &e) {
    return s.send_mixed_batch(prefill_session_id, prompt, prompt_count, wire_items(items), count,
                              logits_floats, e);
  });
}

int ds4tp_send_verify(ds4tp_pair *p, uint64_t session_id, const int32_t *drafts, uint32_t n,
                      uint32_t flags) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_verify(session_id, drafts, n, flags, e); });
}

int ds4tp_send_verify_commit(ds4tp_pair *p, int32_t mode, int32_t count, uint32_t logits_floats) {
  return control_call(p, [&](Session &s, Error &e) {
    return s.send_verify_commit(mode, count, logits_floats, e);
  });
}

int ds4tp_send_draft(ds4tp_pair *p, uint64_t session_id, int32_t token, int32_t pos,
                     uint32_t mode) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_draft(session_id, token, pos, mode, e); });
}

int ds4tp_send_stop(ds4tp_pair *p) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_stop(e); });
}

// A worker failure can reach the leader two ways: read by this call, or
// latched first by the liveness watcher (the worker reported and closed).
// Either way the caller gets EREMOTE and the worker's status.
static int remote_result(ds4tp_pair *p, int rc, int32_t *status) {
  if (rc != DS4TP_EREMOTE && rc != DS4TP_EFAILED) return rc;
  if (p == nullptr || !p->impl || p->impl->session() == nullptr) return rc;
  int32_t remote = p->impl->session()->remote_status();
  if (remote == 0) return rc;
  if (status != nullptr) *status = remote;
  return DS4TP_EREMOTE;
}

int ds4tp_wait_ack(ds4tp_pair *p, uint64_t session_id, int32_t *status) {
  int rc = control_call(p, [&](Session &s, Error &e) { return s.wait_ack(session_id, status, e); });
  return remote_result(p, rc, status);
}

int ds4tp_wait_sync(ds4tp_pair *p, uint64_t session_id, int32_t *status, uint32_t *position) {
  int rc = control_call(p, [&](Session &s, Error &e) { return s.wait_sync(session_id, status, position, e); });
  return remote_result(p, rc, status);
}

int ds4tp_recv_logits(ds4tp_pair *p, float *half, uint32_t count) {
  if (half == nullptr && count > 0) return invalid(p, "ds4tp_recv_logits: half is NULL");
  return control_call(p, [&](Session &s, Error &e) { return s.recv_logits(half, count, e); });
}

int32_t ds4tp_remote_status(const ds4tp_pair *p) {
  if (p == nullptr || !p->impl || p->impl->session() == nullptr) return 0;
  return p->impl->session()->remote_status();
}

int ds4tp_hash_check(ds4tp_pair *p, uint64_t session_id, uint64_t seq, uint64_t hash) {
  return control_call(p, [&](Session &s, Error &e) { return s.hash_check(session_id, seq, hash, e); });
}

int ds4tp_sync_checkpoint(ds4tp_pair *p, uint32_t point, int32_t current, int32_t total,
                          int requested, int *cancelled) {
  return control_call(p, [&](Session &s, Error &e) {
    bool c = false;
    int rc = s.sync_checkpoint(point, current, total, requested != 0, &c, e);
    if (rc == DS4TP_OK && cancelled != nullptr) *cancelled = c ? 1 : 0;
    return rc;
  });
}

int ds4tp_agree_execution_mode(ds4tp_pair *p, uint32_t flags, uint32_t *caps) {
  return control_call(p, [&](Session &s, Error &e) { return s.agree_exec_mode(flags, caps, e); });
}

int ds4tp_agree_drafter_split(ds4tp_pair *p, int mine_on, const void *meta, int *agreed,
                              int *peer_on) {
  return control_call(p, [&](Session &s, Error &e) {
    bool a = false, on = false;
    int rc = s.agree_drafter_split(mine_on != 0, static_cast<const uint8_t *>(meta), &a, &on, e);
    if (agreed != nullptr) *agreed = a ? 1 : 0;
    if (peer_on != nullptr) *peer_on = on ? 1 : 0;
    return rc;
  });
}

int ds4tp_block_begin(ds4tp_pair *p, uint32_t rows, uint32_t n_layers, uint32_t *gates_per_layer) {
  return control_call(p, [&](Session &s, Error &e) { return s.block_begin(rows, n_layers, gates_per_layer, e); });
}

int ds4tp_block_end(ds4tp_pair *p) {
  return control_call(p, [&](Session &s, Error &e) { return s.block_end(e); });
}

int ds4tp_small_exchange(ds4tp_pair *p, const void *mine, void *peer, uint32_t bytes) {
  if (mine == nullptr || peer == nullptr) return invalid(p, "ds4tp_small_exchange: mine and peer must not be NULL");
  return control_call(p, [&](Session &s, Error &e) { return s.small_exchange(mine, peer, bytes, e); });
}

int ds4tp_head_row_send(ds4tp_pair *p, uint32_t row, const float *src, uint32_t floats) {
  if (src == nullptr) return invalid(p, "ds4tp_head_row_send: src is NULL");
  return control_call(p, [&](Session &s, Error &e) { return s.head_row_send(row, src, floats, e); });
}

int ds4tp_head_row_recv(ds4tp_pair *p, uint32_t row, float *dst, uint32_t floats) {
  if (dst == nullptr) return invalid(p, "ds4tp_head_row_recv: dst is NULL");
  return control_call(p, [&](Session &s, Error &e) { return s.head_row_recv(row, dst, floats, e); });
}

void ds4tp_command_init(ds4tp_command *cmd) {
  if (cmd == nullptr) return;
  std::memset(cmd, 0, sizeof *cmd);
  cmd->size = sizeof *cmd;
}

void ds4tp_command_free(ds4tp_command *cmd) {
  if (cmd == nullptr || cmd->size < offsetof(ds4tp_command, tokens)) return;
  auto holds = [cmd](size_t end) { return cmd->size >= end; };
  if (holds(offsetof(ds4tp_command, n_tokens) + sizeof cmd->n_tokens)) {
    std::free(cmd->tokens);
    cmd->tokens = nullptr;
    cmd->n_tokens = 0;
  }
  if (holds(offsetof(ds4tp_command, n_items) + sizeof cmd->n_items)) {
    std::free(cmd->items);
    cmd->items = nullptr;
    cmd->n_items = 0;
  }
  if (holds(offsetof(ds4tp_command, n_images) + sizeof cmd->n_images)) {
    std::free(cmd->images);  // one block: spans and their floats
    cmd->images = nullptr;
    cmd->n_images = 0;
  }
}

int ds4tp_recv_command(ds4tp_pair *p, ds4tp_command *cmd, int32_t timeout_ms) {
  if (cmd == nullptr) return invalid(p, "ds4tp_recv_command: cmd is NULL");
  if (cmd->size < offsetof(ds4tp_command, tokens) || cmd->size > (1u << 16))
    return invalid(p, "ds4tp_recv_command: cmd->size is invalid: call ds4tp_command_init");
  if (timeout_ms < DS4TP_WAIT_FOREVER)
    return invalid(p, "ds4tp_recv_command: timeout_ms must be >= 0 or DS4TP_WAIT_FOREVER");
  ds4tp_command_free(cmd);  // a reused command gives back the previous arrays
  return control_call(p, [&](Session &s, Error &e) {
    ds4tp::session::Command c;
    int rc = s.recv_command(c, timeout_ms, e);
    if (rc != DS4TP_OK) return rc;
    return ds4tp::session::copy_command(c, cmd, e);
  });
}

int ds4tp_send_ack(ds4tp_pair *p, int32_t status) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_ack(status, e); });
}

int ds4tp_send_sync_ack(ds4tp_pair *p, int32_t status, uint32_t position) {
  return control_call(p, [&](Session &s, Error &e) { return s.send_sync_ack(status, position, e); });
}

int ds4tp_send_logits(ds4tp_pair *p, const float *half, uint32_t count) {
  if (half == nullptr && count > 0) return invalid(p, "ds4tp_send_logits: half is NULL");
  return control_call(p, [&](Session &s, Error &e) { return s.send_logits(half, count, e); });
}

int ds4tp_send_error(ds4tp_pair *p, int32_t status, const char *message) {
  return control_call(p, [&](Session &s, Error &e) {
    return s.send_error(status, message != nullptr ? message : "", e);
  });
}

void ds4tp_worker_ops_init(ds4tp_worker_ops *ops) {
  if (ops == nullptr) return;
  std::memset(ops, 0, sizeof *ops);
  ops->size = sizeof *ops;
}

int ds4tp_worker_run(ds4tp_pair *p, const ds4tp_worker_ops *ops, void *user_data) {
  if (ops == nullptr) return invalid(p, "ds4tp_worker_run: ops is NULL");
  ds4tp_worker_ops o;
  ds4tp_worker_ops_init(&o);
  if (!copy_sized(ops, o))
    return invalid(p, "ds4tp_worker_run: ops->size is invalid: call ds4tp_worker_ops_init");
  return control_call(p, [&](Session &s, Error &e) {
    if (s.role() != DS4TP_ROLE_WORKER)
      return e.set(DS4TP_ESTATE, "ds4tp_worker_run is a worker call; this rank is the leader");
    ds4tp::session::WorkerEnv env;
    env.session = &s;
    env.handle = p;
    env.ops = o;
    env.user_data = user_data;
    ds4tp::Pair *impl = p->impl.get();
    env.failed = [impl] { return impl->failed(); };
    env.log = impl->log();
    int rc = ds4tp::session::run_worker(env, e);
    // A failed callback ends the lockstep: latch it (finish does not latch
    // EFAILED, which otherwise means "failed earlier").
    if (rc == DS4TP_EFAILED) impl->record(e, true);
    return rc;
  });
}

}  // extern "C"
