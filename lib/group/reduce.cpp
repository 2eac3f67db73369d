#include "group/reduce.hpp"

#include <array>
#include <cstring>
#include <utility>

#include "group/group.hpp"  // kMaxRanks

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

// Four lanes per step through the compilers' generic vector types (SSE2
// on x86-64, NEON on Arm: the baselines, so no dispatch): each lane adds the same values in the same
// rank order as the scalar tail below, so the bits do not depend on where
// a block boundary falls. Loads and stores go through memcpy: buffers
// need no alignment.
typedef float f32x4 __attribute__((vector_size(16)));
typedef uint32_t u32x4 __attribute__((vector_size(16)));
typedef int32_t i32x4 __attribute__((vector_size(16)));
typedef uint16_t u16x4 __attribute__((vector_size(8)));
constexpr size_t kLanes = 4;

template <class V>
inline V load(const void *p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
inline void store(void *p, V v) {
  std::memcpy(p, &v, sizeof v);
}
inline f32x4 as_f32(u32x4 v) {
  f32x4 f;
  std::memcpy(&f, &v, sizeof f);
  return f;
}
inline u32x4 as_u32(f32x4 v) {
  u32x4 u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

inline f32x4 load_bf16x4(const uint8_t *p) {
  return as_f32(__builtin_convertvector(load<u16x4>(p), u32x4) << 16);
}

// float_to_bf16 in four lanes: NaN keeps its top bits and turns quiet,
// everything else rounds to nearest even.
inline void store_bf16x4(uint8_t *p, f32x4 v) {
  const u32x4 x = as_u32(v);
  const u32x4 rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const u32x4 quiet = (x >> 16) | 0x40u;
  const i32x4 nan = (x & 0x7fffffffu) > 0x7f800000u;  // all ones where NaN
  const u32x4 pick = (quiet & u32x4(nan)) | (rounded & ~u32x4(nan));
  store(p, __builtin_convertvector(pick, u16x4));
}

// The rank count is a template parameter, so the loop over ranks unrolls
// and the source pointers live in registers (as a runtime loop, the
// per-vector loop overhead cost 2.5x at N=2 and 3.4x at N=4; the pointers
// are copied to a local array, which nothing the stores write can alias).
template <int N>
void reduce_f32_n(const void *const *src, void *out, size_t count) {
  const uint8_t *s[N];
  for (int r = 0; r < N; r++) s[r] = static_cast<const uint8_t *>(src[r]);
  auto *o = static_cast<uint8_t *>(out);
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    f32x4 acc = load<f32x4>(s[0] + i * 4);
    for (int r = 1; r < N; r++) acc += load<f32x4>(s[r] + i * 4);
    store(o + i * 4, acc);
  }
  for (; i < count; i++) {
    float acc = load<float>(s[0] + i * 4);
    for (int r = 1; r < N; r++) acc += load<float>(s[r] + i * 4);
    store(o + i * 4, acc);
  }
}

template <int N>
void reduce_bf16_n(const void *const *src, void *out, size_t count) {
  const uint8_t *s[N];
  for (int r = 0; r < N; r++) s[r] = static_cast<const uint8_t *>(src[r]);
  auto *o = static_cast<uint8_t *>(out);
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    f32x4 acc = load_bf16x4(s[0] + i * 2);
    for (int r = 1; r < N; r++) acc += load_bf16x4(s[r] + i * 2);
    store_bf16x4(o + i * 2, acc);
  }
  for (; i < count; i++) {
    float acc = bf16_to_float(load<uint16_t>(s[0] + i * 2));
    for (int r = 1; r < N; r++) acc += bf16_to_float(load<uint16_t>(s[r] + i * 2));
    store(o + i * 2, float_to_bf16(acc));
  }
}

using ReduceFn = void (*)(const void *const *, void *, size_t);
template <size_t... I>
constexpr std::array<ReduceFn, sizeof...(I)> f32_table(std::index_sequence<I...>) {
  return {&reduce_f32_n<int(I) + 1>...};
}
template <size_t... I>
constexpr std::array<ReduceFn, sizeof...(I)> bf16_table(std::index_sequence<I...>) {
  return {&reduce_bf16_n<int(I) + 1>...};
}
constexpr auto kF32 = f32_table(std::make_index_sequence<kMaxRanks>());
constexpr auto kBF16 = bf16_table(std::make_index_sequence<kMaxRanks>());

// f16 stays scalar (its conversion branches per element), in blocks so
// the accumulators live in a small array.
void reduce_f16(const void *const *src, int n, void *out, size_t count) {
  constexpr size_t kBlock = 256;
  float acc[kBlock];
  auto *o = static_cast<uint8_t *>(out);
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t m = count - base < kBlock ? count - base : kBlock;
    for (int r = 0; r < n; r++) {
      const auto *s = static_cast<const uint8_t *>(src[r]) + base * 2;
      for (size_t j = 0; j < m; j++) {
        const float v = half_to_float(load<uint16_t>(s + j * 2));
        acc[j] = r == 0 ? v : acc[j] + v;
      }
    }
    for (size_t j = 0; j < m; j++) store(o + (base + j) * 2, float_to_half(acc[j]));
  }
}

}  // namespace

void reduce_sum(Dtype t, const void *const *src, int n, void *out, size_t count) {
  switch (t) {
    case Dtype::F32: kF32[size_t(n - 1)](src, out, count); break;
    case Dtype::F16: reduce_f16(src, n, out, count); break;
    case Dtype::BF16: kBF16[size_t(n - 1)](src, out, count); break;
  }
}

}  // namespace ds4tp::group
