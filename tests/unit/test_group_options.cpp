// Group options as the C struct gives them: the wait policy's meaning of
// spin_us (the pair's), the older meaning mapped for a struct that ends
// before yield_us, and range checks naming the field.
#include <cstddef>
#include <string>

#include <catch2/catch.hpp>

#include "capi/group_options.hpp"

using namespace ds4tp;

namespace {

ds4tp_group_options defaults() {
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  return o;
}

// What the library makes of `c`; EINVAL and the message otherwise.
int convert(const ds4tp_group_options &c, group::Options &o, std::string &why) {
  Error err;
  const int rc = capi::group_options_from_c(&c, nullptr, true, o, err);
  why = err.message;
  return rc;
}

constexpr uint32_t kOldSize = uint32_t(offsetof(ds4tp_group_options, yield_us));

}  // namespace

TEST_CASE("group options: spin_us means what it means for a pair", "[group]") {
  std::string why;
  ds4tp_group_options c = defaults();
  CHECK(c.spin_us == DS4TP_SPIN_ADAPTIVE);
  group::Options o;
  REQUIRE(convert(c, o, why) == DS4TP_OK);
  CHECK(o.spin_ns == group::kSpinAdaptive);
  CHECK(o.yield_ns == -1);
  c.spin_us = 0;  // never spin
  REQUIRE(convert(c, o, why) == DS4TP_OK);
  CHECK(o.spin_ns == 0);
  c.spin_us = 50;
  c.yield_us = 0;
  REQUIRE(convert(c, o, why) == DS4TP_OK);
  CHECK(o.spin_ns == 50'000);
  CHECK(o.yield_ns == 0);
  const group::Waiting w = group::waiting(2, o.spin_ns, o.yield_ns);
  CHECK_FALSE(w.adaptive);
  CHECK(w.policy.spin_ns == 50'000);
  CHECK(w.policy.yield_ns == 0);
}

TEST_CASE("group options: a struct from before yield_us keeps its spin_us meaning", "[group]") {
  std::string why;
  group::Options o;
  ds4tp_group_options c = defaults();
  c.size = kOldSize;
  c.spin_us = 0;  // was the default
  REQUIRE(convert(c, o, why) == DS4TP_OK);
  CHECK(o.spin_ns == group::kSpinAdaptive);
  c.spin_us = -1;  // was "never spin"
  REQUIRE(convert(c, o, why) == DS4TP_OK);
  CHECK(o.spin_ns == 0);
  c.spin_us = 30;
  REQUIRE(convert(c, o, why) == DS4TP_OK);
  CHECK(o.spin_ns == 30'000);
  CHECK(o.yield_ns == -1);  // the field it does not have: the default
}

TEST_CASE("group options: wait values out of range are refused, naming the field", "[group]") {
  struct Bad {
    const char *field;
    int32_t spin_us, yield_us;
  };
  for (const Bad &b : {Bad{"spin_us", -4, -1}, Bad{"spin_us", 10'000'001, -1},
                       Bad{"yield_us", -1, -2}, Bad{"yield_us", -1, 10'000'001},
                       Bad{"yield_us 50 with spin_us DS4TP_SPIN_NEVER", DS4TP_SPIN_NEVER, 50}}) {
    ds4tp_group_options c = defaults();
    c.spin_us = b.spin_us;
    c.yield_us = b.yield_us;
    group::Options o;
    std::string why;
    INFO(b.field << " spin_us " << b.spin_us << " yield_us " << b.yield_us);
    CHECK(convert(c, o, why) == DS4TP_EINVAL);
    INFO(why);
    CHECK(why.find(b.field) != std::string::npos);
  }
}

TEST_CASE("group options: DS4TP_SPIN_ALWAYS spins without end, DS4TP_SPIN_NEVER sleeps at once",
          "[group]") {
  std::string why;
  group::Options o;
  ds4tp_group_options c = defaults();
  c.spin_us = DS4TP_SPIN_ALWAYS;
  REQUIRE(convert(c, o, why) == DS4TP_OK);
  CHECK(o.spin_ns == group::kSpinAlways);
  os::WaitTally tally;
  // Where the engine says the cores are its own, even ranks past the cores spin.
  const group::Waiting always = group::waiting(4096, o.spin_ns, o.yield_ns, &tally);
  CHECK_FALSE(always.adaptive);
  CHECK(always.policy.spin_ns == os::kSpinForever);
  CHECK(always.policy.yield_ns == 0);
  CHECK(always.policy.tally == &tally);
  c.spin_us = DS4TP_SPIN_NEVER;
  for (int32_t y : {-1, 0}) {
    c.yield_us = y;
    REQUIRE(convert(c, o, why) == DS4TP_OK);
    CHECK(o.spin_ns == group::kSpinNever);
    const group::Waiting never = group::waiting(1, o.spin_ns, o.yield_ns);
    CHECK_FALSE(never.adaptive);
    CHECK(never.policy.spin_ns == 0);
    CHECK(never.policy.yield_ns == 0);
  }
}

TEST_CASE("group options: the adaptive default spins only where a rank has a core",
          "[group]") {
  const group::Waiting many = group::waiting(1, group::kSpinAdaptive);
  const group::Waiting crowd = group::waiting(4096, group::kSpinAdaptive);
  CHECK(many.adaptive);
  CHECK(many.policy.spin_ns == group::kAdaptiveSpinCapNs);
  CHECK_FALSE(crowd.adaptive);  // no window to learn: it yields, then sleeps
  CHECK(crowd.policy.spin_ns == 0);
  CHECK(crowd.policy.yield_ns == 200'000);
}
