#include "group/reduce.hpp"

#include <cstring>

namespace ds4tp::group {
namespace {

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

constexpr size_t kBlock = 256;

template <typename Load, typename Store>
void reduce_blocks(const void *const *src, int n, void *out, size_t count, size_t esz,
                   Load load, Store store) {
  float acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    size_t m = count - base < kBlock ? count - base : kBlock;
    const auto *s0 = static_cast<const uint8_t *>(src[0]) + base * esz;
    for (size_t j = 0; j < m; j++) acc[j] = load(s0, j);
    for (int r = 1; r < n; r++) {
      const auto *sr = static_cast<const uint8_t *>(src[r]) + base * esz;
      for (size_t j = 0; j < m; j++) acc[j] += load(sr, j);
    }
    auto *o = static_cast<uint8_t *>(out) + base * esz;
    for (size_t j = 0; j < m; j++) store(o, j, acc[j]);
  }
}

}  // namespace

size_t dtype_bytes(Dtype t) { return t == Dtype::F32 ? 4 : 2; }
const char *dtype_name(Dtype t) {
  switch (t) {
    case Dtype::F32: return "f32";
    case Dtype::F16: return "f16";
    case Dtype::BF16: return "bf16";
  }
  return "?";
}

// Conversions after F. Giesen's branch-light formulations (public domain).
float half_to_float(uint16_t h) {
  const float magic = from_bits(113u << 23);
  const uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t o = (uint32_t(h) & 0x7fffu) << 13;
  uint32_t exp = shifted_exp & o;
  o += (127u - 15u) << 23;
  if (exp == shifted_exp) {
    o += (128u - 16u) << 23;  // Inf/NaN
  } else if (exp == 0) {
    o += 1u << 23;  // zero/subnormal: renormalise
    o = bits(from_bits(o) - magic);
  }
  o |= (uint32_t(h) & 0x8000u) << 16;
  return from_bits(o);
}

uint16_t float_to_half(float ff) {
  uint32_t f = bits(ff);
  const uint32_t f32infty = 255u << 23;
  const uint32_t f16max = (127u + 16u) << 23;
  const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t sign = f & 0x80000000u;
  f ^= sign;
  uint16_t o;
  if (f >= f16max) {
    o = f > f32infty ? 0x7e00 : 0x7c00;
  } else if (f < (113u << 23)) {
    float t = from_bits(f) + from_bits(denorm_magic);
    o = uint16_t(bits(t) - denorm_magic);
  } else {
    uint32_t mant_odd = (f >> 13) & 1u;
    f += (uint32_t(15 - 127) << 23) + 0xfffu;
    f += mant_odd;
    o = uint16_t(f >> 13);
  }
  return uint16_t(o | (sign >> 16));
}

float bf16_to_float(uint16_t h) { return from_bits(uint32_t(h) << 16); }

uint16_t float_to_bf16(float f) {
  uint32_t x = bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return uint16_t(x >> 16);
}

namespace {

float f32_identity(float v) { return v; }

// Sums elements stored as `Bits`, read as f32 through `ToF` and written
// back through `FromF`: one body for every dtype.
template <class Bits, float (*ToF)(Bits), Bits (*FromF)(float)>
void reduce_as(const void *const *src, int n, void *out, size_t count) {
  reduce_blocks(
      src, n, out, count, sizeof(Bits),
      [](const uint8_t *p, size_t j) {
        Bits v;
        std::memcpy(&v, p + j * sizeof v, sizeof v);
        return ToF(v);
      },
      [](uint8_t *p, size_t j, float v) {
        Bits b = FromF(v);
        std::memcpy(p + j * sizeof b, &b, sizeof b);
      });
}

}  // namespace

void reduce_sum(Dtype t, const void *const *src, int n, void *out, size_t count) {
  switch (t) {
    case Dtype::F32: reduce_as<float, f32_identity, f32_identity>(src, n, out, count); break;
    case Dtype::F16: reduce_as<uint16_t, half_to_float, float_to_half>(src, n, out, count); break;
    case Dtype::BF16: reduce_as<uint16_t, bf16_to_float, float_to_bf16>(src, n, out, count); break;
  }
}

}  // namespace ds4tp::group
