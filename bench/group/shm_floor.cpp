// The floor of a two-rank one-shot all-reduce through shared memory on
// this machine: two threads pinned to CPUs 0 and 1 do only what the
// library's shm medium must do per call (copy the vector into a
// double-buffered slot, publish a stamp, wait for the peer's stamp, sum
// both slots into the vector, publish "done"), with busy waits and no
// checks. No library code: it tells how much of ds4tp's time is the
// machine's (cross-core cache traffic) and how much is the library's.
//   g++ -O3 -std=c++17 -o /tmp/shm_floor bench/group/shm_floor.cpp -lpthread
//   /tmp/shm_floor [count] [iters]        (f32 elements, default 4096 = 16 KiB)
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

struct alignas(64) Line {
  std::atomic<long> stamp[2];
  char pad[48];
  std::atomic<long> done;
};

size_t count = 4096;
int iters = 20000;
std::vector<float> slots[2][2];  // [rank][buffer]
Line lines[2];
std::vector<double> us;

void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

void rank(int me) {
  pin(me);
  const int peer = 1 - me;
  std::vector<float> v(count);
  for (long step = 1; step <= iters; step++) {
    for (size_t j = 0; j < count; j++) v[j] = float(step + long(j) + me);  // the engine's output
    const int b = int(step & 1);
    const auto t0 = std::chrono::steady_clock::now();
    while (lines[peer].done.load(std::memory_order_acquire) < step - 2) {
    }
    std::memcpy(slots[me][b].data(), v.data(), count * 4);
    lines[me].stamp[b].store(step, std::memory_order_release);
    while (lines[peer].stamp[b].load(std::memory_order_acquire) != step) {
    }
    const float *a = slots[0][b].data(), *c = slots[1][b].data();
    for (size_t j = 0; j < count; j++) v[j] = a[j] + c[j];  // rank order
    lines[me].done.store(step, std::memory_order_release);
    const auto t1 = std::chrono::steady_clock::now();
    if (me == 0 && step > 20) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
}

}  // namespace

int main(int argc, char **argv) {
  if (argc > 1) count = size_t(std::atoll(argv[1]));
  if (argc > 2) iters = std::atoi(argv[2]);
  if (count == 0 || iters <= 20) {
    std::fprintf(stderr, "usage: shm_floor [count >= 1] [iters > 20]\n");
    return 2;
  }
  for (auto &r : slots)
    for (auto &s : r) s.assign(count, 0.0f);
  us.reserve(size_t(iters));
  std::thread other(rank, 1);
  rank(0);
  other.join();
  std::sort(us.begin(), us.end());
  std::printf("shm one-shot floor, 2 threads, %zu bytes f32: p50 %.1f us  p99 %.1f us  (%zu calls)\n",
              count * 4, us[us.size() / 2], us[us.size() * 99 / 100], us.size());
  return 0;
}
