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

// half -> float is exact: rebuild the fields (a subnormal half is
// normalised by counting its leading zeros).
float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return from_bits(sign | 0x7f800000u | (man << 13));  // inf, nan
  if (exp != 0) return from_bits(sign | ((exp + 112u) << 23) | (man << 13));
  if (man == 0) return from_bits(sign);
  int e = 113;  // value = man * 2^-24: shift the leading one up to bit 10
  while ((man & 0x400u) == 0) {
    man <<= 1;
    e--;
  }
  return from_bits(sign | (uint32_t(e) << 23) | ((man & 0x3ffu) << 13));
}

// float -> half, round to nearest, ties to even. The kept bits are the
// significand shifted right (by 13 for a normal half, more for a
// subnormal one); the dropped bits decide the rounding, and a carry out
// of the significand bumps the exponent, which is what rounding up to the
// next binade (or to infinity) means.
uint16_t float_to_half(float f) {
  const uint32_t u = bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)  // nan: quiet, keeping the payload's top bits
    return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to inf
  const uint32_t e = a >> 23;
  if (e < 101) return sign;  // below 2^-25: rounds to zero
  uint32_t man = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 13, base = 0;
  if (e >= 113) {
    base = (e - 112) << 10;  // normal half: exponent field, implicit bit dropped
    man &= 0x7fffffu;
  } else {
    shift = 126 - e;  // subnormal half: units of 2^-24
  }
  uint32_t q = man >> shift;
  const uint32_t rest = man & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u))) q++;
  return uint16_t(sign | (base + q));
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
