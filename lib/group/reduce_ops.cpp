// The reductions beside the f32-accumulated sums of reduce.cpp: max, min
// and prod of every dtype, and sums of f64 and the integers (reduce.hpp).
// One portable loop per element type: these are not on the engines' hot
// path (their all-reduces are float sums).
#include <cmath>
#include <cstring>

#include "group/reduce.hpp"

namespace ds4tp::group {
namespace {

// How an element type is read into the type its op runs in, and back.
struct AsF16 {
  using Acc = float;
  static Acc get(const uint8_t *p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return half_to_float(h);
  }
  static void put(uint8_t *p, Acc v) {
    const uint16_t h = float_to_half(v);
    std::memcpy(p, &h, 2);
  }
};
struct AsBf16 {
  using Acc = float;
  static Acc get(const uint8_t *p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return bf16_to_float(h);
  }
  static void put(uint8_t *p, Acc v) {
    const uint16_t h = float_to_bf16(v);
    std::memcpy(p, &h, 2);
  }
};
template <class T>
struct Plain {  // f32, f64, and the integers (as unsigned for sums and products)
  using Acc = T;
  static Acc get(const uint8_t *p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void put(uint8_t *p, Acc v) { std::memcpy(p, &v, sizeof v); }
};

template <class A>
constexpr bool is_float() {
  return std::is_floating_point_v<A>;
}

// One element's combination, left to right.
template <class A>
A combine(Op op, A acc, A x) {
  if constexpr (is_float<A>()) {
    if (op == Op::Max || op == Op::Min) {
      if (std::isnan(acc)) return acc;
      if (std::isnan(x)) return x;
      return op == Op::Max ? (x > acc ? x : acc) : (x < acc ? x : acc);
    }
    return op == Op::Sum ? acc + x : acc * x;
  } else {
    using U = std::make_unsigned_t<A>;  // wraps, never undefined
    if (op == Op::Sum) return A(U(acc) + U(x));
    if (op == Op::Prod) return A(U(acc) * U(x));
    return op == Op::Max ? (x > acc ? x : acc) : (x < acc ? x : acc);
  }
}

template <class C>
void loop(Op op, size_t esz, const void *const *src, int n, void *out, size_t count) {
  auto *o = static_cast<uint8_t *>(out);
  for (size_t i = 0; i < count; i++) {
    typename C::Acc acc = C::get(static_cast<const uint8_t *>(src[0]) + i * esz);
    for (int r = 1; r < n; r++)
      acc = combine(op, acc, C::get(static_cast<const uint8_t *>(src[r]) + i * esz));
    C::put(o + i * esz, acc);
  }
}

}  // namespace

void reduce(Dtype t, Op op, const void *const *src, int n, void *out, size_t count) {
  const bool fast = op == Op::Sum && (t == Dtype::F32 || t == Dtype::F16 || t == Dtype::BF16);
  if (fast) return reduce_sum(t, src, n, out, count);
  const size_t esz = dtype_bytes(t);
  switch (t) {
    case Dtype::F32: return loop<Plain<float>>(op, esz, src, n, out, count);
    case Dtype::F16: return loop<AsF16>(op, esz, src, n, out, count);
    case Dtype::BF16: return loop<AsBf16>(op, esz, src, n, out, count);
    case Dtype::F64: return loop<Plain<double>>(op, esz, src, n, out, count);
    case Dtype::I32: return loop<Plain<int32_t>>(op, esz, src, n, out, count);
    case Dtype::I64: return loop<Plain<int64_t>>(op, esz, src, n, out, count);
    case Dtype::U8: return loop<Plain<uint8_t>>(op, esz, src, n, out, count);
  }
}

}  // namespace ds4tp::group
