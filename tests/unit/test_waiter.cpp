// os::Waiter (lib/os/wait.hpp): the policy's phases (spin, yield, block),
// what it reports to the adaptive budget, and the time it counts per
// phase into a WaitTally (the stats' wait_spin_ns, wait_yield_ns,
// wait_sleep_ns). Timing is only bounded from below where a sleep makes it
// so; no speed is asserted.
#include <catch2/catch.hpp>

#include <cstdint>

#include "common/clock.hpp"
#include "os/wait.hpp"

using namespace ds4tp;
using os::SpinBudget;

namespace {

constexpr uint64_t kCap = SpinBudget::kDefaultCapNs;
constexpr uint64_t kMs = 1'000'000;

// A budget whose waits were all too long to serve: no spin, no yield.
void teach_long_waits(SpinBudget &b) {
  for (int i = 0; i < 100; i++) b.ended(b.begin(), 10 * kCap);
  REQUIRE(b.learned() == 0);
}

// Polls `w` until `ns` have passed; how many times it blocked.
int idle_for(os::Waiter &w, uint64_t ns, uint64_t sleep_in_block = 0) {
  const uint64_t until = now_ns() + ns;
  int blocks = 0;
  while (now_ns() < until)
    REQUIRE(w.idle(os::kNoDeadline, [&](uint64_t) {
      blocks++;
      if (sleep_in_block) os::sleep_ns(sleep_in_block);
    }) == DS4TP_OK);
  return blocks;
}

// Polls `w` until it has blocked `blocks` times (each a sleep of
// `sleep_in_block`), however long a loaded host makes its spin and yield
// phases take; at most 10 s.
void idle_until_blocked(os::Waiter &w, int blocks, uint64_t sleep_in_block) {
  const uint64_t cap = now_ns() + 10'000 * kMs;
  int n = 0;
  while (n < blocks && now_ns() < cap)
    REQUIRE(w.idle(os::kNoDeadline, [&](uint64_t) {
      n++;
      os::sleep_ns(sleep_in_block);
    }) == DS4TP_OK);
  REQUIRE(n == blocks);
}

}  // namespace

TEST_CASE("the waiter takes its window from the budget and reports how the wait ended") {
  os::WaitPolicy p;
  os::SpinBudget budget;
  os::set_spin(p, budget, kCap, true);
  REQUIRE(p.budget == &budget);
  SECTION("a wait served at once: the window follows it, down to a wake-up's worth") {
    for (int i = 0; i < 100; i++) os::Waiter w(p, nullptr);
    CHECK(budget.window() == SpinBudget::kWakeNs);
  }
  SECTION("waits whose last progress is long past: no window") {
    for (int i = 0; i < 100; i++) os::Waiter w(p, nullptr, now_ns() - 50 * kCap);
    CHECK(budget.window() == 0);
  }
  SECTION("a wait that blocked is timed after the block, not before it") {
    teach_long_waits(budget);
    {
      os::Waiter w(p, nullptr);
      CHECK_FALSE(w.spinning());
      int blocks = 0;
      while (blocks == 0)
        REQUIRE(w.idle(os::kNoDeadline, [&](uint64_t) {
          blocks++;
          os::sleep_ns(2 * kCap);
        }) == DS4TP_OK);
    }
    // Read before the sleep it would have been a short wait.
    CHECK(budget.learned() == 0);
  }
  SECTION("a spin whose clock reads lie far apart reports a preemption") {
    {
      os::Waiter w(p, nullptr);
      REQUIRE(w.spinning());
      // Stands in for the scheduler taking the core between two polls.
      os::sleep_ns(5 * SpinBudget::kPreemptedNs);
      REQUIRE(w.idle(os::kNoDeadline, [](uint64_t) {}) == DS4TP_OK);
    }
    CHECK(budget.window() == budget.learned() / 4);
  }
  SECTION("waits too long to serve skip the yield phase too: the first idle blocks") {
    teach_long_waits(budget);
    p.yield_ns = 10 * kCap;
    os::Waiter w(p, nullptr);
    int blocks = 0;
    REQUIRE(w.idle(os::kNoDeadline, [&](uint64_t) { blocks++; }) == DS4TP_OK);
    CHECK(blocks == 1);
  }
  SECTION("spinning off (the core is busy), a wait yields the learned window instead") {
    while (!budget.off()) budget.ended(budget.begin(), 1000, true);
    REQUIRE(budget.learned() == kCap);
    const uint64_t t0 = now_ns();
    os::Waiter w(p, nullptr);
    CHECK_FALSE(w.spinning());
    int blocks = 0;
    REQUIRE(w.idle(os::kNoDeadline, [&](uint64_t) { blocks++; }) == DS4TP_OK);
    if (now_ns() - t0 < kCap) CHECK(blocks == 0);  // it yielded (unless one yield took the cap)
  }
  SECTION("a wait told its peer shares the CPU yields its window instead, and reports nothing") {
    const uint64_t before = budget.learned();
    int blocks = 0;
    {
      os::Waiter w(p, nullptr, now_ns() - 50 * kCap);  // a long wait, were it reported
      w.yield_instead();
      CHECK_FALSE(w.spinning());
      REQUIRE(w.idle(os::kNoDeadline, [&](uint64_t) { blocks++; }) == DS4TP_OK);
      CHECK(blocks == 1);  // past the window it would have yielded in: it blocks
    }
    CHECK(budget.learned() == before);  // unreported
  }
  SECTION("a fixed policy has no budget") {
    os::set_spin(p, budget, 200000, false);
    CHECK(p.budget == nullptr);
    CHECK(p.spin_ns == 200000);
    { os::Waiter w(p, nullptr, now_ns() - 50 * kCap); }
    CHECK(budget.window() == 200000);
  }
}

TEST_CASE("a spin without end never yields or blocks, and the deadline still ends it") {
  os::WaitPolicy p;
  p.spin_ns = os::kSpinForever;
  p.yield_ns = 0;
  os::Waiter w(p, nullptr, now_ns() - 3'600'000 * kMs);  // even an hour after the last progress
  CHECK(w.spinning());
  CHECK(idle_for(w, 5 * kMs) == 0);
  CHECK(w.spinning());
  const uint64_t deadline = now_ns() + kMs;
  int rc = DS4TP_OK, blocks = 0;
  while (rc == DS4TP_OK) rc = w.idle(deadline, [&](uint64_t) { blocks++; });
  CHECK(rc == DS4TP_ETIMEDOUT);
  CHECK(blocks == 0);
}

TEST_CASE("the tally counts each wait's time by phase") {
  os::WaitTally t;
  os::WaitPolicy p;
  p.tally = &t;
  SECTION("spinning") {
    p.spin_ns = 50 * kMs;
    const uint64_t t0 = now_ns();
    {
      os::Waiter w(p, nullptr);
      CHECK(idle_for(w, 3 * kMs) == 0);
    }
    const uint64_t wall = now_ns() - t0;
    CHECK(t.waits.load() == 1);
    // Counted to the wait's last clock read: a spin descheduled after it
    // (a loaded host) loses that stretch, so no lower bound but "some".
    CHECK(t.ns[os::WaitTally::kSpin].load() > 0);
    CHECK(t.ns[os::WaitTally::kSpin].load() <= wall);
    CHECK(t.ns[os::WaitTally::kYield].load() == 0);
    CHECK(t.ns[os::WaitTally::kSleep].load() == 0);
  }
  SECTION("spinning, then yielding, then asleep") {
    p.spin_ns = kMs;
    p.yield_ns = 2 * kMs;
    {
      os::Waiter w(p, nullptr);
      idle_until_blocked(w, 2, 500'000);
    }
    CHECK(t.waits.load() == 1);
    const uint64_t spin = t.ns[os::WaitTally::kSpin], yield = t.ns[os::WaitTally::kYield],
                   sleep = t.ns[os::WaitTally::kSleep];
    INFO("spin " << spin << " yield " << yield << " sleep " << sleep);
    CHECK(spin >= kMs);
    // Its 2 ms of yields, less a last one that overran into the sleeps; none
    // only where a descheduled spin overran the yield phase itself.
    CHECK((yield >= kMs || spin >= 3 * kMs));
    CHECK(spin + yield >= 3 * kMs);
    CHECK(sleep >= kMs);  // two blocks of 500 us after 3 ms
    CHECK(spin + yield + sleep >= 4 * kMs);
  }
  SECTION("never spinning: the time goes to the sleeps") {
    {
      os::Waiter w(p, nullptr);
      CHECK(idle_for(w, 4 * kMs, kMs) >= 2);
    }
    CHECK(t.ns[os::WaitTally::kSleep].load() >= 3 * kMs);
    CHECK(t.ns[os::WaitTally::kSpin].load() < kMs);  // the polls between the blocks
    CHECK(t.ns[os::WaitTally::kYield].load() == 0);
  }
  SECTION("a wait that never polled in vain is not counted") {
    { os::Waiter w(p, nullptr); }
    {
      os::Waiter w(p, nullptr);
      w.progress();
    }
    CHECK(t.waits.load() == 0);
    CHECK(t.ns[os::WaitTally::kSpin].load() == 0);
  }
  SECTION("waits add up") {
    p.spin_ns = 50 * kMs;
    for (int i = 0; i < 3; i++) {
      os::Waiter w(p, nullptr);
      idle_for(w, kMs);
    }
    CHECK(t.waits.load() == 3);
    CHECK(t.ns[os::WaitTally::kSpin].load() > 0);
    CHECK(t.ns[os::WaitTally::kYield].load() == 0);
    CHECK(t.ns[os::WaitTally::kSleep].load() == 0);
  }
}
