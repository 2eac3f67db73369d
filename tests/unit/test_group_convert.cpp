// Groups: f16/bf16 conversions against independent references: every
// half's value from its fields in double arithmetic, every half round
// trip, and a sweep of floats rounded by nearest-value search over the
// table of all halves (ties to the even significand).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <catch2/catch.hpp>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "group/reduce.hpp"
#include "support/float_bits.hpp"

using namespace ds4tp;

using ds4tp::test::fbits;
using ds4tp::test::ffrom;

namespace {

// The value of a finite half from the IEEE definition.
double half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double v = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
  return (h & 0x8000) ? -v : v;
}

// Nearest half to f (finite, or inf), ties to even, by search over the
// positive halves 0x0000..0x7bff (increasing in value).
uint16_t reference_half(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(double(f));
  if (a >= 65520.0) return uint16_t(sign | 0x7c00);  // halfway to 2^16 and up: inf
  static const std::vector<double> table = [] {
    std::vector<double> t(0x7c00);
    for (uint32_t h = 0; h < 0x7c00; h++) t[h] = half_value(uint16_t(h));
    return t;
  }();
  auto it = std::upper_bound(table.begin(), table.end(), a);  // first > a
  uint32_t hi = uint32_t(it - table.begin());
  if (hi == 0x7c00) return uint16_t(sign | 0x7bff);  // between 65504 and 65520
  uint32_t lo = hi - 1;  // table[lo] <= a < table[hi]
  const double dl = a - table[lo], dh = table[hi] - a;
  uint32_t pick = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
  return uint16_t(sign | pick);
}

bool is_nan_half(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

}  // namespace

TEST_CASE("group: every half converts exactly and round-trips", "[group][convert]") {
  for (uint32_t h = 0; h < 0x10000; h++) {
    INFO("half 0x" << std::hex << h);
    const float f = group::half_to_float(uint16_t(h));
    if (is_nan_half(uint16_t(h))) {
      REQUIRE(std::isnan(f));
      REQUIRE(is_nan_half(group::float_to_half(f)));
      REQUIRE((group::float_to_half(f) & 0x8000) == (h & 0x8000));
      continue;
    }
    if ((h & 0x7fff) == 0x7c00) {
      REQUIRE(std::isinf(f));
    } else {
      REQUIRE(double(f) == half_value(uint16_t(h)));
    }
    REQUIRE(std::signbit(f) == bool(h & 0x8000));
    REQUIRE(group::float_to_half(f) == h);
  }
}

TEST_CASE("group: float to half rounds to nearest even over a float sweep", "[group][convert]") {
  uint64_t checked = 0;
  auto check = [&](float f) {
    if (std::isnan(f)) return;
    const uint16_t want = reference_half(f), got = group::float_to_half(f);
    if (got != want) {
      INFO("float " << f << " (0x" << std::hex << fbits(f) << "): got 0x" << got << ", want 0x"
                    << want);
      REQUIRE(got == want);
    }
    checked++;
  };
  // Around every half: the value, its float neighbours, the midpoints to
  // the next half and their neighbours (where ties and carries happen).
  for (uint32_t h = 0; h < 0x7c00; h++) {
    const float v = group::half_to_float(uint16_t(h));
    const float next = h + 1 < 0x7c00 ? group::half_to_float(uint16_t(h + 1)) : 65536.0f;
    const float mid = float((double(v) + double(next)) / 2);  // exact in float
    for (float x : {v, mid})
      for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, INFINITY)}) {
        check(y);
        check(-y);
      }
  }
  // A strided sweep of every float bit pattern (a prime stride visits
  // every exponent and many significands), plus the extremes.
  for (uint64_t u = 0; u < (1ull << 32); u += 4093) check(ffrom(uint32_t(u)));
  for (float f : {0.0f, -0.0f, 1e-30f, 5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f, 65504.0f,
                  65519.996f, 65520.0f, 1e10f, INFINITY, -INFINITY, FLT_MAX, FLT_TRUE_MIN})
    check(f);
  CHECK(checked > 1'000'000);
  CHECK(group::float_to_half(INFINITY) == 0x7c00);
  CHECK(group::float_to_half(-INFINITY) == 0xfc00);
  CHECK(is_nan_half(group::float_to_half(std::nanf(""))));
  CHECK(is_nan_half(group::float_to_half(ffrom(0x7f800001u))));  // payload below the kept bits
}

TEST_CASE("group: bf16 round trip and rounding", "[group][convert]") {
  for (uint32_t h = 0; h < 0x10000; h++) {
    const float f = group::bf16_to_float(uint16_t(h));
    if (std::isnan(f)) {
      REQUIRE(std::isnan(group::bf16_to_float(group::float_to_bf16(f))));
      continue;
    }
    REQUIRE(group::float_to_bf16(f) == h);
  }
  CHECK(group::float_to_bf16(ffrom(0x3f808000u)) == 0x3f80);  // tie -> even
  CHECK(group::float_to_bf16(ffrom(0x3f818000u)) == 0x3f82);  // tie -> even (up)
  CHECK(group::float_to_bf16(ffrom(0x3f808001u)) == 0x3f81);
}

// The vector sum (blocks, then four lanes, then a scalar tail) gives the
// bits of the plain rank-order loop for every count around each of those
// boundaries, 1 to 8 ranks, f32 and bf16, also when the output is one of
// the inputs (the in-place all-reduce).
TEST_CASE("group: the rank-order sum matches the scalar loop bit for bit at every block boundary", "[group][convert]") {
  for (group::Kernel k : group::usable_kernels())
  for (group::Dtype t : {group::Dtype::F32, group::Dtype::F16, group::Dtype::BF16}) {
    const size_t esz = group::dtype_bytes(t);
    for (int n = 1; n <= 8; n++)
      for (size_t count = 0; count <= 100; count++) {
        INFO(group::kernel_name(k) << " kernel, " << group::dtype_name(t) << " n=" << n << " count=" << count);
        std::vector<std::vector<uint8_t>> in(size_t(n), std::vector<uint8_t>(count * esz));
        for (int r = 0; r < n; r++)
          for (size_t i = 0; i < count; i++) {
            // Magnitudes far apart, so the order of the additions shows in the bits.
            const float v = float((r * 37 + int(i) * 11) % 23 - 11) * std::ldexp(1.0f, (r * 7 + int(i)) % 40 - 20);
            if (t == group::Dtype::F32) {
              std::memcpy(in[size_t(r)].data() + i * 4, &v, 4);
            } else {
              const uint16_t h = t == group::Dtype::F16 ? group::float_to_half(v) : group::float_to_bf16(v);
              std::memcpy(in[size_t(r)].data() + i * 2, &h, 2);
            }
          }
        std::vector<uint8_t> want(count * esz);
        for (size_t i = 0; i < count; i++) {
          float acc = 0;
          for (int r = 0; r < n; r++) {
            float v;
            if (t == group::Dtype::F32) {
              std::memcpy(&v, in[size_t(r)].data() + i * 4, 4);
            } else {
              uint16_t h;
              std::memcpy(&h, in[size_t(r)].data() + i * 2, 2);
              v = t == group::Dtype::F16 ? group::half_to_float(h) : group::bf16_to_float(h);
            }
            acc = r == 0 ? v : acc + v;
          }
          if (t == group::Dtype::F32) {
            std::memcpy(want.data() + i * 4, &acc, 4);
          } else {
            const uint16_t h = t == group::Dtype::F16 ? group::float_to_half(acc) : group::float_to_bf16(acc);
            std::memcpy(want.data() + i * 2, &h, 2);
          }
        }
        const void *src[8];
        for (int r = 0; r < n; r++) src[r] = in[size_t(r)].data();
        std::vector<uint8_t> out(count * esz + 1, 0xee);
        group::reduce_sum_with(k, t, src, n, out.data(), count);
        CHECK(std::equal(want.begin(), want.end(), out.begin()));
        CHECK(out[count * esz] == 0xee);  // nothing written past the end
        // In place: the last rank's buffer receives the sum.
        group::reduce_sum_with(k, t, src, n, in[size_t(n - 1)].data(), count);
        CHECK(in[size_t(n - 1)] == want);
      }
  }
}

// The f16 sum's four-lane conversions against the scalar ones: every half
// through half -> float -> half (a 1-rank sum), every half plus a spread of
// others (the rounding of real sums, ties included), and float -> half
// over a sweep of float bit patterns dense around the subnormal and
// overflow edges.
void check_f16_conversions(group::Kernel k) {
  INFO(group::kernel_name(k) << " kernel");
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; h++) all[h] = uint16_t(h);
  std::vector<uint16_t> out(65536);
  const void *one[1] = {all.data()};
  group::reduce_sum_with(k, group::Dtype::F16, one, 1, out.data(), all.size());
  for (uint32_t h = 0; h < 65536; h++) {
    const uint16_t want = group::float_to_half(group::half_to_float(uint16_t(h)));
    if (out[h] != want) FAIL_CHECK("half 0x" << std::hex << h << ": vector 0x" << out[h] << ", scalar 0x" << want);
  }
  const uint16_t others[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x3c01,
                             0x1400, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x4200, 0x2c00, 0x0200};
  for (uint16_t b : others) {
    std::vector<uint16_t> rhs(65536, b);
    const void *two[2] = {all.data(), rhs.data()};
    group::reduce_sum_with(k, group::Dtype::F16, two, 2, out.data(), all.size());
    size_t bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
      // Two different NaNs: which payload wins is the order the compiler
      // gave the add's operands (reduce.hpp), so only NaN is required.
      if (is_nan_half(uint16_t(h)) && is_nan_half(b) && h != b) {
        if (!is_nan_half(out[h]) && bad++ < 5)
          FAIL_CHECK("0x" << std::hex << h << " + 0x" << b << ": vector 0x" << out[h] << ", not a NaN");
        continue;
      }
      const float sum = group::half_to_float(uint16_t(h)) + group::half_to_float(b);
      if (out[h] != group::float_to_half(sum) && bad++ < 5)
        FAIL_CHECK("0x" << std::hex << h << " + 0x" << b << ": vector 0x" << out[h] << ", scalar 0x"
                        << group::float_to_half(sum));
    }
  }
  std::vector<float> f;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) f.push_back(ffrom(uint32_t(u)));
  for (uint32_t u = 0x32000000u; u < 0x39000000u; u += 61) f.push_back(ffrom(u));  // subnormal halves
  for (uint32_t u = 0x477f0000u; u < 0x47810000u; u++) f.push_back(ffrom(u));      // 65504..65536
  for (float x : std::vector<float>(f)) f.push_back(-x);
  std::vector<uint16_t> h(f.size());
  group::floats_to_half_with(k, f.data(), h.data(), f.size());
  size_t bad = 0;
  for (size_t i = 0; i < f.size(); i++)
    if (h[i] != group::float_to_half(f[i]) && bad++ < 5)
      FAIL_CHECK("float 0x" << std::hex << fbits(f[i]) << ": vector 0x" << h[i] << ", scalar 0x"
                            << group::float_to_half(f[i]));
  CHECK(bad == 0);
}

TEST_CASE("group: the f16 vector conversions give the scalar's bits", "[group][convert]") {
  for (group::Kernel k : group::usable_kernels()) check_f16_conversions(k);
}

#if defined(__x86_64__)
// The same with denormals-are-zero and flush-to-zero set, as some engines
// run: every f16 value still converts and sums exactly (sums of halves
// are never f32 subnormals, and the conversions do not flush halves).
TEST_CASE("group: the f16 conversions give the scalar's bits under DAZ and FTZ", "[group][convert]") {
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ (bit 15) and DAZ (bit 6)
  for (group::Kernel k : group::usable_kernels()) check_f16_conversions(k);
  _mm_setcsr(saved);
}
#endif
