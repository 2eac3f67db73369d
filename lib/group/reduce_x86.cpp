// reduce_sum's x86-64 kernel: eight f32 lanes (AVX2) and the hardware
// half <-> float conversions (F16C). Built with -mavx2 -mf16c (no -mfma:
// a fused multiply-add would change the bits), called only through
// reduce.cpp's dispatch once the CPU says it has both.
//
// Same bits as the portable kernel: each lane adds the same values in the
// same rank order, the conversions are exact (half -> float) or round to
// nearest even (float -> half with _MM_FROUND_TO_NEAREST_INT, and bf16's
// integer rounding below), NaN stays NaN and turns quiet. The scalar tail
// is the portable scalar code. Measured (bench/README.md "Sum kernels"):
// an f16 sum of 4096 elements over 2 ranks went from 11 us to 0.4 us.
#include <immintrin.h>

#include "group/reduce_loop.hpp"

namespace ds4tp::group::x86 {
namespace {

// A step's sixteen elements as f32 lanes. The lane order is the codec's
// own (bf16 interleaves within 128-bit halves); every rank's load and the
// store use the same one, and the lanes are added element by element.
struct Lanes {
  __m256 a, b;
};

// What every codec here shares: the step, and adding two of them.
struct Step {
  static constexpr size_t kStep = 16;
  using Lanes = x86::Lanes;
  static Lanes add(Lanes x, Lanes y) { return {_mm256_add_ps(x.a, y.a), _mm256_add_ps(x.b, y.b)}; }
};

struct F32 : Step, ScalarF32 {
  static Lanes load(const uint8_t *p) {
    const auto *f = reinterpret_cast<const float *>(p);
    return {_mm256_loadu_ps(f), _mm256_loadu_ps(f + 8)};
  }
  static void store(uint8_t *p, Lanes v) {
    auto *f = reinterpret_cast<float *>(p);
    _mm256_storeu_ps(f, v.a);
    _mm256_storeu_ps(f + 8, v.b);
  }
};

inline __m128i load128(const uint8_t *p) { return _mm_loadu_si128(reinterpret_cast<const __m128i *>(p)); }
inline void store128(uint8_t *p, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i *>(p), v); }

struct F16 : Step, ScalarF16 {
  static constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  static Lanes load(const uint8_t *p) {
    return {_mm256_cvtph_ps(load128(p)), _mm256_cvtph_ps(load128(p + 16))};
  }
  static void store(uint8_t *p, Lanes v) {
    store128(p, _mm256_cvtps_ph(v.a, kRound));
    store128(p + 16, _mm256_cvtps_ph(v.b, kRound));
  }
  static Lanes from_floats(const float *f) { return {_mm256_loadu_ps(f), _mm256_loadu_ps(f + 8)}; }
};

// bf16 is the top half of an f32: interleaving zeros below each element
// (unpacklo / unpackhi, per 128-bit half) widens it, and packus of the two
// rounded halves puts the elements back in their order.
struct BF16 : Step, ScalarBF16 {
  static Lanes load(const uint8_t *p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)), z = _mm256_setzero_si256();
    return {_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, h)),
            _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, h))};
  }
  // float_to_bf16 in eight lanes: NaN keeps its top bits and turns quiet,
  // everything else rounds to nearest even; the result in the low 16 bits.
  static __m256i round(__m256 v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    // |x| > inf as signed 32-bit: both sides are below 2^31.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(rounded, quiet, nan);
  }
  static void store(uint8_t *p, Lanes v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(p), _mm256_packus_epi32(round(v.a), round(v.b)));
  }
};

}  // namespace

const KernelFns kFns = kernel_fns<F32, F16, BF16>();

}  // namespace ds4tp::group::x86
