// The C handle of a group and the one wrapper every group call goes
// through (group.cpp, collectives.cpp): argument refusals, the stream
// service's exclusive use, exceptions kept out of C, the message kept.
#pragma once

#include <exception>
#include <memory>
#include <new>
#include <string>

#include "common/error.hpp"
#include "common/status.hpp"
#include "group/group.hpp"
#include "group/stream.hpp"
#include "handle.hpp"
#include "request_queue.hpp"

struct ds4tp_group {
  std::unique_ptr<ds4tp::group::Group> impl;
  // Last error on this handle (what errmsg returns); mutable so errmsg can
  // pick up a failure of the stream thread.
  mutable std::string errmsg;
  // Declared after impl so it is destroyed (joined) first.
  std::unique_ptr<ds4tp::group::GroupStream> stream;
  // The split-phase calls' thread (group_requests.cpp), made at the first
  // start; destroyed first, while impl can still abort its call.
  std::unique_ptr<ds4tp::capi::RequestQueue> requests;
};

namespace ds4tp::capi {

// Keeps a failed call's message (the thread's and the handle's; a call
// run for a request keeps it in the request instead).
inline int record(ds4tp_group *g, int rc, const Error &err) {
  if (rc != DS4TP_OK) {
    ds4tp::capi::t_last_error = err.message.empty() ? ds4tp::status_message(rc) : err.message;
    if (g != nullptr && !RequestQueue::on_queue_thread()) g->errmsg = ds4tp::capi::t_last_error;
  }
  return rc;
}

// Runs a group call, turning an exception into a status.
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

}  // namespace ds4tp::capi

// The call `body` (an int over Error e) on group `g`: NULL and a running
// stream service refused, the requests started before it run first, the
// result recorded.
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
    if ((g)->requests && !ds4tp::capi::RequestQueue::on_queue_thread()) \
      (g)->requests->drain();                                \
    return guard((g), [&](Error &e) { return record((g), (body), e); }); \
  } while (0)
