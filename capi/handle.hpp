// The C handle and the rules every C entry point follows: one opaque
// handle per Pair (wrap/unwrap are the only casts), every result recorded
// (the thread's last error and the pair's message), and no exception ever
// crossing back into C. The files beside this one only convert and check
// C arguments; what a failure does to the pair is Pair's decision.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "common/error.hpp"
#include "ds4tp/ds4tp.h"
#include "pair/pair.hpp"

struct ds4tp_pair {
  std::unique_ptr<ds4tp::Pair> impl;
};

namespace ds4tp::capi {

inline Pair *unwrap(const ds4tp_pair *p) { return p != nullptr ? p->impl.get() : nullptr; }
inline ds4tp_pair *wrap(std::unique_ptr<Pair> impl) {
  auto *p = new ds4tp_pair;
  p->impl = std::move(impl);
  return p;
}

// What ds4tp_last_error() returns on this thread.
extern thread_local std::string t_last_error;

// Records a result: the thread's last error and, with a pair, its message
// (ds4tp_errmsg). Whether the failure also ended the pair was settled by
// the Pair call that returned it. Returns rc.
int finish(ds4tp_pair *p, int rc, const Error &err);
// EINVAL for a bad C argument, recorded.
int invalid(ds4tp_pair *p, const char *what);

// Entry checks: DS4TP_OK, or the status to return (EINVAL for no pair;
// EFAILED with the original failure when the pair failed earlier).
int check_pair(const ds4tp_pair *p);
int check_live(const ds4tp_pair *p);

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

// Runs f() and turns any exception into a recorded status: ENOMEM for
// bad_alloc, EFAILED ("internal error") for the rest. Neither latches.
template <typename F>
int guarded(ds4tp_pair *p, F &&f) {
  try {
    return f();
  } catch (const std::bad_alloc &) {
    Error e;
    e.message = "out of memory";
    return finish(p, DS4TP_ENOMEM, e);
  } catch (const std::exception &ex) {
    Error e;
    e.message = std::string("internal error: ") + ex.what();
    return finish(p, DS4TP_EFAILED, e);
  } catch (...) {
    Error e;
    e.message = "internal error";
    return finish(p, DS4TP_EFAILED, e);
  }
}

// One lockstep call `f(Session &, Error &)` on a live pair: checked,
// guarded and recorded (Pair::control applies the failure rule).
template <typename F>
int control_call(ds4tp_pair *p, F &&f) {
  if (int rc = check_live(p)) return rc;
  return guarded(p, [&]() -> int {
    Error err;
    int rc = p->impl->control(err, f);
    return finish(p, rc, err);
  });
}

}  // namespace ds4tp::capi
