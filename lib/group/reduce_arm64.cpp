// reduce_sum's AArch64 kernel (Apple Silicon, Arm Linux): NEON with the
// hardware half <-> float conversions (fcvtl / fcvtn), which every AArch64
// CPU has, so it needs no run-time check. The portable kernel's generic
// vectors rebuild each half conversion from integer and float operations.
//
// Same bits as the portable kernel: each lane adds the same values in the
// same rank order, half -> float is exact, float -> half rounds to nearest
// even (the FPCR default, which Linux and macOS keep), NaN stays NaN and
// turns quiet; bf16 is the same integer rounding as the scalar. The scalar
// tail is the portable scalar code. Checked bit for bit by
// tests/unit/test_group_convert.cpp, run under qemu-aarch64 on x86-64 hosts
// (scripts/check-arm64-sum.sh).
#include <arm_neon.h>

#include "group/reduce_loop.hpp"

namespace ds4tp::group::arm64 {
namespace {

// A step's eight elements as f32 lanes.
struct Lanes {
  float32x4_t a, b;
};

// What every codec here shares: the step, and adding two of them.
struct Step {
  static constexpr size_t kStep = 8;
  using Lanes = arm64::Lanes;
  static Lanes add(Lanes x, Lanes y) { return {vaddq_f32(x.a, y.a), vaddq_f32(x.b, y.b)}; }
};

// Byte loads and stores: buffers need no alignment.
inline uint16x8_t load_u16x8(const uint8_t *p) { return vreinterpretq_u16_u8(vld1q_u8(p)); }
inline void store_u16x8(uint8_t *p, uint16x8_t v) { vst1q_u8(p, vreinterpretq_u8_u16(v)); }

struct F32 : Step, ScalarF32 {
  static Lanes load(const uint8_t *p) {
    return {vreinterpretq_f32_u8(vld1q_u8(p)), vreinterpretq_f32_u8(vld1q_u8(p + 16))};
  }
  static void store(uint8_t *p, Lanes v) {
    vst1q_u8(p, vreinterpretq_u8_f32(v.a));
    vst1q_u8(p + 16, vreinterpretq_u8_f32(v.b));
  }
};

struct F16 : Step, ScalarF16 {
  static Lanes load(const uint8_t *p) {
    const float16x8_t h = vreinterpretq_f16_u16(load_u16x8(p));
    return {vcvt_f32_f16(vget_low_f16(h)), vcvt_high_f32_f16(h)};
  }
  static void store(uint8_t *p, Lanes v) {
    store_u16x8(p, vreinterpretq_u16_f16(vcvt_high_f16_f32(vcvt_f16_f32(v.a), v.b)));
  }
  static Lanes from_floats(const float *f) { return {vld1q_f32(f), vld1q_f32(f + 4)}; }
};

// bf16 is the top half of an f32: widen by shifting left 16, narrow with
// float_to_bf16's rounding in four lanes (NaN keeps its top bits and turns
// quiet, everything else rounds to nearest even).
struct BF16 : Step, ScalarBF16 {
  static Lanes load(const uint8_t *p) {
    const uint16x8_t h = load_u16x8(p);
    return {vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)),
            vreinterpretq_f32_u32(vshll_high_n_u16(h, 16))};
  }
  static uint32x4_t round(float32x4_t v) {
    const uint32x4_t x = vreinterpretq_u32_f32(v);
    const uint32x4_t odd = vandq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(1));
    const uint32x4_t rounded = vshrq_n_u32(vaddq_u32(x, vaddq_u32(vdupq_n_u32(0x7fff), odd)), 16);
    const uint32x4_t quiet = vorrq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(0x40));
    const uint32x4_t nan = vcgtq_u32(vandq_u32(x, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
    return vbslq_u32(nan, quiet, rounded);
  }
  static void store(uint8_t *p, Lanes v) {
    store_u16x8(p, vmovn_high_u32(vmovn_u32(round(v.a)), round(v.b)));
  }
};

}  // namespace

const KernelFns kFns = kernel_fns<F32, F16, BF16>();

}  // namespace ds4tp::group::arm64
