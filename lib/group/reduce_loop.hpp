// The loop every sum kernel runs (reduce.cpp: portable; reduce_x86.cpp:
// AVX2 + F16C; reduce_arm64.cpp: NEON), over a codec C of one dtype:
//   C::kBytes, C::kStep        element size, elements per vector step
//   C::Lanes                   one step's elements as f32 lanes
//   C::load(p), C::store(p, v), C::add(a, b)   a step
//   C::load1(p), C::store1(p, f)               one element (the tail)
//   F16::from_floats(p)        f32 lanes from floats (floats_to_half)
// Each lane and the tail add the same values in rank order, so the bits
// do not depend on where a step boundary falls. The rank count is a
// template parameter, so the loop over ranks unrolls and the source
// pointers live in registers (as a runtime loop, the per-vector loop
// overhead cost 2.5x at N=2 and 3.4x at N=4; the pointers are copied to a
// local array, which nothing the stores write can alias).
// Everything here but KernelFns lives in an anonymous namespace: each
// kernel file builds its own copy with its own flags (-mavx2 for x86),
// and one file's copy of an inline helper must never serve another's
// callers on a CPU without those instructions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "group/group.hpp"  // kMaxRanks
#include "group/reduce.hpp"

namespace ds4tp::group {

// A hardware kernel's two entry points; reduce.cpp dispatches to them.
struct KernelFns {
  void (*sum)(Dtype t, const void *const *src, int n, void *out, size_t count);
  void (*to_half)(const float *in, uint16_t *out, size_t count);
};
namespace x86 {
extern const KernelFns kFns;  // reduce_x86.cpp: AVX2 + F16C
}
namespace arm64 {
extern const KernelFns kFns;  // reduce_arm64.cpp: NEON
}

namespace {

// Unaligned loads and stores of any trivially copyable value (a float, a
// half's bits, a generic vector) through memcpy: buffers need no alignment.
template <class V>
inline V loadu(const void *p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
inline void storeu(void *p, V v) {
  std::memcpy(p, &v, sizeof v);
}

// The scalar tails every kernel shares: the portable scalar conversions.
struct ScalarF32 {
  static constexpr size_t kBytes = 4;
  static float load1(const uint8_t *p) { return loadu<float>(p); }
  static void store1(uint8_t *p, float v) { storeu(p, v); }
};
struct ScalarF16 {
  static constexpr size_t kBytes = 2;
  static float load1(const uint8_t *p) { return half_to_float(loadu<uint16_t>(p)); }
  static void store1(uint8_t *p, float v) { storeu(p, float_to_half(v)); }
};
struct ScalarBF16 {
  static constexpr size_t kBytes = 2;
  static float load1(const uint8_t *p) { return bf16_to_float(loadu<uint16_t>(p)); }
  static void store1(uint8_t *p, float v) { storeu(p, float_to_bf16(v)); }
};

template <class C, int N>
void reduce_steps(const void *const *src, void *out, size_t count) {
  const uint8_t *s[N];
  for (int r = 0; r < N; r++) s[r] = static_cast<const uint8_t *>(src[r]);
  auto *o = static_cast<uint8_t *>(out);
  size_t i = 0;
  for (; i + C::kStep <= count; i += C::kStep) {
    typename C::Lanes acc = C::load(s[0] + i * C::kBytes);
    for (int r = 1; r < N; r++) acc = C::add(acc, C::load(s[r] + i * C::kBytes));
    C::store(o + i * C::kBytes, acc);
  }
  for (; i < count; i++) {
    float acc = C::load1(s[0] + i * C::kBytes);
    for (int r = 1; r < N; r++) acc += C::load1(s[r] + i * C::kBytes);
    C::store1(o + i * C::kBytes, acc);
  }
}

using ReduceFn = void (*)(const void *const *, void *, size_t);

template <class C, size_t... I>
constexpr std::array<ReduceFn, sizeof...(I)> reduce_table(std::index_sequence<I...>) {
  return {&reduce_steps<C, int(I) + 1>...};
}

// reduce_sum through the three codecs' tables (one function per rank count).
template <class F32, class F16, class BF16>
void reduce_by_dtype(Dtype t, const void *const *src, int n, void *out, size_t count) {
  static constexpr auto kF32 = reduce_table<F32>(std::make_index_sequence<kMaxRanks>());
  static constexpr auto kF16 = reduce_table<F16>(std::make_index_sequence<kMaxRanks>());
  static constexpr auto kBF16 = reduce_table<BF16>(std::make_index_sequence<kMaxRanks>());
  switch (t) {
    case Dtype::F32: kF32[size_t(n - 1)](src, out, count); break;
    case Dtype::F16: kF16[size_t(n - 1)](src, out, count); break;
    case Dtype::BF16: kBF16[size_t(n - 1)](src, out, count); break;
    default: break;  // the other dtypes sum in reduce_ops.cpp
  }
}

// float_to_half over an array with the f16 codec's steps (its
// from_floats: a step's f32 lanes in its lane order), then its tail.
template <class F16>
void floats_to_half_steps(const float *in, uint16_t *out, size_t count) {
  auto *o = reinterpret_cast<uint8_t *>(out);
  size_t i = 0;
  for (; i + F16::kStep <= count; i += F16::kStep) F16::store(o + i * 2, F16::from_floats(in + i));
  for (; i < count; i++) F16::store1(o + i * 2, in[i]);
}

// The entry points of a kernel made of these three codecs.
template <class F32, class F16, class BF16>
constexpr KernelFns kernel_fns() {
  return {&reduce_by_dtype<F32, F16, BF16>, &floats_to_half_steps<F16>};
}

}  // namespace
}  // namespace ds4tp::group
