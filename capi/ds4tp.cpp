// The C ABI. The only place where C meets C++: every argument is checked
// here, every status and message is recorded here, and no exception ever
// crosses back into C.
#include "ds4tp/ds4tp.h"

#include <cstring>
#include <new>
#include <string>

#include "pair/pair.hpp"
#include "slab/layout.hpp"
#include "slab/schedule.hpp"

struct ds4tp_pair {
  std::unique_ptr<ds4tp::Pair> impl;
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
  if (c.log_level < DS4TP_LOG_ERROR || c.log_level > DS4TP_LOG_DEBUG)
    return err.set(DS4TP_EINVAL, "options.log_level {} outside 0..3", c.log_level);
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
  return DS4TP_OK;
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
  p->impl->detach_slab();
}

int ds4tp_gate_exchange(ds4tp_pair *p, uint32_t layer, uint32_t gate, uint64_t seq) {
  DS4TP_CHECK_LIVE(p);
  return guarded(p, [&] {
    Error err;
    int rc = p->impl->gate(layer, gate, seq, err);
    return finish(p, rc, err, true);
  });
}

int ds4tp_batch_gate_exchange(ds4tp_pair *p, uint32_t index, uint32_t rows, uint64_t seq) {
  DS4TP_CHECK_LIVE(p);
  return guarded(p, [&] {
    Error err;
    int rc = p->impl->batch_gate(index, rows, seq, err);
    return finish(p, rc, err, true);
  });
}

int ds4tp_big_gate_exchange(ds4tp_pair *p, uint32_t layer, uint64_t seq, const void *out,
                            void *in, uint64_t bytes) {
  DS4TP_CHECK_LIVE(p);
  return guarded(p, [&] {
    Error err;
    int rc = p->impl->big_gate(layer, seq, out, in, bytes, err);
    return finish(p, rc, err, true);
  });
}

}  // extern "C"
