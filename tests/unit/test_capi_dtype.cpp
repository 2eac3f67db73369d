// C API: the exported 16-bit element conversions (ds4tp_f32_to_f16 and
// friends, ds4tp_dtype_convert). The conversions themselves are held to
// independent references in test_group_convert; here: the exports give
// their bits for every 16-bit pattern and a float sweep, the array call
// agrees element by element (in place too) and refuses bad arguments by
// name, and a two-rank all-reduce returns what the exports predict.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ds4tp/ds4tp.h"
#include "group/reduce.hpp"
#include "support/float_bits.hpp"

namespace grp = ds4tp::group;

using ds4tp::test::fbits;
using ds4tp::test::ffrom;

namespace {

// Floats whose bits step by a prime through the whole range, and edges.
std::vector<float> sweep() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f / 3.0f, 65504.0f, 65520.0f, 1e-8f, -3.14159f,
                          INFINITY, -INFINITY, NAN};
  for (uint64_t b = 0; b <= UINT32_MAX; b += 65537) v.push_back(ffrom(uint32_t(b)));
  return v;
}

bool same_or_both_nan(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || fbits(a) == fbits(b);
}

}  // namespace

TEST_CASE("capi dtype: the exports give the library's conversions", "[capi][convert]") {
  for (uint32_t h = 0; h <= 0xffff; h++) {
    INFO("bits " << h);
    REQUIRE(fbits(ds4tp_f16_to_f32(uint16_t(h))) == fbits(grp::half_to_float(uint16_t(h))));
    REQUIRE(fbits(ds4tp_bf16_to_f32(uint16_t(h))) == h << 16);
  }
  for (float f : sweep()) {
    INFO("float bits " << fbits(f));
    REQUIRE(ds4tp_f32_to_f16(f) == grp::float_to_half(f));
    REQUIRE(ds4tp_f32_to_bf16(f) == grp::float_to_bf16(f));
  }
  REQUIRE(ds4tp_f32_to_f16(1.0f / 3.0f) == 0x3555);
  REQUIRE(ds4tp_f32_to_f16(65520.0f) == 0x7c00);  // past the largest half: infinity
  REQUIRE(ds4tp_f32_to_bf16(3.14159f) == 0x4049);
  REQUIRE(std::isnan(ds4tp_f16_to_f32(ds4tp_f32_to_f16(NAN))));
  REQUIRE(std::isnan(ds4tp_bf16_to_f32(ds4tp_f32_to_bf16(NAN))));
}

TEST_CASE("capi dtype: ds4tp_dtype_convert agrees with the scalar calls", "[capi][convert]") {
  const std::vector<float> f = sweep();
  const uint64_t n = f.size();
  std::vector<uint16_t> h(n), b(n);
  std::vector<float> back(n);
  REQUIRE(ds4tp_dtype_convert(h.data(), DS4TP_DTYPE_F16, f.data(), DS4TP_DTYPE_F32, n) == DS4TP_OK);
  REQUIRE(ds4tp_dtype_convert(b.data(), DS4TP_DTYPE_BF16, f.data(), DS4TP_DTYPE_F32, n) == DS4TP_OK);
  for (uint64_t i = 0; i < n; i++) {
    INFO("element " << i << ", float bits " << fbits(f[i]));
    REQUIRE(h[i] == ds4tp_f32_to_f16(f[i]));
    REQUIRE(b[i] == ds4tp_f32_to_bf16(f[i]));
  }
  REQUIRE(ds4tp_dtype_convert(back.data(), DS4TP_DTYPE_F32, h.data(), DS4TP_DTYPE_F16, n) == DS4TP_OK);
  for (uint64_t i = 0; i < n; i++) REQUIRE(same_or_both_nan(back[i], ds4tp_f16_to_f32(h[i])));
  // F16 to BF16 in place: each element widened and rounded again.
  std::vector<uint16_t> in_place = h;
  REQUIRE(ds4tp_dtype_convert(in_place.data(), DS4TP_DTYPE_BF16, in_place.data(), DS4TP_DTYPE_F16,
                              n) == DS4TP_OK);
  for (uint64_t i = 0; i < n; i++) REQUIRE(in_place[i] == ds4tp_f32_to_bf16(ds4tp_f16_to_f32(h[i])));
  // Equal types: a copy.
  std::vector<float> copy(n);
  REQUIRE(ds4tp_dtype_convert(copy.data(), DS4TP_DTYPE_F32, f.data(), DS4TP_DTYPE_F32, n) == DS4TP_OK);
  REQUIRE(std::memcmp(copy.data(), f.data(), n * 4) == 0);
}

TEST_CASE("capi dtype: ds4tp_dtype_convert refuses bad arguments, naming them", "[capi][convert]") {
  float f = 1.0f;
  uint16_t h = 0;
  REQUIRE(ds4tp_dtype_convert(&h, 3, &f, DS4TP_DTYPE_F32, 1) == DS4TP_EINVAL);
  REQUIRE(std::string(ds4tp_last_error()).find("(dtype 3)") != std::string::npos);
  REQUIRE(ds4tp_dtype_convert(&h, DS4TP_DTYPE_F16, &f, -1, 1) == DS4TP_EINVAL);
  REQUIRE(ds4tp_dtype_convert(nullptr, DS4TP_DTYPE_F16, &f, DS4TP_DTYPE_F32, 1) == DS4TP_EINVAL);
  REQUIRE(std::string(ds4tp_last_error()).find("count 1") != std::string::npos);
  REQUIRE(h == 0);
  REQUIRE(ds4tp_dtype_convert(nullptr, DS4TP_DTYPE_F16, nullptr, DS4TP_DTYPE_F32, 0) == DS4TP_OK);
}

TEST_CASE("capi dtype: a two-rank all-reduce returns what the exports predict", "[capi][convert]") {
  ds4tp_group *g[2] = {nullptr, nullptr};
  REQUIRE(ds4tp_group_new_local(g, 2, nullptr, nullptr) == DS4TP_OK);
  const int count = 4096;
  for (int dtype : {int(DS4TP_DTYPE_F16), int(DS4TP_DTYPE_BF16)}) {
    auto to = dtype == DS4TP_DTYPE_F16 ? ds4tp_f32_to_f16 : ds4tp_f32_to_bf16;
    auto from = dtype == DS4TP_DTYPE_F16 ? ds4tp_f16_to_f32 : ds4tp_bf16_to_f32;
    std::vector<uint16_t> v[2];
    for (int r = 0; r < 2; r++)
      for (int i = 0; i < count; i++) v[r].push_back(to(std::ldexp(float(i * 7 + r * 13 + 1), -(i % 24)) / 3.0f));
    std::vector<uint16_t> want(count);
    for (int i = 0; i < count; i++) want[size_t(i)] = to(from(v[0][size_t(i)]) + from(v[1][size_t(i)]));
    int rc[2] = {-1, -1};
    std::thread t([&] { rc[1] = ds4tp_group_all_reduce(g[1], v[1].data(), count, dtype, DS4TP_OP_SUM); });
    rc[0] = ds4tp_group_all_reduce(g[0], v[0].data(), count, dtype, DS4TP_OP_SUM);
    t.join();
    REQUIRE(rc[0] == DS4TP_OK);
    REQUIRE(rc[1] == DS4TP_OK);
    INFO("dtype " << dtype);
    REQUIRE(v[0] == want);
    REQUIRE(v[1] == want);
  }
  ds4tp_group_free(g[0]);
  ds4tp_group_free(g[1]);
}
