// extern "C" split-phase group calls (ds4tp_group_requests.h): each start
// queues the blocking call (collectives.cpp, group.cpp) with its arguments
// for the group's request thread (request_queue.hpp).
#include <cstdint>
#include <vector>

#include "group_handle.hpp"

using ds4tp::Error;
using ds4tp::capi::guard;
using ds4tp::capi::record;
using ds4tp::capi::Request;
using ds4tp::capi::RequestQueue;

struct ds4tp_group_request {
  std::shared_ptr<Request> state;
};

namespace {

// Queues `call` (an int()) on g's request thread; *req gets its handle.
template <typename Call>
int start(ds4tp_group *g, ds4tp_group_request **req, const char *what, Call &&call) {
  Error e;
  if (req != nullptr) *req = nullptr;
  if (g == nullptr) return record(nullptr, e.set(DS4TP_EINVAL, "{}_start: group is NULL", what), e);
  if (req == nullptr)
    return record(g, e.set(DS4TP_EINVAL, "{}_start: req (where the request goes) is NULL", what), e);
  if (g->stream && g->stream->running())
    return record(g, e.set(DS4TP_ESTATE, "{}_start: the group stream service is running and is "
                           "the only caller: call ds4tp_group_stream_stop first", what), e);
  return guard(g, [&](Error &) -> int {
    if (!g->requests)
      g->requests = std::make_unique<RequestQueue>([g] {
        g->impl->abort_with(DS4TP_ESTATE, "ds4tp_group_free while a split-phase request ran");
      });
    auto handle = std::make_unique<ds4tp_group_request>();
    handle->state = g->requests->push(std::forward<Call>(call));
    *req = handle.release();
    return DS4TP_OK;
  });
}

// A copy of a per-rank array (size entries; NULL stays empty, and the
// call refuses it when it runs).
std::vector<uint64_t> per_rank(const ds4tp_group *g, const uint64_t *a) {
  if (a == nullptr || g == nullptr) return {};
  return std::vector<uint64_t>(a, a + g->impl->size());
}
const uint64_t *or_null(const std::vector<uint64_t> &v) { return v.empty() ? nullptr : v.data(); }

}  // namespace

extern "C" {

int ds4tp_group_all_reduce_start(ds4tp_group *g, void *buf, uint64_t count, int dtype, int op,
                                 ds4tp_group_request **req) {
  return start(g, req, "all_reduce",
               [=] { return ds4tp_group_all_reduce(g, buf, count, dtype, op); });
}

int ds4tp_group_all_gather_start(ds4tp_group *g, const void *in, void *out, uint64_t bytes,
                                 ds4tp_group_request **req) {
  return start(g, req, "all_gather", [=] { return ds4tp_group_all_gather(g, in, out, bytes); });
}

int ds4tp_group_broadcast_start(ds4tp_group *g, void *buf, uint64_t bytes, int root,
                                ds4tp_group_request **req) {
  return start(g, req, "broadcast", [=] { return ds4tp_group_broadcast(g, buf, bytes, root); });
}

int ds4tp_group_barrier_start(ds4tp_group *g, ds4tp_group_request **req) {
  return start(g, req, "barrier", [=] { return ds4tp_group_barrier(g); });
}

int ds4tp_group_reduce_scatter_start(ds4tp_group *g, const void *in, void *out, uint64_t count,
                                     int dtype, int op, ds4tp_group_request **req) {
  return start(g, req, "reduce_scatter",
               [=] { return ds4tp_group_reduce_scatter(g, in, out, count, dtype, op); });
}

int ds4tp_group_reduce_start(ds4tp_group *g, void *buf, uint64_t count, int dtype, int op,
                             int root, ds4tp_group_request **req) {
  return start(g, req, "reduce",
               [=] { return ds4tp_group_reduce(g, buf, count, dtype, op, root); });
}

int ds4tp_group_gather_start(ds4tp_group *g, const void *in, void *out, uint64_t bytes, int root,
                             ds4tp_group_request **req) {
  return start(g, req, "gather", [=] { return ds4tp_group_gather(g, in, out, bytes, root); });
}

int ds4tp_group_scatter_start(ds4tp_group *g, const void *in, void *out, uint64_t bytes, int root,
                              ds4tp_group_request **req) {
  return start(g, req, "scatter", [=] { return ds4tp_group_scatter(g, in, out, bytes, root); });
}

int ds4tp_group_all_gather_v_start(ds4tp_group *g, const void *in, void *out,
                                   const uint64_t *bytes, ds4tp_group_request **req) {
  return start(g, req, "all_gather_v", [=, b = per_rank(g, bytes)] {
    return ds4tp_group_all_gather_v(g, in, out, or_null(b));
  });
}

int ds4tp_group_all_gather_rows_start(ds4tp_group *g, const void *in, void *out, uint64_t rows,
                                      uint64_t row_bytes, ds4tp_group_request **req) {
  return start(g, req, "all_gather_rows",
               [=] { return ds4tp_group_all_gather_rows(g, in, out, rows, row_bytes); });
}

int ds4tp_group_all_to_all_v_start(ds4tp_group *g, const void *in, const uint64_t *send_bytes,
                                   const uint64_t *send_offsets, void *out,
                                   const uint64_t *recv_bytes, const uint64_t *recv_offsets,
                                   ds4tp_group_request **req) {
  return start(g, req, "all_to_all_v",
               [=, sb = per_rank(g, send_bytes), so = per_rank(g, send_offsets),
                rb = per_rank(g, recv_bytes), ro = per_rank(g, recv_offsets)] {
                 return ds4tp_group_all_to_all_v(g, in, or_null(sb), or_null(so), out,
                                                 or_null(rb), or_null(ro));
               });
}

int ds4tp_group_test(ds4tp_group_request *req, int *done) {
  Error e;
  if (req == nullptr || done == nullptr)
    return record(nullptr, e.set(DS4TP_EINVAL, "ds4tp_group_test: req or done is NULL"), e);
  int rc = DS4TP_OK;
  *done = req->state->done(rc) ? 1 : 0;
  return *done ? rc : DS4TP_OK;
}

int ds4tp_group_wait(ds4tp_group_request *req) {
  Error e;
  if (req == nullptr) return record(nullptr, e.set(DS4TP_EINVAL, "ds4tp_group_wait: req is NULL"), e);
  return req->state->wait();
}

const char *ds4tp_group_request_errmsg(const ds4tp_group_request *req) {
  return req == nullptr ? "ds4tp_group_request_errmsg: req is NULL" : req->state->message();
}

void ds4tp_group_request_free(ds4tp_group_request *req) {
  if (req == nullptr) return;
  req->state->wait();
  delete req;
}

}  // extern "C"
