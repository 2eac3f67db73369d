// ds4tp::Group (include/ds4tp/ds4tp_group.hpp): the local form over
// threads, every dtype, identical bits on every rank, errors as
// exceptions carrying the handle's message, moves.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ds4tp/ds4tp.hpp"

namespace {

template <class F>
void on_threads(std::vector<ds4tp::Group> &gs, F fn, std::vector<std::string> &why) {
  why.assign(gs.size(), "");
  std::vector<std::thread> ts;
  for (size_t r = 0; r < gs.size(); r++)
    ts.emplace_back([&, r] {
      try {
        fn(int(r), gs[r]);
      } catch (const std::exception &e) {
        why[r] = e.what();
        gs[r].mark_failed();
      }
    });
  for (auto &t : ts) t.join();
}

}  // namespace

TEST_CASE("cxx group: local form, f32 f16 bf16, identical bits", "[group][bindings]") {
  for (int n : {2, 3}) {
    INFO("n=" << n);
    auto gs = ds4tp::Group::local(n);
    REQUIRE(gs.size() == size_t(n));
    std::vector<std::vector<float>> f{size_t(n)};
    std::vector<std::vector<ds4tp::Half>> h{size_t(n)};
    std::vector<std::vector<ds4tp::BFloat16>> b{size_t(n)};
    std::vector<std::string> why;
    on_threads(
        gs,
        [&](int r, ds4tp::Group &g) {
          if (g.rank() != r || g.size() != n) throw std::runtime_error("rank/size wrong");
          if (g.plan().rfind("plan: 1 host x ", 0) != 0)
            throw std::runtime_error("plan: " + g.plan());
          f[size_t(r)].assign(3000, float(r) + 0.5f);
          h[size_t(r)].assign(3000, ds4tp::Half{0x3c00});      // 1.0
          b[size_t(r)].assign(3000, ds4tp::BFloat16{0x3f80});  // 1.0
          g.all_reduce(std::span<float>(f[size_t(r)]));
          g.all_reduce(std::span<ds4tp::Half>(h[size_t(r)]));
          g.all_reduce(std::span<ds4tp::BFloat16>(b[size_t(r)]));
          g.barrier();
        },
        why);
    float want = 0;
    for (int r = 0; r < n; r++) want += float(r) + 0.5f;
    const uint16_t hw = n == 2 ? 0x4000 : 0x4200, bw = n == 2 ? 0x4000 : 0x4040;
    for (int r = 0; r < n; r++) {
      INFO("rank " << r << ": " << why[size_t(r)]);
      REQUIRE(why[size_t(r)].empty());
      CHECK(f[size_t(r)][2999] == want);
      CHECK(h[size_t(r)][0].bits == hw);
      CHECK(b[size_t(r)][0].bits == bw);
      CHECK(std::memcmp(f[size_t(r)].data(), f[0].data(), 3000 * 4) == 0);
    }
  }
}

TEST_CASE("cxx group: failures throw with the handle's message", "[group][bindings]") {
  auto gs = ds4tp::Group::local(2);
  gs[1].mark_failed();
  std::vector<float> v(8, 1.0f);
  try {
    gs[0].all_reduce(std::span<float>(v));
    FAIL("all_reduce after mark_failed did not throw");
  } catch (const ds4tp::Error &e) {
    INFO(e.what());
    CHECK(e.status() == DS4TP_EFAILED);
    CHECK(e.message().find("rank 1") != std::string::npos);
  }
  ds4tp::Group moved(std::move(gs[0]));
  CHECK(moved);
  CHECK_FALSE(gs[0]);
  CHECK_THROWS_AS(gs[0].barrier(), ds4tp::Error);
  std::vector<std::byte> small(4), out(4);
  CHECK_THROWS_AS(moved.all_gather(small, out), ds4tp::Error);  // needs 2 x 4 bytes

  ds4tp::GroupOptions o;
  o.spin_us = -7;
  try {
    ds4tp::Group::local(2, &o);
    FAIL("spin_us -7 was accepted");
  } catch (const ds4tp::Error &e) {
    INFO(e.what());
    CHECK(e.status() == DS4TP_EINVAL);
    CHECK(e.message().find("spin_us") != std::string::npos);
  }
}
