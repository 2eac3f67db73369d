// Shared checks of the control frame decoders (wire/frames_*.cpp): every
// failure is EPROTO prefixed "EVAL frame (type 2, 20 bytes): ". Internal to
// wire/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "common/error.hpp"
#include "wire/codec.hpp"
#include "wire/frame_table.hpp"

namespace ds4tp::wire::checks {

// The frame a decoder reads and its size, for the message prefix.
struct Ctx {
  FrameType type;
  size_t n;
};

template <typename... Args>
int bad(const Ctx &c, Error &err, fmt::format_string<Args...> f, Args &&...args) {
  std::string why = fmt::format(f, std::forward<Args>(args)...);
  return err.set(DS4TP_EPROTO, "{} frame (type {}, {} bytes): {}", frame_name(c.type),
                 uint16_t(c.type), c.n, why);
}

inline int need_exact(const Ctx &c, size_t want, Error &err) {
  if (c.n != want) return bad(c, err, "want exactly {} bytes", want);
  return DS4TP_OK;
}

inline int need_min(const Ctx &c, size_t want, Error &err) {
  if (c.n < want) return bad(c, err, "shorter than its {} byte fixed part", want);
  return DS4TP_OK;
}

inline int reserved_zero(const Ctx &c, uint64_t v, const char *field, Error &err) {
  if (v != 0) return bad(c, err, "reserved field {} is {}, must be 0", field, v);
  return DS4TP_OK;
}

// The first reserved field a layout read that is not 0 (wire/codec.hpp).
inline int reserved_zero(const Ctx &c, const Reader &r, Error &err) {
  if (r.pad_value() != 0)
    return bad(c, err, "reserved field at byte {} is {}, must be 0", r.pad_at(), r.pad_value());
  return DS4TP_OK;
}

inline int session_nonzero(const Ctx &c, uint64_t session, Error &err) {
  if (session == 0) return bad(c, err, "session id 0 is invalid");
  return DS4TP_OK;
}

// Checks that a count of `unit`-byte elements exactly fills what is left.
inline int count_fills(const Ctx &c, const char *what, uint64_t count, uint64_t unit, uint64_t left,
                Error &err) {
  // 64-bit: count <= 2^32 and unit <= 2^32 cannot overflow.
  if (count * unit != left)
    return bad(c, err, "{} {} need {} bytes but {} remain", count, what, count * unit, left);
  return DS4TP_OK;
}

}  // namespace ds4tp::wire::checks
