// The pair's C calls: create, connect, free, queries, the slab, gates,
// gate callbacks and staging hooks.
#include <cstdint>
#include <string>

#include "convert.hpp"
#include "handle.hpp"

namespace ds4tp::capi {
namespace {

thread_local std::string t_errmsg_copy;

// Callback convention: 1 = success, 0 = failure with the pair latched
// failed (whatever the code), so machinery that marks failed on 0 and the
// library agree.
int callback_result(void *pair, int rc) {
  if (rc == DS4TP_OK) return 1;
  Pair *x = unwrap(static_cast<ds4tp_pair *>(pair));
  if (x != nullptr && !x->failed()) {
    try {
      Error e;
      e.code = rc;
      e.message = t_last_error;
      x->record(e, true);
    } catch (...) {
      x->mark_failed("gate callback failed");
    }
  }
  return 0;
}

// The C hooks as the library's: each calls the C function with its
// user_data. EINVAL for a bad size field.
int hooks_from_c(const ds4tp_staging_hooks *hooks, StagingHooks &out, Error &err) {
  if (hooks == nullptr) return DS4TP_OK;
  ds4tp_staging_hooks h{};
  h.size = sizeof h;
  if (!copy_sized(hooks, h))
    return err.set(DS4TP_EINVAL,
                   "staging hooks size field {} is invalid: set it to sizeof(ds4tp_staging_hooks)",
                   hooks->size);
  if (auto fn = h.before_exchange)
    out.before_exchange = [fn, u = h.user_data](Stage s, uint32_t a, uint32_t b, uint64_t seq,
                                                void *slab_out, uint64_t bytes) {
      return fn(u, int(s), a, b, seq, slab_out, bytes);
    };
  if (auto fn = h.after_exchange)
    out.after_exchange = [fn, u = h.user_data](Stage s, uint32_t a, uint32_t b, uint64_t seq,
                                               const void *slab_in, uint64_t bytes) {
      return fn(u, int(s), a, b, seq, slab_in, bytes);
    };
  return DS4TP_OK;
}

}  // namespace
}  // namespace ds4tp::capi

using namespace ds4tp::capi;
using ds4tp::Error;

extern "C" {

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
    if (rc != DS4TP_OK) return finish(nullptr, rc, err);
    *out = wrap(std::move(impl));
    return DS4TP_OK;
  });
}

int ds4tp_connect(ds4tp_pair *p) {
  if (int rc = check_live(p)) return rc;
  return guarded(p, [&] {
    Error err;
    return finish(p, p->impl->connect(err), err);
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
  const ds4tp::Pair *x = unwrap(p);
  return x != nullptr ? x->port() : -1;
}

int ds4tp_rank(const ds4tp_pair *p) {
  const ds4tp::Pair *x = unwrap(p);
  return x != nullptr ? x->rank() : -1;
}

int ds4tp_transport_active(const ds4tp_pair *p) {
  const ds4tp::Pair *x = unwrap(p);
  return x != nullptr ? x->transport() : int(DS4TP_TRANSPORT_AUTO);
}

uint32_t ds4tp_peer_ctx_size(const ds4tp_pair *p) {
  const ds4tp::Pair *x = unwrap(p);
  return x != nullptr ? x->peer_ctx() : 0;
}

int ds4tp_failed(const ds4tp_pair *p) {
  const ds4tp::Pair *x = unwrap(p);
  return x == nullptr || x->failed() ? 1 : 0;
}

void ds4tp_mark_failed(ds4tp_pair *p, const char *reason) {
  ds4tp::Pair *x = unwrap(p);
  if (x == nullptr) return;
  try {
    x->mark_failed(reason ? reason : "");
  } catch (...) {
  }
}

const char *ds4tp_errmsg(const ds4tp_pair *p) {
  const ds4tp::Pair *x = unwrap(p);
  if (x == nullptr) return "pair is NULL";
  try {
    t_errmsg_copy = x->message();
  } catch (...) {
    return "out of memory";
  }
  return t_errmsg_copy.c_str();
}

int ds4tp_slab_layout_get(const ds4tp_pair *p, ds4tp_slab_layout *out) {
  const ds4tp::Pair *x = unwrap(p);
  if (x == nullptr || out == nullptr) return invalid(nullptr, "pair and layout must not be NULL");
  if (out->size < sizeof(uint32_t)) return invalid(nullptr, "layout size field must be set");
  fill_layout(x->layout(), out);
  return DS4TP_OK;
}

uint64_t ds4tp_slab_bytes(const ds4tp_pair *p) {
  const ds4tp::Pair *x = unwrap(p);
  return x != nullptr ? x->layout().total : 0;
}

uint64_t ds4tp_slab_out_offset(const ds4tp_pair *p, uint32_t layer, uint32_t gate) {
  const ds4tp::Pair *x = unwrap(p);
  if (x == nullptr) return UINT64_MAX;
  const auto &l = x->layout();
  if (layer >= l.slots / 2 || gate >= DS4TP_GATES_PER_LAYER) return UINT64_MAX;
  return l.out_vec(layer * 2 + gate);
}

uint64_t ds4tp_slab_in_offset(const ds4tp_pair *p, uint32_t layer, uint32_t gate) {
  const ds4tp::Pair *x = unwrap(p);
  if (x == nullptr) return UINT64_MAX;
  const auto &l = x->layout();
  if (layer >= l.slots / 2 || gate >= DS4TP_GATES_PER_LAYER) return UINT64_MAX;
  return l.in_vec(layer * 2 + gate);
}

uint64_t ds4tp_slab_batch_out_offset(const ds4tp_pair *p, uint32_t index) {
  const ds4tp::Pair *x = unwrap(p);
  if (x == nullptr) return UINT64_MAX;
  return index < x->layout().batch_gates ? x->layout().batch_out_gate(index) : UINT64_MAX;
}

uint64_t ds4tp_slab_batch_in_offset(const ds4tp_pair *p, uint32_t index) {
  const ds4tp::Pair *x = unwrap(p);
  if (x == nullptr) return UINT64_MAX;
  return index < x->layout().batch_gates ? x->layout().batch_in_gate(index) : UINT64_MAX;
}

uint64_t ds4tp_slab_gpu_flags_offset(const ds4tp_pair *p) {
  const ds4tp::Pair *x = unwrap(p);
  return x != nullptr ? x->layout().gpu_flags : UINT64_MAX;
}

int ds4tp_attach_slab(ds4tp_pair *p, void *base, uint64_t bytes) {
  if (int rc = check_live(p)) return rc;
  return guarded(p, [&] {
    Error err;
    return finish(p, p->impl->attach_slab(base, bytes, err), err);
  });
}

void *ds4tp_slab_base(const ds4tp_pair *p) {
  const ds4tp::Pair *x = unwrap(p);
  return x != nullptr ? x->slab_base() : nullptr;
}

void ds4tp_detach_slab(ds4tp_pair *p) {
  if (ds4tp::Pair *x = unwrap(p)) x->detach_slab();
}

int ds4tp_gate_exchange(ds4tp_pair *p, uint32_t layer, uint32_t gate, uint64_t seq) {
  if (int rc = check_live(p)) return rc;
  return guarded(p, [&] {
    Error err;
    return finish(p, p->impl->gate(layer, gate, seq, err), err);
  });
}

int ds4tp_batch_gate_exchange(ds4tp_pair *p, uint32_t index, uint32_t rows, uint64_t seq) {
  if (int rc = check_live(p)) return rc;
  return guarded(p, [&] {
    Error err;
    return finish(p, p->impl->batch_gate(index, rows, seq, err), err);
  });
}

int ds4tp_big_gate_exchange(ds4tp_pair *p, uint32_t layer, uint64_t seq, const void *out,
                            void *in, uint64_t bytes) {
  if (int rc = check_live(p)) return rc;
  return guarded(p, [&] {
    Error err;
    return finish(p, p->impl->big_gate(layer, seq, out, in, bytes, err), err);
  });
}

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
  if (int rc = check_live(p)) return rc;
  return guarded(p, [&] {
    Error err;
    ds4tp::StagingHooks h;
    int rc = hooks_from_c(hooks, h, err);
    if (rc == DS4TP_OK) rc = p->impl->set_staging_hooks(std::move(h), err);
    return finish(p, rc, err);
  });
}

}  // extern "C"
