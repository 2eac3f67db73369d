// The adaptive wait policy (lib/os/spin_budget.hpp): its state machine fed
// with wait durations, and the Waiter reporting into it.
#include <catch2/catch.hpp>

#include <cstdint>

#include "common/clock.hpp"
#include "os/wait.hpp"

using namespace ds4tp;
using os::SpinBudget;

namespace {

constexpr uint64_t kCap = SpinBudget::kDefaultCapNs;

// One wait: begin, then end `quiet_ns` after the last progress.
uint64_t wait_for(SpinBudget &b, uint64_t quiet_ns) {
  const uint64_t w = b.begin();
  b.ended(w, quiet_ns);
  return w;
}

// Misses until the window is 0; how many it took.
int drain(SpinBudget &b) {
  int n = 0;
  while (b.window() != 0 && n < 100) {
    wait_for(b, 10 * kCap);
    n++;
  }
  return n;
}

}  // namespace

TEST_CASE("spin budget: starts at the cap and stays there while waits end inside it") {
  SpinBudget b;
  CHECK(b.window() == kCap);
  for (int i = 0; i < 1000; i++) CHECK(wait_for(b, uint64_t(i % 50) * 1000) == kCap);
  CHECK(b.window() == kCap);
  // A wait at the cap exactly still counts as served.
  wait_for(b, kCap);
  CHECK(b.window() == kCap);
}

TEST_CASE("spin budget: waits that outlast the window shrink it to 0 in a few steps") {
  SpinBudget b;
  wait_for(b, 5 * kCap);
  CHECK(b.window() == kCap / 4);
  wait_for(b, 5 * kCap);
  CHECK(b.window() == kCap / 16);
  // 1 ms / 4^n falls below the 4 us floor at n = 4: bounded, and then 0.
  CHECK(drain(b) <= 3);
  CHECK(b.window() == 0);
  wait_for(b, 5 * kCap);
  CHECK(b.window() == 0);  // never below 0, never wraps
}

TEST_CASE("spin budget: with no window, waits block at once and one in kProbeEvery probes") {
  SpinBudget b;
  drain(b);
  REQUIRE(b.window() == 0);
  int probes = 0;
  const int waits = 10 * int(SpinBudget::kProbeEvery);
  for (int i = 0; i < waits; i++) {
    const uint64_t w = wait_for(b, 50 * kCap);  // every probe misses too
    if (w != 0) {
      CHECK(w == kCap);
      probes++;
    }
  }
  CHECK(probes == 10);
  CHECK(b.window() == 0);
}

TEST_CASE("spin budget: short waits grow it back, doubling, never past the cap") {
  SpinBudget b;
  drain(b);
  REQUIRE(b.window() == 0);
  SECTION("a blocked wait that a floor-sized window would have caught") {
    wait_for(b, SpinBudget::kFloorNs / 2);
    CHECK(b.window() == SpinBudget::kFloorNs);
  }
  SECTION("a probe that was served: at least twice that wait") {
    for (uint32_t i = 1; i < SpinBudget::kProbeEvery; i++) wait_for(b, kCap);
    REQUIRE(b.window() == 0);
    CHECK(wait_for(b, 30000) == kCap);  // the probe
    CHECK(b.window() == 60000);
  }
  // From either start, served waits double it up to the cap and no further.
  int steps = 0;
  uint64_t prev = b.window();
  while (b.window() < kCap && steps < 100) {
    wait_for(b, 1000);
    CHECK(b.window() == std::min(kCap, 2 * prev));
    prev = b.window();
    steps++;
  }
  CHECK(steps <= 8);
  for (int i = 0; i < 50; i++) wait_for(b, 1000);
  CHECK(b.window() == kCap);
}

TEST_CASE("spin budget: as many misses as hits (an oversubscribed host) end at 0") {
  // A spinning rank whose peer cannot run half the time: the window must
  // not stay up, since every miss spins its whole window for nothing.
  SpinBudget b;
  for (int i = 0; i < 40; i++) {
    wait_for(b, 2000);       // served
    wait_for(b, 3 * kCap);   // the peer was descheduled
    CHECK(b.window() <= kCap);
  }
  CHECK(b.window() < 2 * SpinBudget::kFloorNs);
}

TEST_CASE("spin budget: a spin that was preempted counts as a miss even when it was served") {
  SpinBudget b;
  const uint64_t w = b.begin();
  b.ended(w, 2000, true);
  CHECK(b.window() == kCap / 4);
  b.ended(b.begin(), 2000, false);
  CHECK(b.window() == kCap / 2);
  // A host where every spin loses the core: 0 within a few waits.
  for (int i = 0; i < 5; i++) b.ended(b.begin(), 2000, true);
  CHECK(b.window() == 0);
}

TEST_CASE("spin budget: a smaller cap bounds every window") {
  SpinBudget b(50000);
  CHECK(b.window() == 50000);
  wait_for(b, 49000);
  CHECK(b.window() == 50000);
  wait_for(b, 500000);
  CHECK(b.window() == 12500);
}

TEST_CASE("the waiter takes its window from the budget and reports how the wait ended") {
  os::WaitPolicy p;
  os::SpinBudget budget;
  os::set_spin(p, budget, kCap, true);
  REQUIRE(p.budget == &budget);
  SECTION("a wait served at once leaves the window at the cap") {
    { os::Waiter w(p, nullptr); }
    CHECK(budget.window() == kCap);
  }
  SECTION("a wait whose last progress is long past shrinks it") {
    { os::Waiter w(p, nullptr, now_ns() - 50 * kCap); }
    CHECK(budget.window() == kCap / 4);
  }
  SECTION("a wait that blocked is timed after the block, not before it") {
    drain(budget);
    REQUIRE(budget.window() == 0);
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
    // Read before the sleep it would look like a floor-sized near miss.
    CHECK(budget.window() == 0);
  }
  SECTION("a spin whose clock reads lie far apart reports a preemption") {
    {
      os::Waiter w(p, nullptr);
      REQUIRE(w.spinning());
      // Stands in for the scheduler taking the core between two polls.
      os::sleep_ns(5 * SpinBudget::kPreemptedNs);
      REQUIRE(w.idle(os::kNoDeadline, [](uint64_t) {}) == DS4TP_OK);
    }
    CHECK(budget.window() == kCap / 4);
  }
  SECTION("with no window the yield phase is skipped too: the first idle blocks") {
    drain(budget);
    p.yield_ns = 10 * kCap;
    os::Waiter w(p, nullptr);
    int blocks = 0;
    REQUIRE(w.idle(os::kNoDeadline, [&](uint64_t) { blocks++; }) == DS4TP_OK);
    CHECK(blocks == 1);
  }
  SECTION("a wait told its peer shares the CPU yields for its window instead, and reports nothing") {
    int blocks = 0;
    {
      os::Waiter w(p, nullptr, now_ns() - 50 * kCap);  // a miss, were it reported
      w.yield_instead();
      CHECK_FALSE(w.spinning());
      REQUIRE(w.idle(os::kNoDeadline, [&](uint64_t) { blocks++; }) == DS4TP_OK);
      CHECK(blocks == 1);  // past the window it would have yielded in: it blocks
    }
    CHECK(budget.window() == kCap);  // the miss went unreported
    {
      const uint64_t t0 = now_ns();
      os::Waiter fresh(p, nullptr);
      fresh.yield_instead();
      CHECK_FALSE(fresh.spinning());
      REQUIRE(fresh.idle(os::kNoDeadline, [&](uint64_t) { blocks++; }) == DS4TP_OK);
      // Inside the window it would have spun, it yields: no block (unless
      // this host took the whole window to come back from one yield).
      if (now_ns() - t0 < kCap) CHECK(blocks == 1);
    }
  }
  SECTION("a fixed policy has no budget") {
    os::set_spin(p, budget, 200000, false);
    CHECK(p.budget == nullptr);
    CHECK(p.spin_ns == 200000);
    { os::Waiter w(p, nullptr, now_ns() - 50 * kCap); }
    CHECK(budget.window() == 200000);
  }
}
