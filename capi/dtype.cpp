// The 16-bit element conversions as exported C functions
// (include/ds4tp/ds4tp_groups.h): the group's own (lib/group/reduce), so an
// engine converts exactly as an all-reduce widens and rounds.
#include <cstring>

#include "ds4tp/ds4tp.h"
#include "group/reduce.hpp"
#include "handle.hpp"

namespace grp = ds4tp::group;
using ds4tp::Error;
using ds4tp::capi::finish;

uint16_t ds4tp_f32_to_f16(float value) { return grp::float_to_half(value); }
float ds4tp_f16_to_f32(uint16_t bits) { return grp::half_to_float(bits); }
uint16_t ds4tp_f32_to_bf16(float value) { return grp::float_to_bf16(value); }
float ds4tp_bf16_to_f32(uint16_t bits) { return grp::bf16_to_float(bits); }

namespace {

bool known(int t) { return t >= DS4TP_DTYPE_F32 && t <= DS4TP_DTYPE_BF16; }

float widen(int t, const void *src, uint64_t i) {
  if (t == DS4TP_DTYPE_F32) return static_cast<const float *>(src)[i];
  const uint16_t h = static_cast<const uint16_t *>(src)[i];
  return t == DS4TP_DTYPE_F16 ? grp::half_to_float(h) : grp::bf16_to_float(h);
}

}  // namespace

int ds4tp_dtype_convert(void *dst, int dst_dtype, const void *src, int src_dtype,
                        uint64_t count) {
  if (!known(dst_dtype) || !known(src_dtype) || (count != 0 && (dst == nullptr || src == nullptr))) {
    Error e;
    e.set(DS4TP_EINVAL,
          "ds4tp_dtype_convert: dst {} (dtype {}) src {} (dtype {}) count {}: dtypes are "
          "DS4TP_DTYPE_F32 (0), F16 (1) or BF16 (2), buffers non-NULL for count > 0",
          dst, dst_dtype, src, src_dtype, count);
    return finish(nullptr, DS4TP_EINVAL, e);
  }
  const auto t = grp::Dtype(dst_dtype);
  if (dst_dtype == src_dtype) {
    if (count) std::memmove(dst, src, size_t(count) * grp::dtype_bytes(t));
    return DS4TP_OK;
  }
  if (dst_dtype == DS4TP_DTYPE_F16 && src_dtype == DS4TP_DTYPE_F32) {  // the vector kernel
    grp::floats_to_half(static_cast<const float *>(src), static_cast<uint16_t *>(dst), size_t(count));
    return DS4TP_OK;
  }
  // Element by element, each read before it is written: in place works
  // for equal sizes (F16 <-> BF16).
  for (uint64_t i = 0; i < count; i++) {
    const float f = widen(src_dtype, src, i);
    if (dst_dtype == DS4TP_DTYPE_F32)
      static_cast<float *>(dst)[i] = f;
    else
      static_cast<uint16_t *>(dst)[i] =
          dst_dtype == DS4TP_DTYPE_F16 ? grp::float_to_half(f) : grp::float_to_bf16(f);
  }
  return DS4TP_OK;
}
