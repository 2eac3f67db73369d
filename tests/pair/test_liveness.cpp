// Waits judged by the peer's liveness (docs/RELIABILITY.md, "Liveness"):
// a live peer that is late is waited for with the default options; a
// stopped one (SIGSTOP) fails the survivor within peer_silence_ms plus
// slack with a named error; a killed one at once; a live peer that never
// reaches a gate fails at peer_arrival_timeout_ms with a message naming
// its last completed gate. Both ranks are children; this process times
// the survivor against the fault.
//
// DS4TP_LIVENESS_TRIALS sets the trials of the stop and kill cases
// (default 1); each prints a "liveness-summary:" line with the median
// and worst detection time, which docs/RELIABILITY.md reports.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <signal.h>
#include <unistd.h>

#include "support/procs.hpp"
#include "support/ranks.hpp"

using namespace ds4tp::test;

namespace {

constexpr int kSilenceMs = 1000;  // the default peer_silence_ms
constexpr int kSlackMs = 1500;    // scheduling (sanitizer builds, 2 shared cores)
constexpr uint64_t kBigBytes = 1u << 20;

int trials() {
  const char *e = std::getenv("DS4TP_LIVENESS_TRIALS");
  int n = e ? std::atoi(e) : 0;
  return n > 0 ? n : 1;
}

// The library's defaults, but on loopback with a fixed transport.
ds4tp_options defaults(int role, int transport, int port) {
  ds4tp_options o;
  ds4tp_options_init(&o);
  o.role = role;
  o.transport = transport;
  if (role == DS4TP_ROLE_LEADER)
    o.listen_port = port;
  else
    o.leader_port = port;
  o.log_level = DS4TP_LOG_ERROR;
  return o;
}

ds4tp_identity identity() { return small_identity(4, 256); }

enum class Wait { Gate, Batch, Big, Reply };

const char *wait_name(Wait w) {
  switch (w) {
    case Wait::Gate: return "row gate";
    case Wait::Batch: return "batch gate";
    case Wait::Big: return "big gate";
    case Wait::Reply: return "control reply";
  }
  return "?";
}

// The leader: pairs, reports READY(1), then enters the wait `w` (the
// worker never does) and reports its result.
int leader_body(int fd, int transport, Wait w, int arrival_ms) {
  ds4tp_options o = defaults(DS4TP_ROLE_LEADER, transport, 0);
  if (arrival_ms > 0) {
    o.peer_arrival_timeout_ms = arrival_ms;
    o.frame_timeout_ms = 500;  // below the arrival limit, which then rules
  }
  ds4tp_identity id = identity();
  ds4tp_pair *tp = nullptr;
  CHILD_EXPECT_OK(ds4tp_new(&tp, &o, &id), nullptr);
  send_report(fd, kReportPort, ds4tp_listen_port(tp));
  CHILD_EXPECT_OK(connect_attach(tp), tp);
  // One gate both ranks complete: the worker's heartbeats then name it.
  CHILD_EXPECT_OK(ds4tp_gate_exchange(tp, 0, 0, 1), tp);
  send_report(fd, kReportReady, 1);
  std::vector<uint8_t> out(kBigBytes), in(kBigBytes);
  int rc;
  if (w == Wait::Gate) {
    rc = ds4tp_gate_exchange(tp, 0, 1, 2);
  } else if (w == Wait::Batch) {
    rc = ds4tp_batch_gate_exchange(tp, 0, 2, 1);
  } else if (w == Wait::Big) {
    rc = ds4tp_big_gate_exchange(tp, 0, 1, out.data(), in.data(), kBigBytes);
  } else {
    uint8_t mine[8] = {1}, peer[8] = {};
    rc = ds4tp_small_exchange(tp, mine, peer, sizeof mine);
  }
  send_report(fd, kReportResult, 0, rc, tp);
  ds4tp_free(tp);
  return 0;
}

// The worker: pairs, completes the first gate, reports READY(1), then
// stays away from the leader's next wait for `away_ms` (alive).
int worker_body(int fd, int port, int transport, int away_ms) {
  ds4tp_options o = defaults(DS4TP_ROLE_WORKER, transport, port);
  ds4tp_identity id = identity();
  ds4tp_pair *tp = nullptr;
  CHILD_EXPECT_OK(ds4tp_new(&tp, &o, &id), nullptr);
  CHILD_EXPECT_OK(connect_attach(tp), tp);
  CHILD_EXPECT_OK(ds4tp_gate_exchange(tp, 0, 0, 1), tp);
  send_report(fd, kReportReady, 1);
  usleep(useconds_t(away_ms) * 1000);
  ds4tp_free(tp);
  return 0;
}

struct Ranks {
  Child leader, worker;
};

bool spawn(Ranks &r, int transport, Wait w, int arrival_ms, int away_ms) {
  r.leader = Child::spawn([=](int fd) { return leader_body(fd, transport, w, arrival_ms); },
                          "leader");
  Report port;
  if (!r.leader.next_of(kReportPort, port, 5000)) return false;
  int p = int(port.value);
  r.worker = Child::spawn([=](int fd) { return worker_body(fd, p, transport, away_ms); },
                          "worker");
  Report a, b;
  return r.leader.next_of(kReportReady, a, 10000) && r.worker.next_of(kReportReady, b, 10000);
}

struct Times {
  std::vector<double> ms;
  void add(double v) { ms.push_back(v); }
  double median() {
    std::sort(ms.begin(), ms.end());
    return ms.empty() ? 0 : ms[ms.size() / 2];
  }
  double worst() { return ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end()); }
};

// tcp, shm, and rdma through the test verbs provider when it is built
// (its environment is set here, before any rank is forked).
std::vector<int> transports() {
  std::vector<int> t;
  for (int x : local_transports())
    if (x == DS4TP_TRANSPORT_TCP || x == DS4TP_TRANSPORT_SHM) t.push_back(x);
#ifdef DS4TP_TEST_VERBS_PROVIDER
  setenv("DS4TP_VERBS_LIB", DS4TP_TEST_VERBS_PROVIDER, 1);
  setenv("DS4TP_VERBS_PROVIDER_PROFILE", "rc", 1);
  t.push_back(DS4TP_TRANSPORT_RDMA);
#endif
  return t;
}

}  // namespace

TEST_CASE("a live worker late to a row gate (3 s) and a big gate (15 s): default options wait") {
  int transport = GENERATE(from_range(transports()));
  INFO(ds4tp_transport_name(transport));
  RankSetup s;
  s.transport = transport;
  s.gate_timeout_ms = 750;  // the default
  auto lib_defaults = [](ds4tp_options &o) {
    ds4tp_options d;
    ds4tp_options_init(&d);
    o.peer_arrival_timeout_ms = d.peer_arrival_timeout_ms;
    o.big_gate_timeout_ms = d.big_gate_timeout_ms;
  };
  s.leader_tweak = lib_defaults;
  s.worker_tweak = lib_defaults;
  auto body = [](int late_row_ms, int late_big_ms) {
    return [=](ds4tp_pair *tp, Ctx &) -> int {
      CHILD_EXPECT_OK(connect_attach(tp), tp);
      usleep(useconds_t(late_row_ms) * 1000);
      CHILD_EXPECT_OK(ds4tp_gate_exchange(tp, 0, 0, 1), tp);
      usleep(useconds_t(late_big_ms) * 1000);
      std::vector<uint8_t> out(kBigBytes, 7), in(kBigBytes);
      CHILD_EXPECT_OK(ds4tp_big_gate_exchange(tp, 0, 1, out.data(), in.data(), kBigBytes), tp);
      return 0;
    };
  };
  auto t0 = Clock::now();
  Outcome o = run_pair(s, body(0, 0), body(3000, 15000), 60000);
  REQUIRE_RANKS_OK(o);
  CHECK(ms_since(t0) >= 18000);
}

TEST_CASE("a stopped worker (SIGSTOP) fails the leader's wait within peer_silence_ms") {
  int transport = GENERATE(from_range(transports()));
  Wait w = GENERATE(Wait::Gate, Wait::Batch, Wait::Big, Wait::Reply);
  INFO(ds4tp_transport_name(transport) << " " << wait_name(w));
  Times t;
  for (int i = 0; i < trials(); i++) {
    Ranks r;
    REQUIRE(spawn(r, transport, w, 0, 60000));
    usleep(200000);  // the leader is inside its wait
    uint64_t fault = mono_ns();
    r.worker.signal(SIGSTOP);
    Report res;
    REQUIRE(r.leader.next_of(kReportResult, res, kSilenceMs + kSlackMs + 3000));
    double ms = (double(res.t_ns) - double(fault)) / 1e6;
    INFO(res.msg);
    CHECK(res.rc == DS4TP_ETIMEDOUT);
    CHECK(res.failed);
    CHECK(std::strstr(res.msg, "silent") != nullptr);
    CHECK(ms <= kSilenceMs + kSlackMs);
    t.add(ms);
    bool hung = false;
    r.leader.reap(3000, &hung);
    CHECK_FALSE(hung);
    r.worker.signal(SIGKILL);
    r.worker.reap(2000);
  }
  std::printf("liveness-summary: SIGSTOP during %s over %s: %zu trials, median %.0f ms, worst "
              "%.0f ms\n",
              wait_name(w), ds4tp_transport_name(transport), t.ms.size(), t.median(), t.worst());
}

TEST_CASE("a killed worker (SIGKILL) ends the leader's wait at once") {
  int transport = GENERATE(from_range(transports()));
  Wait w = GENERATE(Wait::Gate, Wait::Reply);
  INFO(ds4tp_transport_name(transport) << " " << wait_name(w));
  Times t;
  for (int i = 0; i < trials(); i++) {
    Ranks r;
    REQUIRE(spawn(r, transport, w, 0, 60000));
    usleep(200000);
    uint64_t fault = mono_ns();
    r.worker.signal(SIGKILL);
    Report res;
    REQUIRE(r.leader.next_of(kReportResult, res, 5000));
    double ms = (double(res.t_ns) - double(fault)) / 1e6;
    INFO(res.msg);
    CHECK(res.rc != DS4TP_OK);
    CHECK(res.rc != DS4TP_ETIMEDOUT);
    CHECK(res.failed);
    CHECK(ms <= 500);
    t.add(ms);
    r.leader.reap(3000);
    r.worker.reap(2000);
  }
  std::printf("liveness-summary: SIGKILL during %s over %s: %zu trials, median %.1f ms, worst "
              "%.1f ms\n",
              wait_name(w), ds4tp_transport_name(transport), t.ms.size(), t.median(), t.worst());
}

TEST_CASE("a live worker that never reaches the gate fails at the arrival deadline") {
  int transport = GENERATE(from_range(transports()));
  Wait w = GENERATE(Wait::Gate, Wait::Reply);
  INFO(ds4tp_transport_name(transport) << " " << wait_name(w));
  constexpr int kArrivalMs = 2500;
  Ranks r;
  REQUIRE(spawn(r, transport, w, kArrivalMs, 30000));
  Report res;
  auto t0 = Clock::now();
  REQUIRE(r.leader.next_of(kReportResult, res, kArrivalMs + kSlackMs + 3000));
  double ms = ms_since(t0);
  INFO(res.msg);
  CHECK(res.rc == DS4TP_ETIMEDOUT);
  CHECK(std::strstr(res.msg, "the worker is alive") != nullptr);
  CHECK(std::strstr(res.msg, w == Wait::Gate ? "never reached" : "sent nothing") != nullptr);
  CHECK(std::strstr(res.msg, "layer 0 seq 1") != nullptr);
  CHECK(ms >= kArrivalMs - 300);
  // A pair with a standby link (rdma, shm) then offers the peer failover
  // for one gate deadline (750 ms): the peer may be in the gate, its
  // primary as lost as this rank's.
  const int offer = transport == DS4TP_TRANSPORT_TCP || w == Wait::Reply ? 0 : 750;
  CHECK(ms <= kArrivalMs + offer + kSlackMs);
  r.leader.reap(3000);
  r.worker.signal(SIGKILL);
  r.worker.reap(2000);
}

TEST_CASE("a live worker answering a control call after frame_timeout_ms is waited for") {
  // The reply wait is judged like a gate: frame_timeout_ms (here 500 ms)
  // bounds a frame once it started; a live peer may answer up to
  // peer_arrival_timeout_ms (the default) late.
  RankSetup s;
  s.transport = DS4TP_TRANSPORT_TCP;
  auto fast_frames = [](ds4tp_options &o) {
    ds4tp_options d;
    ds4tp_options_init(&d);
    o.peer_arrival_timeout_ms = d.peer_arrival_timeout_ms;
    o.frame_timeout_ms = 500;
  };
  s.leader_tweak = fast_frames;
  s.worker_tweak = fast_frames;
  auto body = [](int late_ms) {
    return [=](ds4tp_pair *tp, Ctx &) -> int {
      CHILD_EXPECT_OK(connect_attach(tp), tp);
      usleep(useconds_t(late_ms) * 1000);
      uint8_t mine[8] = {1, 2, 3}, peer[8] = {};
      CHILD_EXPECT_OK(ds4tp_small_exchange(tp, mine, peer, sizeof mine), tp);
      CHILD_EXPECT(peer[2] == 3, tp, "small exchange delivered %d, not 3", peer[2]);
      return 0;
    };
  };
  auto t0 = Clock::now();
  Outcome o = run_pair(s, body(0), body(3000), 30000);
  REQUIRE_RANKS_OK(o);
  CHECK(ms_since(t0) >= 3000);
}
