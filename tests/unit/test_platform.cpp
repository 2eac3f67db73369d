// The OS seam per platform (lib/os; test_os covers the waiter and the
// descriptors): every primitive of the platform this build uses
// (linux, or the portable fallbacks Darwin shares in a
// -DDS4TP_PLATFORM=posix build), plus the portable wait/wake in every
// build, and the verbs loader's search over a test library.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.hpp"
#include "net/socket.hpp"
#include "os/os.hpp"
#include "os/portable.hpp"
#include "pair/pair.hpp"
#include "link/shm/segment.hpp"
#if defined(DS4TP_TEST_FAKE_VERBS)
#include "link/rdma/probe.hpp"
#include "link/rdma/verbs_loader.hpp"
#endif

namespace os = ds4tp::os;
namespace shm = ds4tp::shm;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Runs `body` in a forked child. Returns "" when it returned "", else its
// message, or how it died.
std::string in_child(const std::function<std::string()> &body) {
  int p[2];
  if (pipe(p) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    std::string m = body();
    (void)!write(p[1], m.data(), m.size());
    _exit(0);
  }
  close(p[1]);
  std::string out;
  char buf[256];
  for (ssize_t n; (n = read(p[0], buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  close(p[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  if (WIFSIGNALED(st)) return out + "child killed by signal " + std::to_string(WTERMSIG(st));
  return out;
}

std::atomic_ref<uint32_t> word_at(uint8_t *p) {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t *>(p));
}

std::string seg_name(const char *what) {
  return shm::unique_name(std::string("/ds4tp-t") + what, uint64_t(getpid()),
                          uint64_t(Clock::now().time_since_epoch().count()), os::shm_name_max());
}

// Two processes share a segment: the parent created it (`mine`), the
// child opens it by name as a peer rank does. The child sleeps on the
// word at offset 256; the parent clears it and wakes it (or not).
// Returns the child's verdict.
std::string wait_across(void (*wait)(uint32_t *, uint32_t, uint64_t),
                        void (*wake)(uint32_t *), bool do_wake, uint64_t timeout_ns,
                        double min_ms, double max_ms) {
  const std::string name = seg_name("w");
  shm::Segment mine;
  ds4tp::Error err;
  if (mine.create(name, 4096, err) != 0 || mine.map_created(err) != 0) return err.message;
  uint8_t *const w = mine.base() + 256;
  word_at(w).store(1);
  // For the portable functions in builds whose os:: does not use them (a
  // second registration of the same mapping in posix mode is harmless).
  os::portable::shared_mapping_added(mine.base(), 4096, name);
  int go[2];
  if (pipe(go) != 0) return "pipe failed";
  std::thread poker([&] {
    char c;
    (void)!read(go[0], &c, 1);  // the child is about to sleep
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (do_wake) {
      word_at(w).store(0);
      wake(reinterpret_cast<uint32_t *>(w));
    }
  });
  std::string verdict = in_child([&]() -> std::string {
    shm::Segment peer;
    ds4tp::Error e;
    if (peer.open_existing(name, 4096, e) != 0) return "child: " + e.message;
    os::portable::shared_mapping_added(peer.base(), 4096, name);
    auto *word = reinterpret_cast<uint32_t *>(peer.base() + 256);
    (void)!write(go[1], "x", 1);
    auto t0 = Clock::now();
    // As the shm transport does: re-check, sleep again until the deadline.
    const auto deadline = t0 + std::chrono::nanoseconds(timeout_ns);
    while (word_at(peer.base() + 256).load() == 1 && Clock::now() < deadline) {
      auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - Clock::now());
      wait(word, 1, uint64_t(std::max<int64_t>(left.count(), 0)));
    }
    double took = ms_since(t0);
    if (took < min_ms || took > max_ms)
      return "child: woke after " + std::to_string(took) + " ms, expected " +
             std::to_string(min_ms) + ".." + std::to_string(max_ms) + " ms (word " +
             std::to_string(word_at(peer.base() + 256).load()) + ")";
    return "";
  });
  poker.join();
  os::portable::shared_mapping_removed(mine.base());
  close(go[0]);
  close(go[1]);
  return verdict;
}

}  // namespace

TEST_CASE("the platform is the one this build chose") {
  std::string p = os::platform_name();
#if defined(__linux__)
  CHECK((p == "linux" || p == "linux-posix"));
#endif
  if (p != "linux") {
    CHECK(os::shm_name_max() <= 31);
    CHECK(os::shm_dir() == nullptr);
  }
}

TEST_CASE("wait/wake on a shared word across two processes") {
  SECTION("a wake ends the sleep at once") {
    // The poker waits 100 ms before waking; 5 s is the timeout.
    std::string v = wait_across(os::wait_on_word, os::wake_word, true, 5000000000ull, 50, 2000);
    INFO(v);
    CHECK(v.empty());
  }
  SECTION("without a wake it times out within bound") {
    std::string v = wait_across(os::wait_on_word, os::wake_word, false, 300000000ull, 250, 1500);
    INFO(v);
    CHECK(v.empty());
  }
  SECTION("a word that no longer holds the value returns at once") {
    uint32_t w = 0;
    auto t0 = Clock::now();
    os::wait_on_word(&w, 1, 2000000000ull);
    CHECK(ms_since(t0) < 500);
  }
}

// The portable FIFO pokes (posix mode, and Darwin before macOS 14.4) are
// tested in every build, beside the platform's own.
TEST_CASE("portable wait/wake: FIFO pokes across two processes") {
  SECTION("wakes") {
    std::string v = wait_across(os::portable::wait_on_word, os::portable::wake_word, true,
                                5000000000ull, 50, 2000);
    INFO(v);
    CHECK(v.empty());
  }
  SECTION("times out within bound") {
    std::string v = wait_across(os::portable::wait_on_word, os::portable::wake_word, false,
                                300000000ull, 250, 1500);
    INFO(v);
    CHECK(v.empty());
  }
  SECTION("the FIFO is gone with the mapping") {
    const std::string name = seg_name("f");
    std::string path = os::portable::poke_path(name);
    {
      void *m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
      REQUIRE(m != MAP_FAILED);
      os::portable::shared_mapping_added(m, 4096, name);
      CHECK(access(path.c_str(), F_OK) == 0);
      os::portable::shared_mapping_removed(m);
      munmap(m, 4096);
    }
    CHECK(access(path.c_str(), F_OK) != 0);
  }
  SECTION("an unregistered word sleeps its timeout, or until this process wakes it") {
    uint32_t w = 1;
    auto t0 = Clock::now();
    os::portable::wait_on_word(&w, 1, 50000000ull);
    CHECK(ms_since(t0) >= 40);
    std::thread waker([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      __atomic_store_n(&w, 0, __ATOMIC_RELEASE);
      os::portable::wake_word(&w);
    });
    t0 = Clock::now();
    while (__atomic_load_n(&w, __ATOMIC_ACQUIRE) == 1) os::portable::wait_on_word(&w, 1, 5000000000ull);
    CHECK(ms_since(t0) < 2000);
    waker.join();
  }
}

TEST_CASE("host identity: stable within a boot, different per DS4TP_HOST_ID") {
  unsetenv("DS4TP_HOST_ID");
  auto a = ds4tp::host_identity();
  CHECK(ds4tp::host_identity() == a);
  CHECK(os::host_seed() == os::host_seed());
  // Another process on this host agrees.
  std::string v = in_child([&]() -> std::string {
    return ds4tp::host_identity() == a ? "" : "the child computed another host identity";
  });
  INFO(v);
  CHECK(v.empty());
  setenv("DS4TP_HOST_ID", "host-a", 1);
  auto ha = ds4tp::host_identity();
  setenv("DS4TP_HOST_ID", "host-b", 1);
  auto hb = ds4tp::host_identity();
  unsetenv("DS4TP_HOST_ID");
  CHECK(ha != a);
  CHECK(hb != a);
  CHECK(ha != hb);
  CHECK(os::portable::host_seed() == os::portable::host_seed());
}

TEST_CASE("segment names fit 31 characters and keep prefix and pid") {
  const std::string prefix = "/ds4tp-0123abcd-r1-";
  for (uint64_t pid : {1ull, 4242ull, 99999ull, 4194304ull}) {
    std::string n = shm::unique_name(prefix, pid, 0x0123456789abcdefull, 31);
    INFO(n);
    CHECK(n.size() <= 31);
    CHECK(n.rfind(prefix, 0) == 0);
    CHECK(n.find("-" + std::to_string(pid) + "-") != std::string::npos);
    CHECK(n.size() >= prefix.size() + std::to_string(pid).size() + 1 + 4);
  }
  // Where names may be long, all 16 hex digits are kept.
  CHECK(shm::unique_name(prefix, 7, 0xfull, 255) == prefix + "7-000000000000000f");
  // A name this build makes can be created here.
  std::string n = seg_name("n");
  CHECK(n.size() <= os::shm_name_max());
  shm::Segment s;
  ds4tp::Error err;
  INFO(err.message);
  CHECK(s.create(n, 8192, err) == 0);
  CHECK(s.map_created(err) == 0);
}

TEST_CASE("writing to a closed peer never raises SIGPIPE") {
  std::string v = in_child([]() -> std::string {
    signal(SIGPIPE, SIG_DFL);  // would kill the child
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return "socketpair failed";
    os::no_sigpipe(sv[0]);
    close(sv[1]);
    char buf[64] = {};
    ssize_t n = os::send_nosignal(sv[0], buf, sizeof buf);
    if (n >= 0 || errno != EPIPE) return "send_nosignal: expected EPIPE, got " + std::to_string(n);
    iovec iov{buf, sizeof buf};
    n = os::sendv_nosignal(sv[0], &iov, 1);
    if (n >= 0 || errno != EPIPE) return "sendv_nosignal: expected EPIPE, got " + std::to_string(n);
    ds4tp::Error err;
    int rc = ds4tp::net::write_all(sv[0], buf, sizeof buf, UINT64_MAX, "test", err);
    if (rc != DS4TP_EPEERCLOSED) return "write_all: " + std::to_string(rc) + " " + err.message;
    // Nothing left pending, and the thread's mask is as it was.
    sigset_t pending, mask;
    sigpending(&pending);
    pthread_sigmask(SIG_BLOCK, nullptr, &mask);
    if (sigismember(&pending, SIGPIPE)) return "a SIGPIPE is left pending";
    if (sigismember(&mask, SIGPIPE)) return "SIGPIPE is left blocked";
    close(sv[0]);
    return "";
  });
  INFO(v);
  CHECK(v.empty());
  // The portable path with SIGPIPE already blocked by the caller.
  v = in_child([]() -> std::string {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &s, nullptr);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return "socketpair failed";
    close(sv[1]);
    char c = 0;
    ssize_t n = os::portable::send_masked(sv[0], &c, 1);
    if (n >= 0 || errno != EPIPE) return "send_masked: expected EPIPE";
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, nullptr, &mask);
    if (!sigismember(&mask, SIGPIPE)) return "the caller's block was undone";
    return "";
  });
  INFO(v);
  CHECK(v.empty());
}

TEST_CASE("a hang-up is seen without reading") {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  os::Hangup how;
  CHECK(os::wait_hangup(sv, 1, 0, how) == -1);
  CHECK(how == os::Hangup::kNone);
  close(sv[1]);
  CHECK(os::wait_hangup(sv, 1, 1000000000ull, how) == 0);
  CHECK(how == os::Hangup::kClosed);
  close(sv[0]);
}

TEST_CASE("process liveness sees a child exit, zombie or reaped") {
  pid_t c = fork();
  if (c == 0) {
    pause();
    _exit(0);
  }
  const uint64_t start = os::process_start_time(c);
  CHECK(start != 0);
  CHECK(os::process_alive(c, start));
  kill(c, SIGKILL);
  auto t0 = Clock::now();
  while (os::process_alive(c, start) && ms_since(t0) < 2000)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK_FALSE(os::process_alive(c, start));  // a zombie: not reaped yet
  waitpid(c, nullptr, 0);
  CHECK_FALSE(os::process_alive(c, start));
}

TEST_CASE("randomness and the wake handle") {
  uint8_t a[600] = {}, b[600] = {};
  REQUIRE(os::random_bytes(a, sizeof a));
  REQUIRE(os::random_bytes(b, sizeof b));
  CHECK(std::memcmp(a, b, sizeof a) != 0);
  int fds[2];
  REQUIRE(os::wake_open(fds));
  os::wake_signal(fds);
  os::wake_signal(fds);
  // Readable: a pipe (portable) or an eventfd (Linux, 8-byte reads).
  uint64_t buf = 0;
  CHECK(read(fds[0], &buf, sizeof buf) > 0);
  os::wake_close(fds);
  CHECK(fds[0] == -1);
}

#if defined(DS4TP_TEST_FAKE_VERBS)
// Two builds of tests/support/fake_verbs.c: one exports the data-path
// calls as functions (as Apple's librdma may), one does not (rdma-core).
TEST_CASE("the verbs loader reports every library it tries") {
  namespace rdma = ds4tp::rdma;
  std::string why;
  SECTION("DS4TP_VERBS_LIB names the test library") {
    setenv("DS4TP_VERBS_LIB", DS4TP_TEST_FAKE_VERBS, 1);
    const rdma::Verbs *v = rdma::load_verbs(nullptr, why);
    REQUIRE(v != nullptr);
    CHECK(v->path == DS4TP_TEST_FAKE_VERBS);
    CHECK(v->post_send != nullptr);
    CHECK(v->post_recv != nullptr);
    CHECK(v->poll_cq != nullptr);
    rdma::ProbeResult r = rdma::probe(rdma::ProbeRequest{});
    unsetenv("DS4TP_VERBS_LIB");
    CHECK_FALSE(r.usable);
    CHECK_THAT(r.reason, Catch::Contains(DS4TP_TEST_FAKE_VERBS));
  }
  SECTION("a library without exported data-path calls uses the ops table") {
    const rdma::Verbs *v = rdma::load_verbs(DS4TP_TEST_FAKE_VERBS_INLINE, why);
    REQUIRE(v != nullptr);
    CHECK(v->post_send == nullptr);
    CHECK(v->poll_cq == nullptr);
  }
  SECTION("the first name that loads wins; every failure is named") {
    const rdma::Verbs *v =
        rdma::load_first({"/nonexistent/librdma.dylib", DS4TP_TEST_FAKE_VERBS}, why);
    REQUIRE(v != nullptr);
    CHECK(v->path == DS4TP_TEST_FAKE_VERBS);
    v = rdma::load_first({"/nonexistent/librdma.dylib", "libds4tp-no-such-verbs.so.1"}, why);
    CHECK(v == nullptr);
    CHECK_THAT(why, Catch::Contains("/nonexistent/librdma.dylib") &&
                        Catch::Contains("libds4tp-no-such-verbs.so.1"));
  }
  SECTION("this platform's names are tried in order") {
    std::string names;
    for (const char *const *n = os::verbs_library_names(); *n != nullptr; n++)
      names += std::string(*n) + ";";
#if defined(__APPLE__)
    CHECK(names == "/usr/lib/librdma.dylib;librdma.dylib;");
#else
    CHECK(names == "libibverbs.so.1;");
#endif
  }
}
#endif

TEST_CASE("shm: sweep_orphans unlinks the segments of creators that are gone, only those", "[platform]") {
  if (ds4tp::os::shm_dir() == nullptr) {
    WARN("no shm directory to list on this platform: nothing to sweep");
    return;
  }
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  REQUIRE(gone > 0);
  REQUIRE(waitpid(gone, nullptr, 0) == gone);
  const std::string dead = "/ds4tp-tsweep" + std::to_string(gone) + "-beef";
  const std::string live = "/ds4tp-tsweep" + std::to_string(getpid()) + "-cafe";
  for (const auto &n : {dead, live}) {
    const int fd = shm_open(n.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    close(fd);
  }
  CHECK(ds4tp::shm::sweep_orphans("/ds4tp-tsweep") == 1);
  const int d = shm_open(dead.c_str(), O_RDONLY, 0);
  const int l = shm_open(live.c_str(), O_RDONLY, 0);
  CHECK(d < 0);   // its creator exited: swept
  CHECK(l >= 0);  // its creator (this process) runs: kept
  if (d >= 0) close(d);
  if (l >= 0) close(l);
  shm_unlink(dead.c_str());
  shm_unlink(live.c_str());
  // The availability probe every shm pair makes sweeps the probes of
  // processes killed between creating and unlinking theirs.
  const std::string probe = "/ds4tp-p" + std::to_string(gone) + "-beef";
  const int fd = shm_open(probe.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  close(fd);
  std::string why;
  CHECK(ds4tp::shm::usable(0, why));
  INFO(why);
  const int p = shm_open(probe.c_str(), O_RDONLY, 0);
  CHECK(p < 0);
  if (p >= 0) close(p);
  shm_unlink(probe.c_str());
}
