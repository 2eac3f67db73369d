// Fault suite: ranks killed (SIGKILL) or stopped (SIGSTOP) at random points,
// and a fault-injecting proxy between the ranks (delay, slicing, stall,
// reset, blackhole). Both ranks are child processes; this process only
// injects the fault and times the survivor against it. Each case prints a
// "fault-summary:" line (trials, outcomes, codes, worst latency) that
// docs/RELIABILITY.md reports.
//
// DS4TP_FAULT_TRIALS sets the trials per point (default 4; CI uses the
// default, longer local runs more).
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/fault_proxy.hpp"
#include "support/procs.hpp"
#include "support/ranks.hpp"

using namespace ds4tp::test;

namespace {

// Slack on top of a deadline for scheduling (sanitizer builds, 2 cores).
constexpr int kGraceMs = 1500;
constexpr int kConnectMs = 1500, kGateMs = 1000, kBigMs = 2000;
const char kKey[] = "fault-suite-key-0123456789abcdef";

int trials() {
  const char *e = std::getenv("DS4TP_FAULT_TRIALS");
  int n = e ? std::atoi(e) : 0;
  return n > 0 ? n : 4;
}

std::mt19937_64 &rng() {
  static std::mt19937_64 r{mono_ns()};
  return r;
}
uint64_t uniform(uint64_t lo, uint64_t hi) {  // [lo, hi]
  return std::uniform_int_distribution<uint64_t>(lo, hi)(rng());
}

enum class Work { Gates, Batch, Big, Frames, Mixed };

struct RankPlan {
  int role = DS4TP_ROLE_LEADER;
  int port = 0;  // worker: where to dial
  bool keyed = false;
  Work work = Work::Gates;
  int mixed_runs = 0;  // Mixed: rounds to run then report success (0 = forever)
  uint32_t big_bytes = 1u << 20;
};

// What a rank does: connect, attach, report READY, then exchange until a
// call fails (reported with its time) or, for a finite plan, until done.
// Payloads are checked bit for bit in the Mixed plan.
int rank_main(int fd, const RankPlan &p) {
  ds4tp_options o = rank_options(p.role, p.port);
  o.connect_timeout_ms = kConnectMs;
  o.hello_timeout_ms = 700;
  o.gate_timeout_ms = kGateMs;
  o.big_gate_timeout_ms = kBigMs;
  o.frame_timeout_ms = kGateMs;
  if (p.keyed) {
    o.psk = kKey;
    o.psk_bytes = sizeof kKey - 1;
  }
  ds4tp_identity id = small_identity(4, 256);
  ds4tp_pair *tp = nullptr;
  int rc = ds4tp_new(&tp, &o, &id);
  if (rc) send_report(fd, kReportResult, 0, rc);
  CHILD_EXPECT_OK(rc, nullptr, "ds4tp_new");
  if (p.role == DS4TP_ROLE_LEADER) send_report(fd, kReportPort, ds4tp_listen_port(tp));
  rc = ds4tp_connect(tp);
  if (rc == 0) rc = ds4tp_attach_slab(tp, nullptr, 0);
  if (rc) {
    send_report(fd, kReportResult, 1, rc, tp);
    ds4tp_free(tp);
    return 0;
  }
  send_report(fd, kReportReady, 1);
  const int rank = ds4tp_rank(tp);
  auto *slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
  ds4tp_slab_layout l{};
  l.size = sizeof l;
  ds4tp_slab_layout_get(tp, &l);
  const uint64_t floats = l.vec_bytes / 4;
  std::vector<uint32_t> big_out(p.big_bytes / 4), big_in(p.big_bytes / 4);
  uint64_t seq = 0, bseq = 0, gseq = 0;
  auto row = [&](bool check) -> int {
    seq++;
    uint32_t slot = uint32_t((seq - 1) % l.slots), layer = slot / 2, gate = slot % 2;
    auto *out = reinterpret_cast<float *>(slab + ds4tp_slab_out_offset(tp, layer, gate));
    auto *in = reinterpret_cast<float *>(slab + ds4tp_slab_in_offset(tp, layer, gate));
    if (check)
      for (uint64_t i = 0; i < floats; i++) out[i] = pattern(rank, seq, i);
    int r = ds4tp_gate_exchange(tp, layer, gate, seq);
    if (r == 0 && check)
      for (uint64_t i = 0; i < floats; i++) {
        float w = pattern(1 - rank, seq, i);
        CHILD_EXPECT(std::memcmp(&in[i], &w, 4) == 0, tp, "gate seq %llu float %llu",
                     (unsigned long long)seq, (unsigned long long)i);
      }
    return r;
  };
  auto batch = [&](bool check) -> int {
    bseq++;
    uint32_t index = uint32_t(bseq % l.batch_gates), rows = uint32_t(1 + bseq % 8);
    uint8_t *bout = slab + ds4tp_slab_batch_out_offset(tp, index);
    uint8_t *bin = slab + ds4tp_slab_batch_in_offset(tp, index);
    if (check)
      for (uint32_t r = 0; r < rows; r++)
        for (uint64_t i = 0; i < floats; i++)
          reinterpret_cast<float *>(bout + r * l.vec_stride)[i] = pattern(rank, bseq, r * floats + i);
    int rc2 = ds4tp_batch_gate_exchange(tp, index, rows, bseq);
    if (rc2 == 0 && check)
      for (uint32_t r = 0; r < rows; r++)
        for (uint64_t i = 0; i < floats; i++) {
          float w = pattern(1 - rank, bseq, r * floats + i);
          CHILD_EXPECT(
              std::memcmp(reinterpret_cast<float *>(bin + r * l.vec_stride) + i, &w, 4) == 0, tp,
              "batch seq %llu row %u float %llu", (unsigned long long)bseq, r,
              (unsigned long long)i);
        }
    return rc2;
  };
  auto big = [&](bool check) -> int {
    gseq++;
    if (check)
      for (size_t i = 0; i < big_out.size(); i++)
        big_out[i] = uint32_t(i * 2654435761u) ^ uint32_t(gseq << 8) ^ uint32_t(rank);
    int r = ds4tp_big_gate_exchange(tp, 1, gseq, big_out.data(), big_in.data(),
                                    big_out.size() * 4);
    if (r == 0 && check)
      for (size_t i = 0; i < big_in.size(); i++)
        CHILD_EXPECT(
            big_in[i] == (uint32_t(i * 2654435761u) ^ uint32_t(gseq << 8) ^ uint32_t(1 - rank)), tp,
            "big gate seq %llu word %zu", (unsigned long long)gseq, i);
    return r;
  };
  uint64_t fseq = 0;
  auto frame = [&](bool check) -> int {  // a control frame each way
    fseq++;
    uint8_t mine[192], theirs[192] = {};
    for (int i = 0; i < 192; i++) mine[i] = uint8_t(fseq * 31 + uint64_t(i) * 7 + uint64_t(rank));
    int r = ds4tp_small_exchange(tp, mine, theirs, sizeof mine);
    if (r == 0 && check)
      for (int i = 0; i < 192; i++)
        CHILD_EXPECT(theirs[i] == uint8_t(fseq * 31 + uint64_t(i) * 7 + uint64_t(1 - rank)), tp,
                     "frame %llu byte %d", (unsigned long long)fseq, i);
    return r;
  };
  for (int round = 0;; round++) {
    if (p.work == Work::Mixed && p.mixed_runs > 0 && round == p.mixed_runs) {
      send_report(fd, kReportResult, 0, 0, tp);
      break;
    }
    switch (p.work) {
      case Work::Gates: rc = row(false); break;
      case Work::Batch: rc = batch(false); break;
      case Work::Big: rc = big(false); break;
      case Work::Frames: rc = frame(false); break;
      case Work::Mixed:
        for (int g = 0; g < 2 && rc == 0; g++) rc = frame(true);
        for (int g = 0; g < 8 && rc == 0; g++) rc = row(true);
        for (int g = 0; g < 2 && rc == 0; g++) rc = batch(true);
        if (rc == 0) rc = big(true);
        break;
    }
    if (rc) {
      send_report(fd, kReportResult, 2, rc, tp);
      break;
    }
  }
  ds4tp_free(tp);
  return 0;
}

// Outcomes of one fault point over many trials.
struct Tally {
  std::string name;
  int trials = 0, named = 0, late = 0, hang = 0, crash = 0, wrong = 0;
  int in_bringup = 0;  // survivor's error came from ds4tp_connect
  double worst_ms = 0;
  std::map<std::string, int> codes;
  std::map<std::string, std::string> sample;  // one message per code
  std::vector<std::string> notes;

  // Classifies the survivor's report against `fault_ns` and `deadline_ms`.
  void add(bool got, const Report &r, uint64_t fault_ns, int deadline_ms, int status,
           bool hung) {
    trials++;
    if (hung) {
      hang++;
      notes.push_back("hang");
      return;
    }
    if (!got) {
      crash++;
      notes.push_back(WIFSIGNALED(status) ? fmt_signal(WTERMSIG(status)) : "no report");
      return;
    }
    codes[ds4tp_err_name(r.rc)]++;
    sample.emplace(ds4tp_err_name(r.rc), r.msg);
    if (r.value == 1) in_bringup++;
    double ms = r.t_ns > fault_ns ? double(r.t_ns - fault_ns) / 1e6 : 0.0;
    if (ms > worst_ms) worst_ms = ms;
    bool is_named = r.rc < 0 && std::string(ds4tp_err_name(r.rc)) != "DS4TP_UNKNOWN";
    if (!is_named) {
      wrong++;
      notes.push_back(std::string("rc ") + std::to_string(r.rc) + ": " + r.msg);
    } else if (ms > deadline_ms + kGraceMs) {
      late++;
      notes.push_back(std::to_string(int(ms)) + " ms: " + r.msg);
    } else {
      named++;
    }
  }
  // A survivor's failed payload checks (CHILD_EXPECT) go with the notes.
  void note_failures(const Child &c) {
    if (!c.failures().empty()) notes.push_back(c.failures());
  }
  static std::string fmt_signal(int s) { return std::string("signal ") + strsignal(s); }
  void print() const {
    std::string c;
    for (auto &[k, v] : codes) c += (c.empty() ? "" : ",") + k + "=" + std::to_string(v);
    std::printf("fault-summary: %s | trials %d | named-within-deadline %d | late %d | hang %d "
                "| crash %d | not-named %d | codes %s | worst %.1f ms | failed in connect %d\n",
                name.c_str(), trials, named, late, hang, crash, wrong, c.c_str(), worst_ms,
                in_bringup);
    for (auto &[k, v] : sample) std::printf("  e.g. %s: %s\n", k.c_str(), v.c_str());
    for (auto &n : notes) std::printf("  note: %s\n", n.c_str());
    std::fflush(stdout);
  }
  bool clean() const { return trials > 0 && named == trials; }
};

struct Pair2 {
  Child leader, worker;
  int port = 0;
};

// Forks the leader, learns its port, then forks the worker dialing
// `dial_port` (0 = the leader's own port). `before_worker` runs between the
// two (e.g. to bind a proxy on the leader's port).
bool spawn_pair(Pair2 &p, RankPlan lp, RankPlan wp,
                const std::function<int(int)> &before_worker = nullptr) {
  lp.role = DS4TP_ROLE_LEADER;
  p.leader = Child::spawn([lp](int fd) { return rank_main(fd, lp); }, "leader");
  Report r;
  if (!p.leader.next_of(kReportPort, r, 5000)) return false;
  p.port = int(r.value);
  wp.role = DS4TP_ROLE_WORKER;
  wp.port = before_worker ? before_worker(p.port) : p.port;
  p.worker = Child::spawn([wp](int fd) { return rank_main(fd, wp); }, "worker");
  return true;
}

// Waits for the survivor's result, then reaps both children (the victim
// is dead or is killed now).
void settle(Tally &t, Child &survivor, Child &victim, uint64_t fault_ns, int deadline_ms) {
  Report r;
  bool got = survivor.next_of(kReportResult, r, deadline_ms + kGraceMs + 3000);
  bool hung = false;
  if (!got) survivor.signal(SIGKILL);
  int status = survivor.reap(got ? 3000 : 1000, &hung);
  if (!got && !WIFSIGNALED(status)) hung = true;
  if (!got && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) hung = true;
  victim.signal(SIGKILL);
  victim.reap(2000);
  t.add(got, r, fault_ns, deadline_ms, status, hung);
  t.note_failures(survivor);
}

}  // namespace

TEST_CASE("SIGKILL of either rank at a random moment of bring-up") {
  Tally t;
  t.name = "SIGKILL during bring-up (random moment, either rank)";
  for (int i = 0; i < 2 * trials(); i++) {
    bool kill_leader = i % 2 == 1;
    RankPlan lp, wp;
    lp.keyed = wp.keyed = i % 4 >= 2;
    Pair2 p;
    REQUIRE(spawn_pair(p, lp, wp));
    // Bring-up takes a few ms on loopback: kill before, during or just after.
    usleep(useconds_t(uniform(0, 6000)));
    Child &victim = kill_leader ? p.leader : p.worker;
    Child &survivor = kill_leader ? p.worker : p.leader;
    victim.signal(SIGKILL);
    uint64_t fault = mono_ns();
    settle(t, survivor, victim, fault, kConnectMs);
  }
  t.print();
  REQUIRE(t.clean());
}

TEST_CASE("SIGKILL of either rank at a random byte of the hello exchange") {
  Tally t;
  t.name = "SIGKILL mid-hello (random byte, either rank, keyed and not)";
  for (int i = 0; i < 2 * trials(); i++) {
    bool kill_leader = i % 2 == 1;
    bool keyed = i % 4 >= 2;
    RankPlan lp, wp;
    lp.keyed = wp.keyed = keyed;
    Pair2 p;
    std::unique_ptr<FaultProxy> proxy;
    REQUIRE(spawn_pair(p, lp, wp, [&](int port) {
      proxy = std::make_unique<FaultProxy>(port);
      return proxy->port();
    }));
    // Control stream lengths each way: hello 136 bytes (+ nonce 44 and
    // proof 44 when keyed).
    uint64_t len = keyed ? 224 : 136;
    FaultProxy::Trigger tr;
    tr.conn = 0;
    tr.dir = int(uniform(0, 1));
    tr.at = uniform(0, len - 1);
    std::atomic<uint64_t> fault{0};
    pid_t victim_pid = kill_leader ? p.leader.pid() : p.worker.pid();
    tr.action = [&fault, victim_pid] {
      kill(victim_pid, SIGKILL);
      fault.store(mono_ns());
    };
    tr.discard_rest = true;
    proxy->set_trigger(tr);
    proxy->start();
    Child &victim = kill_leader ? p.leader : p.worker;
    Child &survivor = kill_leader ? p.worker : p.leader;
    Report r;
    bool got = survivor.next_of(kReportResult, r, kConnectMs + kGraceMs + 3000);
    proxy->stop();
    uint64_t f = fault.load();
    if (f == 0) {  // not reached (cannot happen unless the hello is shorter)
      victim.signal(SIGKILL);
      f = mono_ns();
    }
    bool hung = false;
    int status = survivor.reap(3000, &hung);
    victim.signal(SIGKILL);
    victim.reap(2000);
    t.add(got, r, f, kConnectMs, status, hung || (!got && !WIFSIGNALED(status)));
    t.note_failures(survivor);
  }
  t.print();
  REQUIRE(t.clean());
}

TEST_CASE("SIGKILL of either rank in the middle of gates, batch gates, big gates, frames") {
  struct Point {
    const char *name;
    Work work;
    int deadline_ms;
    int spread_us;
  };
  Point pt = GENERATE(Point{"SIGKILL during row gates", Work::Gates, kGateMs, 20000},
                      Point{"SIGKILL during batch gates", Work::Batch, kGateMs, 20000},
                      Point{"SIGKILL during big gates (1 MiB)", Work::Big, kBigMs, 50000},
                      Point{"SIGKILL during control frames (192-byte exchanges)", Work::Frames,
                            kGateMs, 20000});
  Tally t;
  t.name = std::string(pt.name) + " (random moment, either rank)";
  for (int i = 0; i < 2 * trials(); i++) {
    bool kill_leader = i % 2 == 1;
    RankPlan lp, wp;
    lp.work = wp.work = pt.work;
    Pair2 p;
    REQUIRE(spawn_pair(p, lp, wp));
    Child &victim = kill_leader ? p.leader : p.worker;
    Child &survivor = kill_leader ? p.worker : p.leader;
    Report r;
    REQUIRE(victim.next_of(kReportReady, r, 5000));
    usleep(useconds_t(uniform(0, uint64_t(pt.spread_us))));
    victim.signal(SIGKILL);
    uint64_t fault = mono_ns();
    settle(t, survivor, victim, fault, pt.deadline_ms);
  }
  t.print();
  REQUIRE(t.clean());
}

TEST_CASE("a stopped peer (SIGSTOP) times a gate out and fails the handle") {
  Work work = GENERATE(Work::Gates, Work::Big);
  Tally t;
  t.name = work == Work::Gates ? "SIGSTOP during row gates" : "SIGSTOP during big gates";
  int timeouts = 0, failed = 0;
  for (int i = 0; i < trials(); i++) {
    bool stop_leader = i % 2 == 1;
    RankPlan lp, wp;
    lp.work = wp.work = work;
    Pair2 p;
    REQUIRE(spawn_pair(p, lp, wp));
    Child &victim = stop_leader ? p.leader : p.worker;
    Child &survivor = stop_leader ? p.worker : p.leader;
    Report r;
    REQUIRE(victim.next_of(kReportReady, r, 5000));
    usleep(useconds_t(uniform(0, 20000)));
    victim.signal(SIGSTOP);
    uint64_t fault = mono_ns();
    Report res;
    bool got = survivor.next_of(kReportResult, res, kBigMs + kGraceMs + 3000);
    if (got && res.rc == DS4TP_ETIMEDOUT) timeouts++;
    if (got && res.failed) failed++;
    bool hung = false;
    int status = survivor.reap(3000, &hung);
    victim.signal(SIGKILL);
    victim.reap(2000);
    // A stall is judged by the gate timeout, even inside a big gate once
    // its bytes flow; big_gate_timeout only covers the first byte.
    t.add(got, res, fault, work == Work::Big ? kBigMs : kGateMs, status, hung);
    t.note_failures(survivor);
  }
  t.print();
  REQUIRE(t.clean());
  REQUIRE(timeouts == t.trials);
  REQUIRE(failed == t.trials);
}

TEST_CASE("delay and slicing by the proxy: everything arrives bit for bit") {
  struct Shape {
    const char *name;
    int delay_ms, slice;
    bool keyed;
  };
  Shape s = GENERATE(Shape{"5 ms delay each way", 5, 0, false},
                     Shape{"1-byte writes", 0, 1, false},
                     Shape{"1-byte writes, keyed bring-up", 0, 1, true},
                     Shape{"odd-sized writes up to 97 bytes, 2 ms delay, keyed", 2, 97, true},
                     Shape{"odd-sized writes up to 4093 bytes", 0, 4093, false});
  INFO(s.name);
  RankPlan lp, wp;
  lp.work = wp.work = Work::Mixed;
  lp.mixed_runs = wp.mixed_runs = 2;
  lp.keyed = wp.keyed = s.keyed;
  // 1-byte writes move a byte per system call: a smaller big gate.
  lp.big_bytes = wp.big_bytes = s.slice == 1 ? 64u << 10 : 1u << 20;
  Pair2 p;
  std::unique_ptr<FaultProxy> proxy;
  REQUIRE(spawn_pair(p, lp, wp, [&](int port) {
    proxy = std::make_unique<FaultProxy>(port);
    return proxy->port();
  }));
  proxy->set_delay_ms(s.delay_ms);
  proxy->set_slice(s.slice);
  proxy->start();
  Report rl, rw;
  bool gl = p.leader.next_of(kReportResult, rl, 60000);
  bool gw = p.worker.next_of(kReportResult, rw, 60000);
  proxy->stop();
  p.leader.reap(3000);
  p.worker.reap(3000);
  std::printf("fault-summary: proxy %s | leader %s | worker %s | %llu bytes to the leader\n",
              s.name, ds4tp_err_name(rl.rc), ds4tp_err_name(rw.rc),
              (unsigned long long)(proxy->forwarded(0, 0) + proxy->forwarded(1, 0)));
  INFO("leader: " << rl.msg << "\n"
                  << p.leader.failures() << "worker: " << rw.msg << "\n"
                  << p.worker.failures());
  REQUIRE(gl);
  REQUIRE(gw);
  REQUIRE(rl.rc == 0);
  REQUIRE(rw.rc == 0);
}

TEST_CASE("stall, reset and blackhole by the proxy end in a named error in time") {
  struct Fault {
    const char *name;
    FaultProxy::Mode mode;
    int conn;  // 0: during the hello, 1: on the data connection
  };
  Fault f = GENERATE(Fault{"stall mid-data", FaultProxy::Mode::Stall, 1},
                     Fault{"reset mid-data", FaultProxy::Mode::Reset, 1},
                     Fault{"blackhole mid-data", FaultProxy::Mode::Blackhole, 1},
                     Fault{"stall mid-hello", FaultProxy::Mode::Stall, 0},
                     Fault{"reset mid-hello", FaultProxy::Mode::Reset, 0},
                     Fault{"blackhole mid-hello", FaultProxy::Mode::Blackhole, 0});
  Tally t;
  t.name = std::string("proxy ") + f.name + " (both ranks judged)";
  for (int i = 0; i < trials(); i++) {
    RankPlan lp, wp;
    lp.work = wp.work = Work::Mixed;
    lp.keyed = wp.keyed = i % 2 == 1;
    Pair2 p;
    std::unique_ptr<FaultProxy> proxy;
    REQUIRE(spawn_pair(p, lp, wp, [&](int port) {
      proxy = std::make_unique<FaultProxy>(port);
      return proxy->port();
    }));
    FaultProxy::Trigger tr;
    tr.conn = f.conn;
    tr.dir = int(uniform(0, 1));
    // Data stream per round: 8 row gates (32 + 1024 bytes each), 2 batch
    // gates, a 1 MiB big gate. Land anywhere in the first two rounds, the
    // row and batch part as often as the big gate.
    uint64_t round = 8 * 1056 + 2 * (32 + 8 * 1024) + 32 + (1u << 20);
    if (f.conn == 0)
      tr.at = uniform(0, lp.keyed ? 223 : 135);
    else if (uniform(0, 1) == 0)
      tr.at = uniform(0, 8 * 1056 + 2 * (32 + 8 * 1024)) + round * uniform(0, 1);
    else
      tr.at = uniform(0, round * 2);
    std::atomic<uint64_t> fault{0};
    tr.action = [&fault] { fault.store(mono_ns()); };
    tr.then = f.mode;
    proxy->set_trigger(tr);
    proxy->start();
    // Both ranks must report a named error; the deadline is the bring-up
    // one in the hello, else the gate or big-gate one.
    int deadline = f.conn == 0 ? kConnectMs : kBigMs;
    Report rl, rw;
    bool gl = p.leader.next_of(kReportResult, rl, deadline + kGraceMs + 4000);
    bool gw = p.worker.next_of(kReportResult, rw, deadline + kGraceMs + 4000);
    proxy->stop();
    uint64_t fl = fault.load() ? fault.load() : mono_ns();
    bool hl = false, hw = false;
    int sl = p.leader.reap(gl ? 3000 : 0, &hl), sw = p.worker.reap(gw ? 3000 : 0, &hw);
    t.add(gl, rl, fl, deadline, sl, hl || !gl);
    t.add(gw, rw, fl, deadline, sw, hw || !gw);
    t.note_failures(p.leader);
    t.note_failures(p.worker);
  }
  t.print();
  REQUIRE(t.clean());
}
