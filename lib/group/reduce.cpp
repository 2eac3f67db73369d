#include "group/reduce.hpp"

#include <array>
#include <cstdlib>
#include <cstring>
#include <utility>

#if defined(DS4TP_SUM_X86)
#include <cpuid.h>
#endif

#include "group/reduce_loop.hpp"

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

// The portable kernel: eight elements per step in two four-lane vectors,
// through the compilers' generic vector types (SSE2 on x86-64, NEON on
// Arm: the baselines, so it runs on every CPU). Loads and stores go
// through memcpy: buffers need no alignment.
typedef float f32x4 __attribute__((vector_size(16)));
typedef uint32_t u32x4 __attribute__((vector_size(16)));
typedef int32_t i32x4 __attribute__((vector_size(16)));
typedef uint16_t u16x8 __attribute__((vector_size(16)));

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

inline u32x4 pick(i32x4 mask, u32x4 yes, u32x4 no) {
  return (yes & u32x4(mask)) | (no & ~u32x4(mask));
}

// Eight 16-bit elements as two u32x4 (zero-extended) and back (the low
// halves): whole 16-byte shuffles, which SSE2 and NEON do in one or two
// instructions (an 8-byte vector would be taken apart element by element).
// Element order assumes a little-endian host, like the shm words.
inline void widen(const uint8_t *p, u32x4 &lo, u32x4 &hi) {
  const u16x8 h = loadu<u16x8>(p), z = {};
  u16x8 a = __builtin_shufflevector(h, z, 0, 8, 1, 9, 2, 10, 3, 11);
  u16x8 b = __builtin_shufflevector(h, z, 4, 12, 5, 13, 6, 14, 7, 15);
  std::memcpy(&lo, &a, sizeof lo);
  std::memcpy(&hi, &b, sizeof hi);
}
inline void narrow(uint8_t *p, u32x4 lo, u32x4 hi) {
  u16x8 a, b;
  std::memcpy(&a, &lo, sizeof a);
  std::memcpy(&b, &hi, sizeof b);
  storeu(p, __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14));
}

inline f32x4 bf16_lanes(u32x4 h) { return as_f32(h << 16); }

// float_to_bf16 in four lanes: NaN keeps its top bits and turns quiet,
// everything else rounds to nearest even.
inline u32x4 lanes_bf16(f32x4 v) {
  const u32x4 x = as_u32(v);
  const u32x4 rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const u32x4 quiet = (x >> 16) | 0x40u;
  return pick((x & 0x7fffffffu) > 0x7f800000u, quiet, rounded);
}

// half_to_float in four lanes, without branches and as exactly: the
// exponent and significand move into float position and the exponent is
// rebiased; inf/NaN get the rest of the float bias; a subnormal half
// (exponent 0) is rebuilt as 2^-14 * (1 + m/1024) and 2^-14 taken away,
// which leaves m * 2^-24 exactly.
inline f32x4 f16_lanes(u32x4 h) {
  const u32x4 shifted_exp = u32x4{} + (0x7c00u << 13);
  u32x4 o = ((h & 0x7fffu) << 13) + ((127u - 15u) << 23);
  const u32x4 exp = (h << 13) & shifted_exp;
  o = pick(exp == shifted_exp, o + ((128u - 16u) << 23), o);
  const f32x4 renormed = as_f32(o + (1u << 23)) - as_f32(u32x4{} + (113u << 23));
  o = pick(exp == 0u, as_u32(renormed), o);
  return as_f32(o | ((h & 0x8000u) << 16));
}

// float_to_half in four lanes, the scalar's results bit for bit: NaN
// stays quiet with its top payload bits, from 65520 up is inf, a half
// subnormal comes from one float add (the magic 0.5 puts the 2^-24 grid in
// the last place, so the hardware's nearest-even rounding is the
// rounding), a normal half from rebiasing with the round-half-even bias.
inline u32x4 lanes_f16(f32x4 v) {
  const u32x4 u = as_u32(v);
  const u32x4 sign = (u >> 16) & 0x8000u;
  const u32x4 a = u & 0x7fffffffu;
  const u32x4 nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  const u32x4 big = pick(a > 0x7f800000u, nan, u32x4{} + 0x7c00u);
  const u32x4 magic = u32x4{} + (126u << 23);  // 0.5f
  const u32x4 sub = as_u32(as_f32(a) + as_f32(magic)) - magic;
  const u32x4 normal = (a + ((15u - 127u) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  return pick(a >= 0x477ff000u, big, pick(a < (113u << 23), sub, normal)) | sign;
}

// Element codecs (reduce_loop.hpp): eight elements (two f32x4) and one,
// in f32 arithmetic.
struct Lanes {
  f32x4 a, b;
};
struct Step {
  static constexpr size_t kStep = 8;
  using Lanes = group::Lanes;
  static Lanes add(Lanes x, Lanes y) { return {x.a + y.a, x.b + y.b}; }
};
struct F32 : Step, ScalarF32 {
  static Lanes load(const uint8_t *p) { return {loadu<f32x4>(p), loadu<f32x4>(p + 16)}; }
  static void store(uint8_t *p, Lanes v) {
    storeu(p, v.a);
    storeu(p + 16, v.b);
  }
};
// The 16-bit formats: widen, convert each half, and back.
template <f32x4 (*ToF32)(u32x4), u32x4 (*FromF32)(f32x4), class Scalar>
struct Half16 : Step, Scalar {
  static Lanes load(const uint8_t *p) {
    u32x4 lo, hi;
    widen(p, lo, hi);
    return {ToF32(lo), ToF32(hi)};
  }
  static void store(uint8_t *p, Lanes v) { narrow(p, FromF32(v.a), FromF32(v.b)); }
  static Lanes from_floats(const float *f) { return {loadu<f32x4>(f), loadu<f32x4>(f + 4)}; }
};
using BF16 = Half16<bf16_lanes, lanes_bf16, ScalarBF16>;
using F16 = Half16<f16_lanes, lanes_f16, ScalarF16>;

void portable_sum(Dtype t, const void *const *src, int n, void *out, size_t count) {
  reduce_by_dtype<F32, F16, BF16>(t, src, n, out, count);
}

void portable_floats_to_half(const float *in, uint16_t *out, size_t count) {
  floats_to_half_steps<F16>(in, out, count);
}

#if defined(DS4TP_SUM_X86)
// AVX2 and F16C, and the OS saving the ymm registers (XCR0 bits 1 and 2),
// from cpuid itself: runs before main, and every compiler we build with
// (Zig's clang for macOS too) has <cpuid.h>.
bool cpu_has_avx2_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
  if (!osxsave || !avx || !f16c) return false;
  unsigned xcr0 = 0, high = 0;
  __asm__("xgetbv" : "=a"(xcr0), "=d"(high) : "c"(0));
  if ((xcr0 & 6u) != 6u || __get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  return (b & (1u << 5)) != 0;  // AVX2
}
#endif

Kernel pick_kernel() {
  const char *env = std::getenv("DS4TP_SUM_KERNEL");
  if (env != nullptr && std::strcmp(env, "portable") == 0) return Kernel::Portable;
  return usable_kernels().back();  // a hardware one when there is one
}

// Picked before main (no first-call race, no check per call); a call from
// another file's static initializer before this runs sees 0, the portable one.
const Kernel kActive = pick_kernel();

}  // namespace

bool kernel_usable(Kernel k) {
  switch (k) {
    case Kernel::Portable: return true;
#if defined(DS4TP_SUM_X86)
    case Kernel::X86Avx2: return cpu_has_avx2_f16c();
#endif
#if defined(DS4TP_SUM_ARM64)
    case Kernel::Arm64Neon: return true;
#endif
    default: return false;
  }
}

std::vector<Kernel> usable_kernels() {
  std::vector<Kernel> all = {Kernel::Portable};
  for (Kernel k : {Kernel::X86Avx2, Kernel::Arm64Neon})
    if (kernel_usable(k)) all.push_back(k);
  return all;
}

Kernel active_kernel() { return kActive; }

const char *kernel_name(Kernel k) {
  switch (k) {
    case Kernel::X86Avx2: return "avx2+f16c";
    case Kernel::Arm64Neon: return "neon";
    default: return "portable";
  }
}

namespace {
const KernelFns kPortableFns = {&portable_sum, &portable_floats_to_half};

// Kernel k's entry points (k usable; the portable ones otherwise).
const KernelFns &fns(Kernel k) {
#if defined(DS4TP_SUM_X86)
  if (k == Kernel::X86Avx2) return x86::kFns;
#endif
#if defined(DS4TP_SUM_ARM64)
  if (k == Kernel::Arm64Neon) return arm64::kFns;
#endif
  (void)k;
  return kPortableFns;
}
}  // namespace

void reduce_sum_with(Kernel k, Dtype t, const void *const *src, int n, void *out, size_t count) {
  // One rank (tests only: groups have 2 or more) is a conversion round
  // trip, which compilers fold away in the hardware kernels (GCC and
  // LLVM treat f16 -> f32 -> f16 as the identity), so a signalling NaN
  // would come back unquieted there; the portable kernel's integer
  // conversions keep the scalar's bits.
  fns(n == 1 ? Kernel::Portable : k).sum(t, src, n, out, count);
}

void floats_to_half_with(Kernel k, const float *in, uint16_t *out, size_t count) {
  fns(k).to_half(in, out, count);
}

void reduce_sum(Dtype t, const void *const *src, int n, void *out, size_t count) {
  reduce_sum_with(kActive, t, src, n, out, count);
}

void floats_to_half(const float *in, uint16_t *out, size_t count) {
  floats_to_half_with(kActive, in, out, count);
}

}  // namespace ds4tp::group
