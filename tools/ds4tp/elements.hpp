// The element types of `ds4tp group` (ds4tp_dtype): sizes, names, the
// f16 and bf16 conversions the references round with, and the exact
// inputs of the ops whose reference ignores the combining order. Pure,
// header only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "ds4tp/ds4tp.h"

namespace ds4tp_cli::elements {

inline uint32_t fbits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float ffrom(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float h2f(uint16_t h) {
  uint32_t s = uint32_t(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0) return ffrom(s) + (s ? -1.0f : 1.0f) * float(m) * 5.9604644775390625e-8f;
  if (e == 31) return ffrom(s | 0x7f800000u | (m << 13));
  return ffrom(s | ((e + 112) << 23) | (m << 13));
}
inline uint16_t f2h(float f) {  // round to nearest even, via the f32 grid of f16
  uint32_t x = fbits(f), s = (x >> 16) & 0x8000;
  float a = std::fabs(f);
  if (a != a) return uint16_t(s | 0x7e00);
  if (a >= 65520.0f) return uint16_t(s | 0x7c00);
  if (a < 6.103515625e-05f) {  // subnormal: multiples of 2^-24, round by the FPU
    float q = a * 16777216.0f;
    return uint16_t(s | uint32_t(std::nearbyint(q)));
  }
  uint32_t ax = fbits(a), lsb = (ax >> 13) & 1;
  ax += 0xfff + lsb;
  return uint16_t(s | (((ax >> 23) - 112) << 10) | ((ax >> 13) & 0x3ff));
}
inline float b2f(uint16_t h) { return ffrom(uint32_t(h) << 16); }
inline uint16_t f2b(float f) {
  uint32_t x = fbits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);
  return uint16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

inline size_t esize(int dt) {
  switch (dt) {
    case DS4TP_DTYPE_F64: case DS4TP_DTYPE_I64: return 8;
    case DS4TP_DTYPE_F32: case DS4TP_DTYPE_I32: return 4;
    case DS4TP_DTYPE_F16: case DS4TP_DTYPE_BF16: return 2;
    default: return 1;
  }
}
inline const char *dname(int dt) {
  static const char *const names[] = {"f32", "f16", "bf16", "f64", "i32", "i64", "u8"};
  return dt >= 0 && dt <= DS4TP_DTYPE_U8 ? names[dt] : "?";
}
// The dtype named (f32 ... u8), or -1.
inline int parse_dtype(const std::string &s) {
  for (int dt = 0; dt <= DS4TP_DTYPE_U8; dt++)
    if (s == dname(dt)) return dt;
  return -1;
}
inline const char *op_name(int op) {
  static const char *const names[] = {"sum", "max", "min", "prod"};
  return op >= 0 && op <= DS4TP_OP_PROD ? names[op] : "?";
}
inline int parse_op(const std::string &s) {
  for (int op = 0; op <= DS4TP_OP_PROD; op++)
    if (s == op_name(op)) return op;
  return -1;
}

inline bool is_float(int dt) { return dt <= DS4TP_DTYPE_F64; }

// Rank r's element j of input `salt` for (dtype, op) in a group of n, as
// a double exact in every dtype, with every partial result exact too:
// multiples of 1/32 whose sums over n ranks stay below 8 bits (bf16's
// precision), products of 1/2, 1, 2 and -1 (the halvings and doublings on
// ranks 0..7 only, so no partial product leaves f16's range), integers
// that wrap alike in any order. So the reference does not depend on the
// order a plan combines in (ring, tiered, two-shot).
inline double exact(int dt, int op, int n, int r, uint64_t j, int salt) {
  const uint64_t h =
      (uint64_t(r) * 2654435761u + j * 40503u + uint64_t(dt) * 97u + uint64_t(salt) * 7919u) %
      1000003u;
  if (!is_float(dt)) return double(int64_t(h % 200) - 100);
  if (op == DS4TP_OP_PROD) {
    static const double kFactors[] = {0.5, 1.0, 2.0, -1.0};
    return r < 8 ? kFactors[h % 4] : h % 2 ? 1.0 : -1.0;
  }
  const int64_t bound = 120 / std::max(n, 1);  // |sum| <= 120 < 2^8
  return double(int64_t(h % uint64_t(2 * bound + 1)) - bound) / 32.0;
}

// Stores v (exact in dtype dt) as dt at p; integers as their two's complement.
inline void put(int dt, double v, uint8_t *p) {
  switch (dt) {
    case DS4TP_DTYPE_F32: { const float f = float(v); std::memcpy(p, &f, 4); break; }
    case DS4TP_DTYPE_F16: { const uint16_t b = f2h(float(v)); std::memcpy(p, &b, 2); break; }
    case DS4TP_DTYPE_BF16: { const uint16_t b = f2b(float(v)); std::memcpy(p, &b, 2); break; }
    case DS4TP_DTYPE_F64: std::memcpy(p, &v, 8); break;
    case DS4TP_DTYPE_I32: { const int32_t i = int32_t(int64_t(v)); std::memcpy(p, &i, 4); break; }
    case DS4TP_DTYPE_I64: { const int64_t i = int64_t(v); std::memcpy(p, &i, 8); break; }
    default: { const uint8_t u = uint8_t(int64_t(v)); std::memcpy(p, &u, 1); break; }
  }
}

// The op over ranks 0..n-1 of element j of input `salt`, stored as dt at p:
// floats in double (exact for these inputs), integers as wrapping unsigned
// values compared by the dtype's sign (u8 unsigned).
inline void expected(int dt, int op, int n, uint64_t j, int salt, uint8_t *p) {
  if (is_float(dt)) {
    double acc = exact(dt, op, n, 0, j, salt);
    for (int r = 1; r < n; r++) {
      const double x = exact(dt, op, n, r, j, salt);
      acc = op == DS4TP_OP_SUM ? acc + x : op == DS4TP_OP_PROD ? acc * x
            : op == DS4TP_OP_MAX ? std::max(acc, x) : std::min(acc, x);
    }
    return put(dt, acc, p);
  }
  const int bits = int(esize(dt)) * 8;
  const uint64_t mask = bits == 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1;
  auto as_signed = [&](uint64_t u) {
    if (dt == DS4TP_DTYPE_U8 || bits == 64) return int64_t(u);
    return int64_t(u & mask) - ((u >> (bits - 1)) & 1 ? int64_t(mask) + 1 : 0);
  };
  uint64_t acc = uint64_t(int64_t(exact(dt, op, n, 0, j, salt))) & mask;
  for (int r = 1; r < n; r++) {
    const uint64_t x = uint64_t(int64_t(exact(dt, op, n, r, j, salt))) & mask;
    if (op == DS4TP_OP_SUM) acc = (acc + x) & mask;
    else if (op == DS4TP_OP_PROD) acc = (acc * x) & mask;
    else if (op == DS4TP_OP_MAX) acc = as_signed(x) > as_signed(acc) ? x : acc;
    else acc = as_signed(x) < as_signed(acc) ? x : acc;
  }
  std::memcpy(p, &acc, size_t(bits / 8));  // little-endian
}

// Byte j of rank r's data for the calls that move bytes, input `salt`.
inline uint8_t byte_of(int r, uint64_t j, int salt) {
  return uint8_t((uint64_t(r) * 73 + j * 31 + j / 251 + uint64_t(salt) * 17) & 0xff);
}

}  // namespace ds4tp_cli::elements
