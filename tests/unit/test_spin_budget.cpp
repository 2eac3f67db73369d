// The adaptive wait policy's state machine (lib/os/spin_budget.hpp), fed
// with wait durations: what it learns from how late the peer comes, and
// when it stops spinning. The Waiter that feeds it: test_waiter.cpp.
#include <catch2/catch.hpp>

#include <cstdint>

#include "os/spin_budget.hpp"

using ds4tp::os::SpinBudget;

namespace {

constexpr uint64_t kCap = SpinBudget::kDefaultCapNs;
constexpr uint64_t kUs = 1000;

// One wait: begin, then end `quiet_ns` after the last progress.
uint64_t wait_for(SpinBudget &b, uint64_t quiet_ns, bool preempted = false) {
  const uint64_t w = b.begin();
  b.ended(w, quiet_ns, preempted);
  return w;
}

// Waits spread evenly over [0, top_ns), in a fixed shuffled order.
uint64_t spread(int i, uint64_t top_ns) { return uint64_t(i) * 7919 % 1000 * top_ns / 1000; }

// Preempted spins until spinning is off; how many it took.
int lose_core(SpinBudget &b) {
  int n = 0;
  while (!b.off() && n < 100) {
    b.ended(b.begin(), 1000, true);
    n++;
  }
  return n;
}

}  // namespace

TEST_CASE("spin budget: before any wait it spins the whole cap") {
  SpinBudget b;
  CHECK(b.window() == kCap);
  CHECK(b.learned() == kCap);
  CHECK(b.begin() == kCap);
  CHECK(b.yield_after(kCap) == 0);
}

TEST_CASE("spin budget: it learns the skew and spins through 9 in 10 waits") {
  SpinBudget b;
  // Peers up to 200 us late: the bin edge above 9 in 10 of them is 256 us.
  for (int i = 0; i < 400; i++) wait_for(b, spread(i, 200 * kUs));
  CHECK(b.window() == 256 * kUs + SpinBudget::kFloorNs);
  int served = 0;
  for (int i = 400; i < 500; i++) {
    const uint64_t q = spread(i, 200 * kUs);
    served += b.begin() + SpinBudget::kFloorNs >= q;
    b.ended(b.window(), q);
  }
  CHECK(served >= 90);
  CHECK_FALSE(b.off());  // misses the histogram foretells turn nothing off
}

TEST_CASE("spin budget: however short the waits, it spins a wake-up's worth") {
  SpinBudget b;
  for (int i = 0; i < 200; i++) wait_for(b, 2 * kUs);
  CHECK(b.window() == SpinBudget::kWakeNs);
}

TEST_CASE("spin budget: a larger skew is learned within a few dozen waits") {
  SpinBudget b;
  for (int i = 0; i < 300; i++) wait_for(b, 10 * kUs);
  REQUIRE(b.window() == SpinBudget::kWakeNs);
  int n = 0;
  while (b.window() < 400 * kUs && n < 200) {
    wait_for(b, 400 * kUs);
    n++;
  }
  INFO(n << " waits of 400 us");
  CHECK(n <= 40);
  CHECK(b.window() == 512 * kUs + SpinBudget::kFloorNs);
  CHECK_FALSE(b.off());
}

TEST_CASE("spin budget: waits mostly longer than the cap neither spin nor yield") {
  SpinBudget b;
  for (int i = 0; i < 100; i++) wait_for(b, 5 * kCap);
  CHECK(b.learned() == 0);
  CHECK(b.window() == 0);
  CHECK(b.yield_after(0) == 0);  // the Waiter then blocks at once
  CHECK_FALSE(b.off());          // nothing said the core was busy
  for (int i = 0; i < 1000; i++) CHECK(wait_for(b, 5 * kCap) == 0);  // and no probes
  SECTION("short waits coming back bring the spin back") {
    int n = 0;
    while (b.window() == 0 && n < 500) {
      wait_for(b, 20 * kUs);
      n++;
    }
    INFO(n << " waits of 20 us");
    CHECK(n <= 200);
    CHECK(b.window() == SpinBudget::kWakeNs);
  }
}

TEST_CASE("spin budget: with half the waits past the cap it spins for the short half") {
  SpinBudget b;
  for (int i = 0; i < 400; i++) wait_for(b, i % 2 ? 3 * kUs : 3 * kCap);
  CHECK(b.window() == SpinBudget::kWakeNs);
  CHECK_FALSE(b.off());
}

TEST_CASE("spin budget: preempted spins quarter the window and four turn spinning off") {
  SpinBudget b;
  for (int i = 0; i < 200; i++) wait_for(b, spread(i, 200 * kUs));
  const uint64_t learned = b.learned();
  REQUIRE(learned == 256 * kUs + SpinBudget::kFloorNs);
  b.ended(b.begin(), 2 * kUs, true);  // served, but the spin lost the core
  CHECK(b.window() == learned / 4);
  CHECK(b.yield_after(b.window()) == learned - learned / 4);  // the rest is yielded
  b.ended(b.begin(), 2 * kUs);  // served, the core kept: doubles back
  CHECK(b.window() == learned / 2);
  CHECK(lose_core(b) <= 4);
  CHECK(b.off());
  CHECK(b.window() == 0);
  CHECK(b.learned() == learned);         // what the waits said is kept
  CHECK(b.yield_after(0) == learned);    // and yielded instead of spun
}

TEST_CASE("spin budget: spinning off it probes, and a wait served on a free core brings it back") {
  SpinBudget b;
  for (int i = 0; i < 200; i++) wait_for(b, 30 * kUs);
  const uint64_t learned = b.learned();
  REQUIRE(learned == SpinBudget::kWakeNs);
  lose_core(b);
  REQUIRE(b.off());
  // Waits whose yields keep losing the core stay off; one in
  // kProbeEvery spins the learned window.
  int probes = 0;
  for (uint32_t i = 0; i < 10 * SpinBudget::kProbeEvery; i++) {
    const uint64_t w = b.begin();
    if (w != 0) {
      CHECK(w == learned);
      probes++;
    }
    b.ended(w, 30 * kUs, true);
    REQUIRE(b.off());
  }
  CHECK(probes == 10);
  // A wait served by its yields with the core kept: the core is free again.
  b.ended(b.begin(), 30 * kUs);
  CHECK_FALSE(b.off());
  CHECK(b.window() == learned >> (SpinBudget::kOffShift - 1));
  for (uint32_t i = 1; i < SpinBudget::kOffShift; i++) wait_for(b, 30 * kUs);
  CHECK(b.window() == learned);
}

TEST_CASE("spin budget: a spin that holds its peer off (same core) turns spinning off") {
  // The peer runs only once this rank stops spinning: every wait ends
  // just after its spin, however long the spin grows, and a yield of the
  // rest of the window hands the core to that peer (a long yield).
  SpinBudget b;
  for (int i = 0; i < 100; i++) wait_for(b, 20 * kUs);
  uint64_t spun = 0;
  int n = 0;
  while (!b.off() && n < 200) {
    const uint64_t w = b.begin();
    spun += w;
    b.ended(w, w + 100 * kUs, b.yield_after(w) > 0);
    n++;
  }
  INFO(n << " waits, " << spun / 1000 << " us spun in vain");
  CHECK(b.off());
  CHECK(n <= 60);
  CHECK(spun < 10 * kCap);
}

TEST_CASE("spin budget: misses of a tail the window never covered turn nothing off") {
  // 1 wait in 10 comes 600 us late, the rest within 50 us: the window
  // covers the 9 and spins each of the others in vain, but never one as
  // long as a miss it had seen, so the core is not judged busy.
  SpinBudget b;
  for (int i = 0; i < 2000; i++) wait_for(b, i % 10 == 3 ? 600 * kUs : spread(i, 50 * kUs));
  CHECK_FALSE(b.off());
  CHECK(b.window() == b.learned());
}

TEST_CASE("spin budget: a smaller cap bounds every window") {
  SpinBudget b(40 * kUs);
  CHECK(b.window() == 40 * kUs);
  for (int i = 0; i < 100; i++) wait_for(b, 30 * kUs);
  CHECK(b.window() == 40 * kUs);  // the wake-up floor, capped
  for (int i = 0; i < 200; i++) wait_for(b, 100 * kUs);
  CHECK(b.window() == 0);  // past the cap: no spin
}

TEST_CASE("spin budget: bins are log2 microseconds") {
  CHECK(SpinBudget::bin(0) == 0);
  CHECK(SpinBudget::bin(1000) == 0);
  CHECK(SpinBudget::bin(1001) == 1);
  CHECK(SpinBudget::bin(2000) == 1);
  CHECK(SpinBudget::bin(2001) == 2);
  CHECK(SpinBudget::bin(256 * kUs) == 8);
  CHECK(SpinBudget::bin(UINT64_MAX) == SpinBudget::kBins - 1);
  for (int b = 0; b + 1 < SpinBudget::kBins; b++) {
    CHECK(SpinBudget::bin(SpinBudget::edge(b)) == b);
    CHECK(SpinBudget::bin(SpinBudget::edge(b) + 1) == b + 1);
  }
}
