// extern "C" group calls: argument checks, option conversion (launcher
// environment included), status recording. Never throws into C.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "auth/key.hpp"
#include "convert.hpp"
#include "handle.hpp"
#include "stats.hpp"
#include "group/group.hpp"
#include "group/stream.hpp"
#include "stream.hpp"

struct ds4tp_group {
  std::unique_ptr<ds4tp::group::Group> impl;
  // Last error on this handle (what errmsg returns); mutable so errmsg can
  // pick up a failure of the stream thread.
  mutable std::string errmsg;
  // Declared after impl so it is destroyed (joined) first.
  std::unique_ptr<ds4tp::group::GroupStream> stream;
};

using ds4tp::Error;
namespace grp = ds4tp::group;

namespace {

int env_int(const char *a, const char *b, const char *c) {
  for (const char *name : {a, b, c}) {
    const char *v = std::getenv(name);
    if (v != nullptr && *v != 0) {
      char *end = nullptr;
      long x = std::strtol(v, &end, 10);
      if (end != v && *end == 0 && x >= 0 && x < 1 << 20) return int(x);
    }
  }
  return -1;
}

int record(ds4tp_group *g, int rc, const Error &err) {
  if (rc != DS4TP_OK) {
    ds4tp::capi::t_last_error = err.message.empty() ? ds4tp_strerror(rc) : err.message;
    if (g != nullptr) g->errmsg = ds4tp::capi::t_last_error;
  }
  return rc;
}

template <typename F>
int guard(ds4tp_group *g, F &&f) {
  Error e;
  try {
    return f(e);
  } catch (const std::bad_alloc &) {
    e.set(DS4TP_ENOMEM, "out of memory");
  } catch (const std::exception &ex) {
    e.set(DS4TP_EFAILED, "internal error: {}", ex.what());
  } catch (...) {
    e.set(DS4TP_EFAILED, "internal error");
  }
  return record(g, e.code, e);
}

int options_from_c(const ds4tp_group_options *copt, const ds4tp_identity *cid, bool local,
                   grp::Options &o, Error &err) {
  ds4tp_group_options c;
  ds4tp_group_options_init(&c);
  if (copt != nullptr && !ds4tp::capi::copy_sized(copt, c))
    return err.set(DS4TP_EINVAL, "group options: size {} (call ds4tp_group_options_init)",
                   copt->size);
  if (!local) {
    o.rank = c.rank >= 0 ? c.rank : env_int("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID");
    o.size = c.group_size >= 0 ? c.group_size
                               : env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS");
    if (o.size < 2 || o.size > grp::kMaxRanks)
      return err.set(DS4TP_EINVAL,
                     "group size {} outside 2..{} (set group_size, or WORLD_SIZE, "
                     "OMPI_COMM_WORLD_SIZE, SLURM_NTASKS)",
                     o.size, grp::kMaxRanks);
    if (o.rank < 0 || o.rank >= o.size)
      return err.set(DS4TP_EINVAL,
                     "rank {} outside 0..{} (set rank, or RANK, OMPI_COMM_WORLD_RANK, "
                     "SLURM_PROCID)",
                     o.rank, o.size - 1);
    const char *h = c.rendezvous_host != nullptr ? c.rendezvous_host : std::getenv("MASTER_ADDR");
    o.host = h != nullptr && *h != 0 ? h : "127.0.0.1";
    int port = c.rendezvous_port >= 0 ? c.rendezvous_port : env_int("MASTER_PORT", "", "");
    o.port = port >= 0 ? port : 29600;
    if (o.port > 65535) return err.set(DS4TP_EINVAL, "rendezvous port {}", o.port);
    if (c.transport < DS4TP_TRANSPORT_AUTO || c.transport > DS4TP_TRANSPORT_SHM)
      return err.set(DS4TP_EINVAL, "group transport {} (auto, tcp or shm)", c.transport);
    o.transport = c.transport;
  }
  if (c.connect_timeout_ms <= 0 || c.op_timeout_ms <= 0)
    return err.set(DS4TP_EINVAL, "group deadlines must be > 0 (connect {} ms, op {} ms)",
                   c.connect_timeout_ms, c.op_timeout_ms);
  o.connect_timeout_ns = uint64_t(c.connect_timeout_ms) * 1'000'000;
  o.op_timeout_ns = uint64_t(c.op_timeout_ms) * 1'000'000;
  if (c.chunk_bytes < 4096 || c.chunk_bytes % 64 != 0 || c.chunk_bytes > (256u << 20))
    return err.set(DS4TP_EINVAL, "chunk_bytes {}: 4096..256 MiB, a multiple of 64",
                   c.chunk_bytes);
  o.chunk_bytes = c.chunk_bytes;
  if ((c.psk == nullptr) != (c.psk_bytes == 0))
    return err.set(DS4TP_EINVAL, "group psk and psk_bytes must be set together");
  if (c.spin_us < -1 || c.spin_us > 1'000'000)
    return err.set(DS4TP_EINVAL, "spin_us {}: 0 (default), -1 (never) or 1..1000000", c.spin_us);
  o.spin_ns = c.spin_us == 0 ? -1 : c.spin_us < 0 ? 0 : int64_t(c.spin_us) * 1000;
  if (c.peer_silence_ms < 200 || c.peer_silence_ms > 600000)
    return err.set(DS4TP_EINVAL, "peer_silence_ms {}: 200..600000", c.peer_silence_ms);
  o.peer_silence_ns = uint64_t(c.peer_silence_ms) * 1'000'000;
  std::string source;
  if (int rc = ds4tp::auth::load_key(c.psk, c.psk_bytes, nullptr, o.key, source, err)) return rc;
  if (cid != nullptr)
    if (int rc = ds4tp::capi::identity_from_c(cid, o.id, err)) return rc;
  return DS4TP_OK;
}

}  // namespace

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
    if (int rc = options_from_c(opt, identity, false, o, e)) return record(nullptr, rc, e);
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
    if (int rc = options_from_c(opt, identity, true, o, err)) return record(nullptr, rc, err);
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

#define GROUP_CALL(g, body)                                  \
  do {                                                       \
    if ((g) == nullptr) {                                    \
      Error e0;                                              \
      e0.set(DS4TP_EINVAL, "group is NULL");                 \
      return record(nullptr, e0.code, e0);                   \
    }                                                        \
    if ((g)->stream && (g)->stream->running()) {             \
      Error e0;                                              \
      e0.set(DS4TP_ESTATE, "the group stream service is running and is the " \
             "only caller: call ds4tp_group_stream_stop first"); \
      return record((g), e0.code, e0);                       \
    }                                                        \
    return guard((g), [&](Error &e) { return record((g), (body), e); }); \
  } while (0)

int ds4tp_group_all_reduce(ds4tp_group *g, void *buf, uint64_t count, int dtype, int op) {
  if (g != nullptr && ((buf == nullptr && count != 0) || dtype < DS4TP_DTYPE_F32 ||
                       dtype > DS4TP_DTYPE_BF16 || op != DS4TP_OP_SUM)) {
    Error e;
    e.set(DS4TP_EINVAL, "all_reduce: buf {} count {} dtype {} op {}", buf, count, dtype, op);
    return record(g, e.code, e);
  }
  GROUP_CALL(g, g->impl->all_reduce(buf, count, grp::Dtype(dtype), e));
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
  // The stream thread failed the group: its reason is the news.
  if (g->stream && g->stream->state() == DS4TP_SERVICE_FAILED && g->impl->failed() != 0)
    g->errmsg = g->impl->message();
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
