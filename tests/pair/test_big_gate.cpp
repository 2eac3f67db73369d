// Big gates over tcp in alternating rounds (lib/link/tcp/big_exchange):
// the round plan, the loopback rule, bytes both ways bit for bit at sizes
// around the round, a desync and a peer that dies mid-alternation.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support/ranks.hpp"
#include "multipath/rail_share.hpp"
#include "link/tcp/big_exchange.hpp"
#include "link/tcp/rails.hpp"
#include "link/tcp/striped.hpp"
#include "wire/gate_header.hpp"

using namespace ds4tp::test;
namespace tcp = ds4tp::tcp;

namespace {

constexpr uint64_t kR = tcp::kBigRoundBytes;
constexpr uint64_t kHdr = ds4tp::wire::kGateHeaderBytes;

// Sets DS4TP_BIG_GATE for this process (and the worker it forks) and puts
// the old value back.
struct BigGateEnv {
  std::string old;
  bool had;
  explicit BigGateEnv(const char *v) {
    const char *o = std::getenv("DS4TP_BIG_GATE");
    had = o != nullptr;
    if (had) old = o;
    setenv("DS4TP_BIG_GATE", v, 1);
  }
  ~BigGateEnv() {
    if (had) setenv("DS4TP_BIG_GATE", old.c_str(), 1);
    else unsetenv("DS4TP_BIG_GATE");
  }
};

uint8_t byte_of(int rank, uint64_t seq, uint64_t i) {
  return uint8_t((i * 131 + seq * 7) ^ (i >> 11) ^ uint64_t(rank * 0x5b));
}

// Big gates of each size in `sizes` (seq 1, 2, ...), every byte checked.
int gates_of(ds4tp_pair *tp, const std::vector<uint64_t> &sizes) {
  int rank = ds4tp_rank(tp);
  uint64_t seq = 0;
  for (uint64_t n : sizes) {
    seq++;
    std::vector<uint8_t> out(n + 1), in(n + 1, 0xee);  // +1: a guard byte, and never empty
    for (uint64_t i = 0; i < n; i++) out[i] = byte_of(rank, seq, i);
    CHILD_EXPECT_OK(ds4tp_big_gate_exchange(tp, 3, seq, out.data(), in.data(), n), tp);
    for (uint64_t i = 0; i < n; i++)
      CHILD_EXPECT(in[i] == byte_of(1 - rank, seq, i), tp, "%llu bytes: byte %llu",
                   (unsigned long long)n, (unsigned long long)i);
    CHILD_EXPECT(in[n] == 0xee, tp, "%llu bytes: wrote past the end", (unsigned long long)n);
  }
  return 0;
}

const std::vector<uint64_t> kSizes = {0,          1,          3,           kR - kHdr - 1,
                                      kR - kHdr,  kR - kHdr + 1, kR,        kR + 7,
                                      3 * kR - 5, 5 * kR + 13, 8ull << 20};

}  // namespace

TEST_CASE("alternating rounds: each rank sends only what the round plan allows") {
  tcp::BigPlan lead, work;
  lead.mode = work.mode = tcp::BigMode::Alternate;
  lead.sends_first = true;
  const uint64_t total = kHdr + 5 * kR + 13;  // six rounds, the last short
  // The leader opens; the worker sends its header at once, then waits.
  CHECK(tcp::send_limit(lead, 0, total) == kR);
  CHECK(tcp::send_limit(work, 0, total) == kHdr);
  CHECK(tcp::send_limit(work, kR - 1, total) == kHdr);
  CHECK(tcp::send_limit(work, kR, total) == kR);
  CHECK(tcp::send_limit(lead, kR - 1, total) == kR);
  CHECK(tcp::send_limit(lead, kR, total) == 2 * kR);
  // The last round is short: whoever holds all of the peer's may finish.
  CHECK(tcp::send_limit(work, 5 * kR, total) == 5 * kR);
  CHECK(tcp::send_limit(work, total, total) == total);
  CHECK(tcp::send_limit(lead, 5 * kR, total) == total);
  // A gate smaller than a round: the leader sends it all, the worker after.
  CHECK(tcp::send_limit(lead, 0, kHdr + 1) == kHdr + 1);
  CHECK(tcp::send_limit(work, 0, kHdr + 1) == kHdr);
  CHECK(tcp::send_limit(work, kHdr + 1, kHdr + 1) == kHdr + 1);
  tcp::BigPlan duplex;
  CHECK(tcp::send_limit(duplex, 0, total) == total);
}

TEST_CASE("the big-gate rule: alternate over loopback, full duplex otherwise, env forces") {
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(l >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  REQUIRE(bind(l, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0);
  REQUIRE(listen(l, 1) == 0);
  REQUIRE(getsockname(l, reinterpret_cast<sockaddr *>(&a), &al) == 0);
  int c = loopback_connect(ntohs(a.sin_port));
  REQUIRE(c >= 0);
  CHECK(tcp::over_loopback(c));
  int sp[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
  CHECK_FALSE(tcp::over_loopback(sp[0]));  // not IP: no loopback route to speak of

  const char *bad = nullptr;
  {
    BigGateEnv e("auto");
    CHECK(tcp::choose_big_plan(c, 0, bad).mode == tcp::BigMode::Alternate);
    CHECK(tcp::choose_big_plan(sp[0], 0, bad).mode == tcp::BigMode::Duplex);
    CHECK(bad == nullptr);
  }
  {
    BigGateEnv e("duplex");
    CHECK(tcp::choose_big_plan(c, 0, bad).mode == tcp::BigMode::Duplex);
  }
  {
    BigGateEnv e("alternate");
    tcp::BigPlan p = tcp::choose_big_plan(sp[0], 1, bad);
    CHECK(p.mode == tcp::BigMode::Alternate);
    CHECK_FALSE(p.sends_first);
    CHECK(tcp::choose_big_plan(sp[0], 0, bad).sends_first);
  }
  {
    BigGateEnv e("fastest");
    CHECK(tcp::choose_big_plan(c, 0, bad).mode == tcp::BigMode::Alternate);
    REQUIRE(bad != nullptr);
    CHECK(std::string(bad) == "fastest");
  }
  close(c);
  close(l);
  close(sp[0]);
  close(sp[1]);
}

TEST_CASE("alternating big gates move every byte both ways at sizes around the round") {
  // duplex on one rank and alternate on the other must meet too.
  const char *worker_mode = GENERATE("alternate", "duplex");
  BigGateEnv e("alternate");
  RankSetup s;
  s.transport = DS4TP_TRANSPORT_TCP;
  auto leader = [](ds4tp_pair *tp, Ctx &) -> int {
    int rc = connect_attach(tp);
    return rc ? rc : gates_of(tp, kSizes);
  };
  auto worker = [worker_mode](ds4tp_pair *tp, Ctx &) -> int {
    setenv("DS4TP_BIG_GATE", worker_mode, 1);  // the forked worker's own environment
    int rc = connect_attach(tp);
    return rc ? rc : gates_of(tp, kSizes);
  };
  INFO("worker DS4TP_BIG_GATE=" << worker_mode);
  Outcome o = run_pair(s, leader, worker);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("alternating big gates at different seqs report a desync on both ranks") {
  BigGateEnv e("alternate");
  RankSetup s;
  s.transport = DS4TP_TRANSPORT_TCP;
  auto body = [](ds4tp_pair *tp, Ctx &c) -> int {
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    std::vector<uint8_t> out(3 * kR, 1), in(3 * kR);
    CHILD_EXPECT_RC(ds4tp_big_gate_exchange(tp, 1, c.rank == 0 ? 7 : 8, out.data(), in.data(),
                                            out.size()),
                    DS4TP_EDESYNC, tp);
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("a worker killed mid-alternation: the leader's big gate fails at once, named") {
  BigGateEnv e("alternate");
  RankSetup s;
  s.transport = DS4TP_TRANSPORT_TCP;
  s.gate_timeout_ms = 5000;
  constexpr uint64_t kBytes = 128ull << 20;  // long enough to be killed inside it
  auto worker = [](ds4tp_pair *tp, Ctx &) -> int {
    std::vector<uint8_t> out(kBytes, 2), in(kBytes, 0);  // faulted in before the gate
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    ds4tp_big_gate_exchange(tp, 2, 1, out.data(), in.data(), kBytes);
    return 0;
  };
  auto leader = [](ds4tp_pair *tp, Ctx &c) -> int {
    std::vector<uint8_t> out(kBytes, 1), in(kBytes, 0);
    CHILD_EXPECT_OK(connect_attach(tp), tp);
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      kill(c.worker_pid, SIGKILL);
    });
    auto t0 = Clock::now();
    int rc = ds4tp_big_gate_exchange(tp, 2, 1, out.data(), in.data(), kBytes);
    double took = ms_since(t0);
    killer.join();
    std::string m = ds4tp_errmsg(tp);
    CHILD_EXPECT_RC(rc, DS4TP_EPEERCLOSED, tp);
    // The data path or the liveness watcher, whichever sees the kill first
    // (the watcher did once under ASan): either names the cause.
    CHILD_EXPECT(m.find("alternating rounds") != std::string::npos ||
                     m.find("the worker closed the control connection") != std::string::npos,
                 tp, "message: %s", m.c_str());
    CHILD_EXPECT(took <= 2500, tp, "took %.0f ms", took);  // the close, not the 5 s deadline
    CHILD_EXPECT(ds4tp_failed(tp), tp);
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  INFO(o.describe());
  REQUIRE(o.leader == 0);
  REQUIRE(o.worker_signal == SIGKILL);
}

TEST_CASE("rails: shares follow the measured rates and a big gate's ranges cover it exactly") {
  const uint32_t mbit[3] = {400, 200, 1};
  const uint64_t rtt[3] = {90000, 60000, 70000};
  ds4tp::wire::RailPlan plan;
  ds4tp::share_rails(mbit, rtt, 3, plan);
  CHECK(plan.links == 3);
  CHECK(plan.row_link == 1);  // the least latency
  CHECK(plan.share[0] + plan.share[1] + plan.share[2] == 1000);
  CHECK(plan.share[0] > plan.share[1]);
  CHECK(plan.share[2] >= 1);  // a link that barely moves still gets its own share
  for (uint64_t bytes : {uint64_t(1) << 20, (uint64_t(16) << 20) + 12345, uint64_t(3) << 30}) {
    INFO(bytes);
    uint64_t next = 0;
    for (int k = 0; k < plan.links; k++) {
      uint64_t off = 0, len = 0;
      ds4tp::stripe_range(plan, bytes, k, off, len);
      CHECK(off == next);
      if (k < plan.links - 1) CHECK(len % 4096 == 0);
      next = off + len;
    }
    CHECK(next == bytes);
  }
}

TEST_CASE("rails: after the last link is dropped its share and the remainder go to the others") {
  // What drop_link leaves (striped.cpp): link 2's share moved to link 0.
  ds4tp::wire::RailPlan plan;
  plan.links = 3;
  plan.share[0] = 700;
  plan.share[1] = 300;
  plan.share[2] = 0;
  for (uint64_t bytes :
       {uint64_t(1) << 20, (uint64_t(1) << 20) + 4095, (uint64_t(16) << 20) + 12345}) {
    INFO(bytes);
    uint64_t next = 0;
    for (int k = 0; k < plan.links; k++) {
      uint64_t off = 0, len = 0;
      ds4tp::stripe_range(plan, bytes, k, off, len);
      INFO("link " << k << " offset " << off << " length " << len);
      CHECK(off == next);
      if (k == 2) CHECK(len == 0);  // the dropped link carries nothing
      next = off + len;
    }
    CHECK(next == bytes);  // every byte on a live link
  }
}

TEST_CASE("rails on one rank only fail bring-up on both, naming which rank has them") {
  RankSetup s;
  s.transport = DS4TP_TRANSPORT_TCP;
  s.leader_tweak = [](ds4tp_options &o) { o.rails = "127.0.0.2"; };
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    CHILD_EXPECT_RC(ds4tp_connect(tp), DS4TP_EINVAL, tp);
    CHILD_EXPECT(std::strstr(ds4tp_errmsg(tp), "rails: the leader lists rails, the worker none") !=
                     nullptr,
                 tp);
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}
