// The OS seam (lib/os): the platform primitives, the shared waiter and
// peer watch, and the transport descriptor table built on them.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include <dirent.h>
#include <pthread.h>

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.hpp"
#include "net/socket.hpp"
#include "os/os.hpp"
#include "os/wait.hpp"
#include "talk/liveness.hpp"
#include "slab/layout.hpp"
#include "link/descriptor.hpp"
#include "link/shm/bell.hpp"
#include "support/gate_calls.hpp"
#include "link/tcp/pair_link.hpp"

using namespace ds4tp;

namespace {

struct SocketPair {
  int fd[2] = {-1, -1};
  SocketPair() { REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fd) == 0); }
  ~SocketPair() {
    for (int f : fd)
      if (f >= 0) close(f);
  }
  void close_peer() {
    close(fd[1]);
    fd[1] = -1;
  }
};

}  // namespace

TEST_CASE("a shared word: the sleeper returns after its timeout, or when woken") {
  void *m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(m != MAP_FAILED);
  auto *word = static_cast<uint32_t *>(m);
  std::atomic_ref<uint32_t> w(*word);
  w.store(1);
  uint64_t t0 = now_ns();
  os::wait_on_word(word, 1, 20000000);
  CHECK(now_ns() - t0 >= 15000000);  // slept (spurious wake-ups aside)

  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    w.store(0);
    os::wake_word(word);
  });
  t0 = now_ns();
  while (w.load() == 1) os::wait_on_word(word, 1, 5000000000ull);
  CHECK(now_ns() - t0 < 2000000000ull);
  waker.join();
  // A word that does not hold the expected value: no sleep at all.
  t0 = now_ns();
  os::wait_on_word(word, 1, 2000000000ull);
  CHECK(now_ns() - t0 < 1000000000ull);
  munmap(m, 4096);
}

TEST_CASE("a bell wakes every rank asleep on it, and a ring with nobody asleep stays in user space") {
  void *m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(m != MAP_FAILED);
  auto *base = static_cast<uint8_t *>(m);
  const shm::Bell bell(base + 64);
  std::atomic_ref<uint64_t> step(*reinterpret_cast<uint64_t *>(base));
#ifdef DS4TP_TEST_PORTABLE_POSIX
  constexpr int kSleepers = 1;  // a pipe per mapping wakes one sleeper (os/portable.hpp)
#else
  constexpr int kSleepers = 3;
#endif
  constexpr int kRounds = 200;
  constexpr uint64_t kSliceNs = 2'000'000'000ull;  // a lost wake shows as a sleep this long
  std::atomic<uint64_t> acks[kSleepers] = {};
  std::atomic<int> slept_through{0}, at_round{0};
  std::vector<std::thread> sleepers;
  for (int i = 0; i < kSleepers; i++)
    sleepers.emplace_back([&, i] {
      for (uint64_t k = 1; k <= kRounds; k++) {
        auto ready = [&]() -> int { return step.load(std::memory_order_acquire) >= k ? 1 : 0; };
        while (ready() == 0) {
          const uint64_t t0 = now_ns();
          bell.sleep(ready, kSliceNs);
          if (now_ns() - t0 >= kSliceNs / 2) {  // the rest of the test could only take longer
            if (slept_through.fetch_add(1) == 0) at_round = int(k);
            acks[i].store(kRounds, std::memory_order_release);
            return;
          }
        }
        acks[i].store(k, std::memory_order_release);
      }
    });
  for (uint64_t k = 1; k <= kRounds; k++) {
    // Give the sleepers time to block, so most rounds wake one in the kernel.
    if (k % 8 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    step.store(k, std::memory_order_seq_cst);  // as Bell::ring wants
    bell.ring();
    for (auto &a : acks)
      while (a.load(std::memory_order_acquire) < k) std::this_thread::yield();
  }
  for (auto &t : sleepers) t.join();
  INFO("first round a sleeper slept through: " << at_round.load());
  CHECK(slept_through.load() == 0);
  // Nobody asleep: the ring count (the word sleepers block on) is left alone.
  const uint32_t rings = std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t *>(base + 68)).load();
  bell.ring();
  CHECK(std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t *>(base + 68)).load() == rings);
  CHECK(rings > 0);  // some rounds did find a sleeper
  munmap(m, 4096);
}

TEST_CASE("wait_hangup sees a closed peer without reading its bytes") {
  SocketPair sp;
  os::Hangup how;
  CHECK(os::wait_hangup(sp.fd, 1, 0, how) == -1);
  CHECK(how == os::Hangup::kNone);
  REQUIRE(write(sp.fd[1], "x", 1) == 1);
  sp.close_peer();
  int fds[2] = {-1, sp.fd[0]};  // negative fds are skipped
  CHECK(os::wait_hangup(fds, 2, 1000000, how) == 1);
  CHECK(how == os::Hangup::kClosed);
  char c = 0;
  CHECK(read(sp.fd[0], &c, 1) == 1);  // the byte is still there
  CHECK(c == 'x');
}

TEST_CASE("the waiter ends at the deadline with ETIMEDOUT") {
  os::WaitPolicy p;
  p.spin_ns = 1000000;
  os::Waiter w(p, nullptr);
  // Far past the 1 ms spin window, so a descheduled test thread (loaded
  // host) still reaches the blocking phase before the deadline.
  const uint64_t deadline = now_ns() + 200000000;
  int rc = DS4TP_OK;
  int blocks = 0;
  while (rc == DS4TP_OK) rc = w.idle(deadline, [&](uint64_t left) {
    blocks++;
    os::sleep_ns(std::min<uint64_t>(left, 1000000));
  });
  CHECK(rc == DS4TP_ETIMEDOUT);
  CHECK(now_ns() >= deadline);
  CHECK(blocks > 0);  // past the 1 ms spin window it blocked
}

TEST_CASE("the waiter's first polls only relax the CPU, even with no spin window") {
  os::WaitPolicy p;  // no spin, no yield: a wait blocks at once
  p.first_polls = 64;
  os::Waiter w(p, nullptr);
  const uint64_t deadline = now_ns() + 5000000000ull;
  int blocks = 0, polls = 0;
  auto block = [&](uint64_t) { blocks++; };
  for (; polls < 64; polls++) REQUIRE(w.idle(deadline, block) == DS4TP_OK);
  CHECK(blocks == 0);  // a peer a few hundred ns away is met without blocking
  CHECK(w.idle(deadline, block) == DS4TP_OK);
  CHECK(blocks == 1);  // then the policy as before
}

TEST_CASE("the waiter reports a closed peer after one more poll, naming the socket") {
  SocketPair sp;
  os::PeerWatch watch;
  watch.watch_socket(sp.fd[0], "data connection");
  os::Waiter w(os::WaitPolicy{}, &watch);
  sp.close_peer();
  int polls = 0, rc = DS4TP_OK;
  const uint64_t deadline = now_ns() + 5000000000ull;
  while (rc == DS4TP_OK) {
    polls++;
    rc = w.idle(deadline, [&](uint64_t left) { watch.nap(std::min<uint64_t>(left, 50000)); });
  }
  CHECK(rc == DS4TP_EPEERCLOSED);
  CHECK(polls >= 2);
  CHECK(watch.why() == "closed the data connection");
  CHECK(std::string(watch.socket_name()) == "data connection");
}

TEST_CASE("the peer watch sees a raised failure flag and an exited process") {
  std::atomic<bool> failed{false};
  os::PeerWatch a;
  a.watch_flag([](const void *p) { return static_cast<const std::atomic<bool> *>(p)->load(); },
               &failed);
  CHECK_FALSE(a.check(now_ns()));
  failed = true;
  CHECK(a.check(now_ns()));
  CHECK(a.why() == "failed");

  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  uint64_t start = os::process_start_time(child);
  os::PeerWatch b;
  b.watch_process(child, start != 0 ? start : 1);
  // Each check is given a clock one process period later, so none is skipped.
  const uint64_t t0 = now_ns();
  uint64_t t = t0;
  while (!b.check(t) && now_ns() - t0 < 5000000000ull) {
    os::sleep_ns(1000000);
    t += os::PeerWatch::kProcessCheckNs;
  }
  CHECK(b.gone());
  CHECK(b.why() == "process has exited");
  CHECK(os::process_alive(getpid(), os::process_start_time(getpid())));
}

TEST_CASE("host seed, shm names and verbs names") {
  CHECK_FALSE(os::host_seed().empty());
  CHECK(os::host_seed() == os::host_seed());
  CHECK(os::shm_name_max() >= 31);
  REQUIRE(os::verbs_library_names()[0] != nullptr);
  CHECK(std::string(os::platform_name()).size() > 0);
}

#if defined(__linux__)
namespace {

// The name thread `t` carries, read back as a debugger would ("" when it
// cannot be read; no REQUIRE: this runs off the test's thread).
std::string name_of(pthread_t t) {
  char buf[64] = {};
  return pthread_getname_np(t, buf, sizeof buf) == 0 ? buf : "";
}

// Names of this process's threads (/proc/self/task/*/comm).
std::set<std::string> thread_names() {
  std::set<std::string> out;
  DIR *d = opendir("/proc/self/task");
  REQUIRE(d != nullptr);
  while (dirent *e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    if (std::getline(f, name)) out.insert(name);
  }
  closedir(d);
  return out;
}

}  // namespace

TEST_CASE("current_cpu names the CPU a pinned thread runs on, or -1 where the OS does not say") {
  int cpu = 0, allowed = 0;
  while (cpu < 1024 && !os::cpu_allowed(cpu, allowed)) cpu++;
  int result = -2;
  std::thread t([&] {
    os::pin_thread(cpu);
    result = os::current_cpu();
  });
  t.join();
  if (std::string(os::platform_name()) == "linux")
    CHECK(result == cpu);
  else
    CHECK(result == -1);  // macOS and portable POSIX: unknown, so shm never assumes a shared CPU
}

TEST_CASE("a thread names itself, and names past 15 characters are cut") {
  std::string got_short, got_long;
  std::thread([&] {
    os::name_this_thread("ds4tp-test");
    got_short = name_of(pthread_self());
    os::name_this_thread("ds4tp-a-much-longer-name");
    got_long = name_of(pthread_self());
  }).join();
  CHECK(got_short == "ds4tp-test");
  CHECK(got_long == std::string("ds4tp-a-much-longer-name").substr(0, os::kThreadNameMaxLinux));
}

TEST_CASE("the liveness watcher thread is named ds4tp-watch") {
  SocketPair sp;
  std::unique_ptr<talk::Liveness> watch;
  Error err;
  REQUIRE(talk::Liveness::start(sp.fd[0], talk::LivenessConfig{}, talk::LivenessHooks{}, Logger{},
                                watch, err) == DS4TP_OK);
  // The thread names itself when it starts: wait for it.
  bool seen = false;
  for (int i = 0; i < 200 && !seen; i++) {
    seen = thread_names().count("ds4tp-watch") != 0;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(seen);
}
#endif

TEST_CASE("the descriptor table: one entry per transport, tcp always there") {
  std::set<int> ids;
  uint32_t caps = 0;
  for (const link::Descriptor *d : link::all()) {
    CHECK(ids.insert(d->id).second);
    CHECK((caps & d->cap) == 0);
    caps |= d->cap;
    CHECK(link::find(d->id) == d);
    CHECK(std::string(d->name) == ds4tp_transport_name(d->id));
  }
  CHECK(link::all()[0] == &link::kTcp);
  CHECK(link::find(DS4TP_TRANSPORT_AUTO) == nullptr);
  link::Availability a;
  link::kTcp.available(link::Query{}, a);
  CHECK(a.usable);
}

// A link's gate reads no clock to begin: its deadlines count from
// the start_ns the pair hands it (the read its stats use too). Handed a
// start two gate timeouts ago, rank 0's deadline has passed before its
// first wait, though the peer arrives well within a timeout of the call.
TEST_CASE("a tcp gate's deadlines count from the start_ns it is handed") {
  SocketPair sp;
  for (int f : sp.fd) net::set_nonblocking(f);
  slab::Layout l;
  REQUIRE(slab::compute_layout(2, 64, l));
  const uint64_t bytes = (l.total + 4095) / 4096 * 4096;
  DataConfig cfg;
  cfg.gate_timeout_ns = 3000000000ull;
  cfg.big_gate_timeout_ns = cfg.gate_timeout_ns;
  std::unique_ptr<link::Link> t[2];
  uint8_t *slab[2];
  Error err[2];
  for (int r = 0; r < 2; r++) {
    slab[r] = static_cast<uint8_t *>(std::aligned_alloc(4096, bytes));
    std::memset(slab[r], 0, bytes);
    t[r] = tcp::make_pair_link(net::Fd(sp.fd[r]), cfg, tcp::BigPlan{});
    sp.fd[r] = -1;  // the link owns it
    REQUIRE(t[r]->bind(slab[r], l, err[r]) == DS4TP_OK);
  }
  int rc1 = -100;
  std::thread peer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    rc1 = test::row_gate(*t[1], slab[1], l, cfg, 0, 0, 1, now_ns(), err[1]);
  });
  const int rc0 =
      test::row_gate(*t[0], slab[0], l, cfg, 0, 0, 1, now_ns() - 2 * cfg.gate_timeout_ns, err[0]);
  peer.join();
  INFO("rank 0: " << err[0].message);
  INFO("rank 1: " << err[1].message);
  CHECK(rc0 == DS4TP_ETIMEDOUT);
  CHECK_THAT(err[0].message, Catch::Contains("timed out"));
  CHECK(rc1 == DS4TP_OK);  // rank 0's partial went out before its wait
  for (int r = 0; r < 2; r++) {
    t[r].reset();
    std::free(slab[r]);
  }
}
