// ds4tp_bench_wake: what waking a rank that sleeps in the kernel costs,
// per way of sleeping, next to a rank that spins or yields. A signaller
// thread (CPU 1) sleeps a gap, so the waiter (CPU 0) is surely blocked and
// its CPU idle, stamps the clock and signals; the waiter stamps the clock
// as it returns. The figure is that difference: the wake-up a wait pays
// when it blocked before its peer came (bench/README.md, "Engine loop").
//   futex       FUTEX_WAIT on a shared word, FUTEX_WAKE (shm links' bell)
//   eventfd     a blocking read, a write
//   pipe+poll   poll() on a pipe, then read
//   tcp+poll    poll() on a loopback TCP socket, then recv (tcp links)
//   tcp+recv    a blocking recv on it
//   tcp+epoll   epoll_wait on it, then recv
//   yield       sched_yield() until the word changes (no sleep)
//   spin        a pause loop on the word (no sleep)
// Usage: ds4tp_bench_wake [iterations] [gap_us]
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace {

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

void relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

struct Path {
  const char *name;
  std::function<void()> wait;    // returns once signalled
  std::function<void()> signal;  // one signal
};

std::atomic<uint32_t> word{0};
uint32_t seen = 0;

long futex(uint32_t *w, int op, uint32_t v) {
  return syscall(SYS_futex, w, op, v, nullptr, nullptr, 0);
}

// A connected loopback TCP pair (TCP_NODELAY, as the library's links).
void tcp_pair(int &a, int &b) {
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof s;
  if (bind(l, reinterpret_cast<sockaddr *>(&s), sizeof s) != 0 || listen(l, 1) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr *>(&s), &n) != 0) {
    std::perror("tcp pair");
    std::exit(1);
  }
  a = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(a, reinterpret_cast<sockaddr *>(&s), sizeof s) != 0) std::exit(1);
  b = accept(l, nullptr, nullptr);
  close(l);
  const int one = 1;
  setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void run(const Path &p, int iters, uint64_t gap_ns, bool two_cpus) {
  std::atomic<uint64_t> t0{0};
  std::atomic<int> done{0};  // wakes the waiter has taken: one signal in flight at a time
  std::vector<uint64_t> lat;
  lat.reserve(size_t(iters));
  std::thread waiter([&] {
    if (two_cpus) pin(0);
    for (int i = 0; i < iters; i++) {
      p.wait();
      lat.push_back(now_ns() - t0.load(std::memory_order_acquire));
      done.store(i + 1, std::memory_order_release);
    }
  });
  if (two_cpus) pin(1);
  for (int i = 0; i < iters; i++) {
    while (done.load(std::memory_order_acquire) < i) sched_yield();
    const timespec ts{0, long(gap_ns)};
    nanosleep(&ts, nullptr);
    t0.store(now_ns(), std::memory_order_release);
    p.signal();
  }
  waiter.join();
  std::sort(lat.begin(), lat.end());
  auto at = [&](double q) { return double(lat[size_t(q * double(lat.size() - 1))]) / 1e3; };
  std::printf("%-11s p50 %7.1f us  p90 %7.1f us  p99 %7.1f us\n", p.name, at(0.5), at(0.9),
              at(0.99));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char **argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 2000;
  const uint64_t gap_ns = uint64_t(argc > 2 ? std::atoi(argv[2]) : 300) * 1000;
  const bool two_cpus = std::thread::hardware_concurrency() >= 2;
  auto *w = reinterpret_cast<uint32_t *>(&word);
  int efd = eventfd(0, 0), pfd[2], ta, tb, ea, eb, pa, pb;
  if (efd < 0 || pipe(pfd) != 0) return 1;
  tcp_pair(ta, tb);
  tcp_pair(ea, eb);
  tcp_pair(pa, pb);
  const int ep = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  epoll_ctl(ep, EPOLL_CTL_ADD, eb, &ev);
  char byte = 1;
  auto bump = [] { word.fetch_add(1, std::memory_order_release); };
  auto changed = [] { return word.load(std::memory_order_acquire) != seen; };
  const Path paths[] = {
      {"futex",
       [&] {
         while (!changed()) futex(w, FUTEX_WAIT, seen);
         seen++;
       },
       [&] {
         bump();
         futex(w, FUTEX_WAKE, 1);
       }},
      {"eventfd",
       [&] {
         uint64_t v;
         if (read(efd, &v, sizeof v) != sizeof v) std::exit(1);
       },
       [&] {
         const uint64_t one = 1;
         if (write(efd, &one, sizeof one) != sizeof one) std::exit(1);
       }},
      {"pipe+poll",
       [&] {
         pollfd p{pfd[0], POLLIN, 0};
         poll(&p, 1, -1);
         if (read(pfd[0], &byte, 1) != 1) std::exit(1);
       },
       [&] {
         if (write(pfd[1], &byte, 1) != 1) std::exit(1);
       }},
      {"tcp+poll",
       [&] {
         pollfd p{pb, POLLIN, 0};
         poll(&p, 1, -1);
         if (recv(pb, &byte, 1, 0) != 1) std::exit(1);
       },
       [&] {
         if (send(pa, &byte, 1, 0) != 1) std::exit(1);
       }},
      {"tcp+recv",
       [&] {
         if (recv(tb, &byte, 1, 0) != 1) std::exit(1);
       },
       [&] {
         if (send(ta, &byte, 1, 0) != 1) std::exit(1);
       }},
      {"tcp+epoll",
       [&] {
         epoll_event out;
         epoll_wait(ep, &out, 1, -1);
         if (recv(eb, &byte, 1, 0) != 1) std::exit(1);
       },
       [&] {
         if (send(ea, &byte, 1, 0) != 1) std::exit(1);
       }},
      {"yield",
       [&] {
         while (!changed()) sched_yield();
         seen++;
       },
       bump},
      {"spin",
       [&] {
         while (!changed()) relax();
         seen++;
       },
       bump},
  };
  std::printf("wake-up latency, %d wakes per path, %llu us apart, %s\n", iters,
              (unsigned long long)(gap_ns / 1000),
              two_cpus ? "waiter on CPU 0, signaller on CPU 1" : "one CPU");
  std::fflush(stdout);
  for (const Path &p : paths) run(p, iters, gap_ns, two_cpus);
  return 0;
}
