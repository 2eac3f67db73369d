// extern "C" group calls: argument checks, option conversion (launcher
// environment included), status recording. Never throws into C.
#include <cstdlib>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "auth/key.hpp"
#include "common/status.hpp"
#include "convert.hpp"
#include "group_handle.hpp"
#include "group_options.hpp"
#include "handle.hpp"
#include "stats.hpp"
#include "group/group.hpp"
#include "group/stream.hpp"
#include "stream.hpp"

using ds4tp::Error;
namespace grp = ds4tp::group;
using ds4tp::capi::record;
using ds4tp::capi::guard;

extern "C" {

void ds4tp_group_options_init(ds4tp_group_options *opt) {
  if (opt == nullptr) return;
  std::memset(opt, 0, sizeof *opt);
  opt->size = sizeof *opt;
  opt->rank = -1;
  opt->group_size = -1;
  opt->rendezvous_port = -1;
  opt->transport = DS4TP_TRANSPORT_AUTO;
  opt->connect_timeout_ms = 60000;
  opt->op_timeout_ms = 10000;
  opt->chunk_bytes = 1u << 20;
  opt->peer_silence_ms = 1000;
  opt->spin_us = DS4TP_SPIN_ADAPTIVE;
  opt->yield_us = -1;
  opt->peer_arrival_timeout_ms = 300000;
}

int ds4tp_group_new(ds4tp_group **out, const ds4tp_group_options *opt,
                    const ds4tp_identity *identity) {
  if (out == nullptr) {
    Error e;
    e.set(DS4TP_EINVAL, "ds4tp_group_new: out is NULL");
    return record(nullptr, e.code, e);
  }
  *out = nullptr;
  return guard(nullptr, [&](Error &e) -> int {
    grp::Options o;
    if (int rc = ds4tp::capi::group_options_from_c(opt, identity, false, o, e)) return record(nullptr, rc, e);
    auto g = std::make_unique<ds4tp_group>();
    g->impl = std::make_unique<grp::Group>(std::move(o));
    if (int rc = g->impl->listen(e)) return record(nullptr, rc, e);
    *out = g.release();
    return DS4TP_OK;
  });
}

int ds4tp_group_connect(ds4tp_group *g) {
  if (g == nullptr) {
    Error e;
    e.set(DS4TP_EINVAL, "group is NULL");
    return record(nullptr, e.code, e);
  }
  return guard(g, [&](Error &e) -> int {
    int rc = g->impl->connect(e);
    if (rc != DS4TP_OK) g->impl->fail(rc, e.message);
    return record(g, rc, e);
  });
}

int ds4tp_group_new_local(ds4tp_group **groups, int n, const ds4tp_group_options *opt,
                          const ds4tp_identity *identity) {
  Error e;
  if (groups == nullptr || n < 2 || n > grp::kMaxRanks) {
    e.set(DS4TP_EINVAL, "ds4tp_group_new_local: groups NULL or n {} outside 2..{}", n,
          grp::kMaxRanks);
    return record(nullptr, e.code, e);
  }
  for (int i = 0; i < n; i++) groups[i] = nullptr;
  return guard(nullptr, [&](Error &err) -> int {
    grp::Options o;
    if (int rc = ds4tp::capi::group_options_from_c(opt, identity, true, o, err)) return record(nullptr, rc, err);
    std::vector<std::unique_ptr<grp::Group>> made;
    if (int rc = grp::Group::make_local(n, o, made, err)) return record(nullptr, rc, err);
    std::vector<std::unique_ptr<ds4tp_group>> hs;
    for (auto &m : made) {
      hs.push_back(std::make_unique<ds4tp_group>());
      hs.back()->impl = std::move(m);
    }
    for (int i = 0; i < n; i++) groups[i] = hs[size_t(i)].release();
    return DS4TP_OK;
  });
}

void ds4tp_group_free(ds4tp_group *g) { delete g; }


int ds4tp_group_all_reduce(ds4tp_group *g, void *buf, uint64_t count, int dtype, int op) {
  if (g != nullptr && ((buf == nullptr && count != 0) || dtype < DS4TP_DTYPE_F32 ||
                       dtype > DS4TP_DTYPE_U8 || op < DS4TP_OP_SUM || op > DS4TP_OP_PROD)) {
    Error e;
    e.set(DS4TP_EINVAL, "all_reduce: buf {} count {} dtype {} op {} (dtype is a ds4tp_dtype, "
          "op a ds4tp_reduce_op)", buf, count, dtype, op);
    return record(g, e.code, e);
  }
  GROUP_CALL(g, g->impl->all_reduce(buf, count, grp::Dtype(dtype), grp::Op(op), e));
}

int ds4tp_group_all_gather(ds4tp_group *g, const void *in, void *out, uint64_t bytes) {
  if (g != nullptr && bytes != 0 && (in == nullptr || out == nullptr)) {
    Error e;
    e.set(DS4TP_EINVAL, "all_gather: NULL buffer for {} bytes", bytes);
    return record(g, e.code, e);
  }
  GROUP_CALL(g, g->impl->all_gather(in, out, bytes, e));
}

int ds4tp_group_broadcast(ds4tp_group *g, void *buf, uint64_t bytes, int root) {
  if (g != nullptr && ((bytes != 0 && buf == nullptr) || root < 0 || root >= g->impl->size())) {
    Error e;
    e.set(DS4TP_EINVAL, "broadcast: buf {} bytes {} root {} of {}", buf, bytes, root,
          g->impl->size());
    return record(g, e.code, e);
  }
  GROUP_CALL(g, g->impl->broadcast(buf, bytes, root, e));
}

int ds4tp_group_barrier(ds4tp_group *g) { GROUP_CALL(g, g->impl->barrier(e)); }

int ds4tp_group_buffer(ds4tp_group *g, void **ptr, uint64_t *bytes) {
  if (g == nullptr || ptr == nullptr) {
    Error e;
    e.set(DS4TP_EINVAL, "ds4tp_group_buffer: NULL argument");
    return record(g, e.code, e);
  }
  *ptr = g->impl->buffer();
  if (bytes != nullptr) *bytes = g->impl->buffer_bytes();
  return DS4TP_OK;
}

int ds4tp_group_rank(const ds4tp_group *g) { return g ? g->impl->rank() : -1; }
int ds4tp_group_size(const ds4tp_group *g) { return g ? g->impl->size() : -1; }
int ds4tp_group_transport(const ds4tp_group *g) {
  return g ? g->impl->transport() : DS4TP_TRANSPORT_AUTO;
}
int ds4tp_group_rendezvous_port(const ds4tp_group *g) { return g ? g->impl->port() : -1; }
int ds4tp_group_failed(const ds4tp_group *g) { return g ? g->impl->failed() : DS4TP_EINVAL; }
const char *ds4tp_group_errmsg(const ds4tp_group *g) {
  if (g == nullptr) return "group is NULL";
  // The stream thread, or a request's call, failed the group: its reason
  // is the news.
  const bool on_thread = (g->stream && g->stream->state() == DS4TP_SERVICE_FAILED) ||
                         (g->requests && g->errmsg.empty());
  if (on_thread && g->impl->failed() != 0) g->errmsg = g->impl->message();
  return g->errmsg.c_str();
}
void ds4tp_group_mark_failed(ds4tp_group *g) {
  if (g != nullptr) g->impl->mark_failed();
}

int ds4tp_group_stats_read(const ds4tp_group *g, ds4tp_stats *st) {
  auto *h = const_cast<ds4tp_group *>(g);
  GROUP_CALL(h, [&] {
    ds4tp::stats::Snapshot s;
    h->impl->stats().snapshot(s);
    return ds4tp::capi::stats_to_c(s, h->impl->rank(), h->impl->transport(), st, e);
  }());
}

int ds4tp_group_stats_reset(ds4tp_group *g) {
  GROUP_CALL(g, (g->impl->stats_reset(), DS4TP_OK));
}

int ds4tp_group_stats_prometheus(const ds4tp_group *g, char *buf, size_t cap, size_t *needed) {
  auto *h = const_cast<ds4tp_group *>(g);
  GROUP_CALL(h, [&] {
    ds4tp::stats::Snapshot s;
    h->impl->stats().snapshot(s);
    return ds4tp::capi::prometheus_to_c(s, h->impl->rank(), h->impl->transport(), true, buf, cap,
                                        needed, e);
  }());
}

// Any thread, while calls run: neither GROUP_CALL's queue drain nor the
// handle's message (the calling thread's last error keeps it).
int ds4tp_group_dump(const ds4tp_group *g, const char *path) {
  return guard(nullptr, [&](Error &e) {
    if (g == nullptr) return record(nullptr, e.set(DS4TP_EINVAL, "group is NULL"), e);
    const char *env = std::getenv("DS4TP_GROUP_DUMP");
    const char *at = path != nullptr ? path : env != nullptr ? env : "";
    return record(nullptr, g->impl->dump(at, e), e);
  });
}

int ds4tp_group_dump_on_signal(ds4tp_group *g, int signo, const char *path) {
  return guard(nullptr, [&](Error &e) {
    if (g == nullptr) return record(nullptr, e.set(DS4TP_EINVAL, "group is NULL"), e);
    return record(nullptr, g->impl->dump_on_signal(signo, path != nullptr ? path : "", e), e);
  });
}

int ds4tp_group_plan(const ds4tp_group *g, char *buf, size_t cap, size_t *needed) {
  auto *h = const_cast<ds4tp_group *>(g);
  GROUP_CALL(h, [&] {
    const std::string plan = h->impl->plan();
    if (plan.empty()) return e.set(DS4TP_ESTATE, "group_plan: the group is not connected yet");
    return ds4tp::capi::text_to_c(plan, buf, cap, needed, "group_plan", e);
  }());
}

int ds4tp_group_topology(const ds4tp_group *g, int rank, int *host, int *local_index,
                         int *tiered) {
  auto *h = const_cast<ds4tp_group *>(g);
  GROUP_CALL(h, [&] {
    ds4tp::group::Group::Place p;
    if (int rc = h->impl->place(rank, p, e)) return rc;
    if (host != nullptr) *host = p.host;
    if (local_index != nullptr) *local_index = p.local;
    if (tiered != nullptr) *tiered = p.tiered ? 1 : 0;
    return int(DS4TP_OK);
  }());
}

int ds4tp_group_stream_start(ds4tp_group *g, const ds4tp_gate_service_options *svc,
                             const ds4tp_stream_options *opt, ds4tp_stream_words *words) {
  if (g == nullptr) {
    Error e0;
    e0.set(DS4TP_EINVAL, "group is NULL");
    return record(nullptr, e0.code, e0);
  }
  return guard(g, [&](Error &e) -> int {
    ds4tp::ServiceConfig c;
    ds4tp_stream_options o;
    int rc = ds4tp::capi::check_words_out(words, e);
    if (rc == DS4TP_OK) rc = ds4tp::capi::service_config_from_c(svc, c, e);
    if (rc == DS4TP_OK) rc = ds4tp::capi::stream_options_from_c(opt, o, e);
    if (rc == DS4TP_OK && (o.dtype < DS4TP_DTYPE_F32 || o.dtype > DS4TP_DTYPE_BF16))
      rc = e.set(DS4TP_EINVAL, "group stream dtype {} is not a ds4tp_dtype", o.dtype);
    if (rc == DS4TP_OK && g->requests && !g->requests->idle())
      rc = e.set(DS4TP_ESTATE, "group stream service: split-phase requests are still running "
                 "(wait for them first: the service is the group's only caller)");
    if (rc != DS4TP_OK) return record(g, rc, e);
    if (!g->stream) g->stream = std::make_unique<grp::GroupStream>(*g->impl);
    grp::StreamSpec spec;
    spec.bits = o.word_bits;
    spec.mode = o.mode;
    spec.slots = o.slots;
    spec.count = o.count;
    spec.dtype = grp::Dtype(o.dtype);
    rc = g->stream->start(c, spec, e);
    if (rc == DS4TP_OK) rc = ds4tp::capi::stream_words_to_c(*g->stream->words(), words, e);
    return record(g, rc, e);
  });
}

int ds4tp_group_stream_stop(ds4tp_group *g) {
  if (g == nullptr) {
    Error e0;
    e0.set(DS4TP_EINVAL, "group is NULL");
    return record(nullptr, e0.code, e0);
  }
  if (!g->stream) return DS4TP_OK;
  return guard(g, [&](Error &e) { return record(g, g->stream->stop(e), e); });
}

int ds4tp_group_stream_state(const ds4tp_group *g) {
  return g != nullptr && g->stream ? g->stream->state() : int(DS4TP_SERVICE_STOPPED);
}

uint64_t ds4tp_group_stream_seq(const ds4tp_group *g) {
  return g != nullptr && g->stream ? g->stream->seq() : 0;
}

}  // extern "C"
