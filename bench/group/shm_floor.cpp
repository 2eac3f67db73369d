// The floor of a two-rank all-reduce through shared memory on this
// machine: two threads pinned to CPUs 0 and 1 do only what the library's
// shm medium must do per call, with busy waits and no checks. No library
// code: it tells how much of ds4tp's time is the machine's (cross-core
// cache traffic) and how much is the library's. Two algorithms:
//   slots: the vector is copied into a double-buffered slot, a stamp
//     published; after the peer's stamp both slots are summed into the
//     vector and "done" published (the library below its home threshold).
//   home: the vector already lies in the rank's shared home (the group
//     buffer); each rank sums its half of both homes into its own, then
//     copies the peer's summed half, then waits until the peer has read
//     its half (shm.cpp reduce_home, from 4 KiB).
//   g++ -O3 -std=c++17 -o /tmp/shm_floor bench/group/shm_floor.cpp -lpthread
//   /tmp/shm_floor [count] [iters] [slots|home]  (f32 elements, default 4096 = 16 KiB)
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

struct alignas(64) Word {
  std::atomic<long> v{0};
};

size_t count = 4096;
int iters = 20000;
bool home_mode = false;
std::vector<float> slots[2][2];  // [rank][buffer]
Line lines[2];
std::vector<float> homes[2];
Word summed[2], read_done[2];
std::vector<double> us;

void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

void wait_for(const Word &w, long step) {
  while (w.v.load(std::memory_order_acquire) < step) {
  }
}

void home_rank(int me) {
  pin(me);
  const int peer = 1 - me;
  const size_t half = count / 2, mine = size_t(me) * half, theirs = size_t(peer) * half;
  const size_t n_mine = me == 0 ? half : count - half, n_theirs = count - n_mine;
  float *h = homes[me].data();
  const float *a = homes[0].data(), *c = homes[1].data(), *p = homes[peer].data();
  for (long step = 1; step <= iters; step++) {
    for (size_t j = 0; j < count; j++) h[j] = float(step + long(j) + me);  // the engine's output
    const auto t0 = std::chrono::steady_clock::now();
    lines[me].stamp[0].store(step, std::memory_order_release);
    while (lines[peer].stamp[0].load(std::memory_order_acquire) < step) {
    }
    for (size_t j = mine; j < mine + n_mine; j++) h[j] = a[j] + c[j];  // rank order
    summed[me].v.store(step, std::memory_order_release);
    wait_for(summed[peer], step);
    std::memcpy(h + theirs, p + theirs, n_theirs * 4);
    read_done[me].v.store(step, std::memory_order_release);
    wait_for(read_done[peer], step);  // the engine may then write its home
    const auto t1 = std::chrono::steady_clock::now();
    if (me == 0 && step > 20) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
}

void rank(int me) {
  if (home_mode) return home_rank(me);
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
  if (argc > 3) home_mode = std::strcmp(argv[3], "home") == 0;
  if (count == 0 || iters <= 20 || (argc > 3 && !home_mode && std::strcmp(argv[3], "slots") != 0)) {
    std::fprintf(stderr, "usage: shm_floor [count >= 1] [iters > 20] [slots|home]\n");
    return 2;
  }
  for (auto &r : slots)
    for (auto &s : r) s.assign(count, 0.0f);
  for (auto &h : homes) h.assign(count, 0.0f);
  us.reserve(size_t(iters));
  std::thread other(rank, 1);
  rank(0);
  other.join();
  std::sort(us.begin(), us.end());
  std::printf("shm %s floor, 2 threads, %zu bytes f32: p50 %.1f us  p99 %.1f us  (%zu calls)\n",
              home_mode ? "home" : "slot one-shot", count * 4, us[us.size() / 2],
              us[us.size() * 99 / 100], us.size());
  return 0;
}
