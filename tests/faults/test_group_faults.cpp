// Group fault matrix: N = 2, 3, 4 rank processes over shm, tcp, and
// ranks on two claimed hosts (tiered: shm within a host, tcp across); a
// random rank is SIGKILLed or SIGSTOPped at a random moment of bring-up,
// of each algorithm's steps (one-shot, two-shot, home, chunked, half the
// chunked trials around the ring on the meshes, all-gather, broadcast and
// barrier, reduce-scatter, gather, scatter, the uneven all-gather and
// all-to-all, split-phase requests) or between calls. Every surviving rank must end with a
// named error within its deadline; every result it returned before must
// have the right bits; and no rank may go on past the next call after a
// failure elsewhere (the survivors' failing calls differ by one at most).
// A "group-fault-summary:" line per axis gives the figures that
// docs/RELIABILITY.md reports.
//
// DS4TP_FAULT_TRIALS scales the trials (default 4: 12 per unit, 48 in all).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "support/group_util.hpp"
#include "support/fault_proxy.hpp"
#include "support/procs.hpp"

using namespace ds4tp::test;

namespace {

constexpr int kGraceMs = 1500;  // scheduling slack (sanitizer builds, 2 cores)
constexpr int kConnectMs = 1500, kOpMs = 1500, kSilenceMs = 1000;
constexpr int32_t kWrongBits = 1;  // a rank's report: a result with wrong bits

int trials() {
  const char *e = std::getenv("DS4TP_FAULT_TRIALS");
  const int n = e ? std::atoi(e) : 0;
  return n > 0 ? n : 4;
}

std::mt19937_64 &rng() {
  static std::mt19937_64 r{mono_ns()};
  return r;
}
uint64_t uniform(uint64_t lo, uint64_t hi) {
  return std::uniform_int_distribution<uint64_t>(lo, hi)(rng());
}

// A free loopback port (bound, read, closed): rank 0's data listener.
void net_free_port(int &port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a);
  getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
  port = ntohs(a.sin_port);
  close(fd);
}

enum class Work { OneShot, TwoShot, Chunked, Home, Others, Between, Moves, Requests };
const char *work_name(Work w) {
  switch (w) {
    case Work::OneShot: return "one-shot all-reduce";
    case Work::TwoShot: return "two-shot all-reduce";
    case Work::Chunked: return "chunked all-reduce";
    case Work::Home: return "home all-reduce";
    case Work::Others: return "all-gather/broadcast/barrier";
    case Work::Between: return "between calls";
    case Work::Moves: return "reduce-scatter/gather/scatter/all-to-all";
    case Work::Requests: return "split-phase requests";
  }
  return "?";
}

struct Plan {
  int rank = 0, size = 2, port = 0;
  int transport = DS4TP_TRANSPORT_SHM;
  // Ranks claim two hosts (even and odd ranks: DS4TP_HOST_ID), so a
  // group of 3 or 4 runs tiered (shm within a host, tcp across).
  bool two_hosts = false;
  // The test verbs provider's profile ("rc", "uc-apple") for an rdma group.
  const char *rdma_profile = nullptr;
  Work work = Work::OneShot;
  // Chunked calls around the ring (DS4TP_GROUP_RING_BYTES) on the meshes.
  bool ring = false;
  int data_port = 0, advertise = 0;  // rank 0's data listener behind a proxy
};

const char *moment_name(const Plan &p, bool in_bringup) {
  return in_bringup ? "bring-up" : p.ring ? "ring all-reduce" : work_name(p.work);
}

// The sum every rank must get of `count` elements of call i: host-major
// on two hosts (each host's ranks, even and odd), else rank order.
void expected_sum(const Plan &p, uint64_t count, uint64_t i, uint8_t *out) {
  if (!p.two_hosts) return group_reference(DS4TP_DTYPE_F32, p.size, count, i, out);
  HostOrder order(2);
  for (int r = 0; r < p.size; r++) order[size_t(r % 2)].push_back(r);
  group_reference_hosts(DS4TP_DTYPE_F32, order, count, i, out);
}

// The newer collectives in turn, each checked: reduce-scatter, gather
// and scatter (root i % n), an uneven all-gather and an all-to-all whose
// piece from rank r to rank q is (r + q + 1) x 16 bytes.
int moves_call(ds4tp_group *g, const Plan &p, uint64_t i, std::vector<uint8_t> &a,
               std::vector<uint8_t> &b) {
  const int n = p.size, me = p.rank, root = int(i % uint64_t(n));
  const uint64_t part = 256;  // bytes per rank
  std::vector<uint8_t> want;
  auto fill = [&](int r, uint64_t bytes, uint8_t *out) { group_fill(DS4TP_DTYPE_F32, r, bytes / 4, i, out); };
  switch (i % 5) {
    case 0: {  // reduce-scatter: rank r keeps segment r of the sum
      a.resize(part * uint64_t(n));
      b.resize(part);
      fill(me, a.size(), a.data());
      if (int rc = ds4tp_group_reduce_scatter(g, a.data(), b.data(), part / 4, DS4TP_DTYPE_F32,
                                              DS4TP_OP_SUM))
        return rc;
      want.resize(a.size());
      expected_sum(p, a.size() / 4, i, want.data());
      return std::memcmp(b.data(), want.data() + uint64_t(me) * part, part) == 0 ? 0 : kWrongBits;
    }
    case 1: {  // gather to root
      a.resize(part);
      b.resize(part * uint64_t(n));
      fill(me, part, a.data());
      if (int rc = ds4tp_group_gather(g, a.data(), b.data(), part, root)) return rc;
      if (me != root) return 0;
      want.resize(part);
      for (int r = 0; r < n; r++) {
        fill(r, part, want.data());
        if (std::memcmp(b.data() + uint64_t(r) * part, want.data(), part) != 0) return kWrongBits;
      }
      return 0;
    }
    case 2: {  // scatter from root: rank r gets the root's fill of rank r's index
      a.resize(part * uint64_t(n));
      b.resize(part);
      for (int r = 0; r < n; r++) fill(r, part, a.data() + uint64_t(r) * part);
      if (int rc = ds4tp_group_scatter(g, a.data(), b.data(), part, root)) return rc;
      return std::memcmp(b.data(), a.data() + uint64_t(me) * part, part) == 0 ? 0 : kWrongBits;
    }
    case 3: {  // uneven all-gather: rank r gives (r + 1) x 64 bytes
      std::vector<uint64_t> bytes(static_cast<size_t>(n));
      uint64_t total = 0;
      for (int r = 0; r < n; r++) total += bytes[size_t(r)] = uint64_t(r + 1) * 64;
      a.resize(bytes[size_t(me)]);
      b.resize(total);
      fill(me, a.size(), a.data());
      if (int rc = ds4tp_group_all_gather_v(g, a.data(), b.data(), bytes.data())) return rc;
      uint64_t off = 0;
      for (int r = 0; r < n; r++) {
        want.resize(bytes[size_t(r)]);
        fill(r, want.size(), want.data());
        if (std::memcmp(b.data() + off, want.data(), want.size()) != 0) return kWrongBits;
        off += bytes[size_t(r)];
      }
      return 0;
    }
    default: {  // all-to-all (flat groups; a tiered group refuses it, so a barrier there)
      if (p.two_hosts && n >= 3) return ds4tp_group_barrier(g);
      const size_t nn = static_cast<size_t>(n);
      std::vector<uint64_t> sb(nn), so(nn), rb(nn), ro(nn);
      uint64_t out_total = 0, in_total = 0;
      for (int q = 0; q < n; q++) {
        so[size_t(q)] = out_total;
        out_total += sb[size_t(q)] = uint64_t(me + q + 1) * 16;
        ro[size_t(q)] = in_total;
        in_total += rb[size_t(q)] = uint64_t(q + me + 1) * 16;
      }
      a.resize(out_total);
      b.resize(in_total);
      for (int q = 0; q < n; q++) std::memset(a.data() + so[size_t(q)], me * 16 + q, sb[size_t(q)]);
      if (int rc = ds4tp_group_all_to_all_v(g, a.data(), sb.data(), so.data(), b.data(), rb.data(),
                                            ro.data()))
        return rc;
      for (int q = 0; q < n; q++)
        for (uint64_t k = 0; k < rb[size_t(q)]; k++)
          if (b[ro[size_t(q)] + k] != uint8_t(q * 16 + me)) return kWrongBits;
      return 0;
    }
  }
}

// Split-phase: two all-reduces started back to back, then waited (the
// second's result checked); a failure is the requests' status.
int requests_call(ds4tp_group *g, const Plan &p, uint64_t i, std::vector<uint8_t> &a,
                  std::vector<uint8_t> &b) {
  const uint64_t count = 1024;
  a.resize(count * 4);
  b.resize(count * 4);
  std::vector<uint8_t> c(count * 4);
  group_fill(DS4TP_DTYPE_F32, p.rank, count, i, a.data());
  group_fill(DS4TP_DTYPE_F32, p.rank, count, i, c.data());
  ds4tp_group_request *r1 = nullptr, *r2 = nullptr;
  int rc = ds4tp_group_all_reduce_start(g, a.data(), count, DS4TP_DTYPE_F32, DS4TP_OP_SUM, &r1);
  if (rc == DS4TP_OK)
    rc = ds4tp_group_all_reduce_start(g, c.data(), count, DS4TP_DTYPE_F32, DS4TP_OP_SUM, &r2);
  const int w1 = r1 != nullptr ? ds4tp_group_wait(r1) : rc;
  const int w2 = r2 != nullptr ? ds4tp_group_wait(r2) : rc;
  ds4tp_group_request_free(r1);
  ds4tp_group_request_free(r2);
  if (w1 != DS4TP_OK) return w1;
  if (w2 != DS4TP_OK) return w2;
  expected_sum(p, count, i, b.data());
  return std::memcmp(c.data(), b.data(), b.size()) == 0 ? 0 : kWrongBits;
}

// Call i of a workload: 0 or a status; kWrongBits when the bits differ.
int one_call(ds4tp_group *g, const Plan &p, uint64_t i, std::vector<uint8_t> &a,
             std::vector<uint8_t> &b) {
  if (p.work == Work::Moves) return moves_call(g, p, i, a, b);
  if (p.work == Work::Requests) return requests_call(g, p, i, a, b);
  uint64_t count = 1024;
  if (p.work == Work::TwoShot) count = 16384;  // 64 KiB: the two-shot threshold
  if (p.work == Work::Chunked) count = 40001;  // over one 64 KiB chunk
  if (p.work == Work::Home) count = 8192;
  if (p.work == Work::Others) {
    const uint64_t bytes = 512;
    a.resize(bytes);
    b.resize(bytes * uint64_t(p.size));
    switch (i % 3) {
      case 0: {
        group_fill(DS4TP_DTYPE_F32, p.rank, bytes / 4, i, a.data());
        if (int rc = ds4tp_group_all_gather(g, a.data(), b.data(), bytes)) return rc;
        for (int r = 0; r < p.size; r++) {
          group_fill(DS4TP_DTYPE_F32, r, bytes / 4, i, a.data());
          if (std::memcmp(a.data(), b.data() + uint64_t(r) * bytes, bytes) != 0) return kWrongBits;
        }
        return 0;
      }
      case 1: {
        const int root = int(i % uint64_t(p.size));
        group_fill(DS4TP_DTYPE_F32, p.rank, bytes / 4, i, a.data());
        if (int rc = ds4tp_group_broadcast(g, a.data(), bytes, root)) return rc;
        group_fill(DS4TP_DTYPE_F32, root, bytes / 4, i, b.data());
        return std::memcmp(a.data(), b.data(), bytes) == 0 ? 0 : kWrongBits;
      }
      default:
        return ds4tp_group_barrier(g);
    }
  }
  const size_t bytes = count * 4;
  a.resize(bytes);
  b.resize(bytes);
  uint8_t *buf = a.data();
  if (p.work == Work::Home) {  // in the group buffer: the home algorithm on shm
    void *home = nullptr;
    uint64_t room = 0;
    if (int rc = ds4tp_group_buffer(g, &home, &room)) return rc;
    if (room >= bytes) buf = static_cast<uint8_t *>(home);
  }
  group_fill(DS4TP_DTYPE_F32, p.rank, count, i, buf);
  if (int rc = ds4tp_group_all_reduce(g, buf, count, DS4TP_DTYPE_F32, DS4TP_OP_SUM)) return rc;
  if (p.two_hosts) {  // two hosts: a ring of two leaders sums as host-major
    expected_sum(p, count, i, b.data());
  } else if (p.ring && p.transport != DS4TP_TRANSPORT_SHM) {
    HostOrder alone(static_cast<size_t>(p.size));
    for (int r = 0; r < p.size; r++) alone[size_t(r)] = {r};
    group_reference_ring(DS4TP_DTYPE_F32, alone, count, 64 * 1024, i, b.data());
  } else {
    group_reference(DS4TP_DTYPE_F32, p.size, count, i, b.data());
  }
  return std::memcmp(buf, b.data(), bytes) == 0 ? 0 : kWrongBits;
}

// A rank process: connect, say ready, run calls until one fails; the
// report carries the failing call's index (-1: the connect).
int rank_main(int fd, const Plan &p) {
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.rank = p.rank;
  o.group_size = p.size;
  o.rendezvous_host = "127.0.0.1";
  o.rendezvous_port = p.port;
  o.transport = p.transport;
  o.connect_timeout_ms = kConnectMs;
  o.op_timeout_ms = kOpMs;
  o.peer_silence_ms = kSilenceMs;
  o.chunk_bytes = 64 * 1024;
  ds4tp_identity id;
  ds4tp_identity_init(&id);
  id.n_layer = 36;
  id.n_embd = 2560;
  if (p.two_hosts) setenv("DS4TP_HOST_ID", p.rank % 2 ? "host-b" : "host-a", 1);
  if (p.ring) setenv("DS4TP_GROUP_RING_BYTES", "65536", 1);
#ifdef DS4TP_TEST_VERBS_PROVIDER
  if (p.rdma_profile != nullptr) {
    setenv("DS4TP_VERBS_LIB", DS4TP_TEST_VERBS_PROVIDER, 1);
    setenv("DS4TP_VERBS_PROVIDER_PROFILE", p.rdma_profile, 1);
  }
#endif
  if (p.data_port) {
    setenv("DS4TP_GROUP_DATA_PORT", std::to_string(p.data_port).c_str(), 1);
    setenv("DS4TP_GROUP_DATA_ADVERTISE_PORT", std::to_string(p.advertise).c_str(), 1);
  }
  ds4tp_group *g = nullptr;
  Report res;
  res.kind = kReportResult;
  int rc = ds4tp_group_new(&g, &o, &id);
  if (rc == 0 && p.rank == 0) {
    Report r;
    r.kind = kReportPort;
    r.value = ds4tp_group_rendezvous_port(g);
    (void)!write(fd, &r, sizeof r);
  }
  res.value = -1;
  if (rc == 0) rc = ds4tp_group_connect(g);
  if (rc == 0) {
    Report r;
    r.kind = kReportReady;
    (void)!write(fd, &r, sizeof r);
    std::vector<uint8_t> a, b;
    for (uint64_t i = 0; rc == 0; i++) {
      res.value = int64_t(i);
      rc = one_call(g, p, i, a, b);
      if (p.work == Work::Between) usleep(1000);
    }
  }
  res.rc = rc;
  res.t_ns = mono_ns();
  std::snprintf(res.msg, sizeof res.msg, "%s",
                rc == kWrongBits ? "a result with wrong bits"
                : g              ? ds4tp_group_errmsg(g)
                                 : ds4tp_last_error());
  (void)!write(fd, &res, sizeof res);
  ds4tp_group_free(g);
  return 0;
}

struct Tally {
  int trials = 0, named = 0, late = 0, hang = 0, crash = 0, wrong = 0, split = 0;
  int other_cause = 0;  // a survivor naming another rank, or another code, than the others
  double worst_ms = 0;
  std::map<std::string, int> codes;
  std::vector<std::string> notes;
  bool clean() const { return trials > 0 && named == trials; }
};

struct Matrix {
  std::map<std::string, Tally> by;  // "transport shm", "n=3", "SIGKILL", work name, "all"
  std::map<std::string, std::string> sample;
  void add(const std::vector<std::string> &keys, const Tally &t) {
    for (const auto &k : keys) {
      Tally &a = by[k];
      a.trials += t.trials, a.named += t.named, a.late += t.late, a.hang += t.hang;
      a.crash += t.crash, a.wrong += t.wrong, a.split += t.split, a.other_cause += t.other_cause;
      a.worst_ms = std::max(a.worst_ms, t.worst_ms);
      for (auto &[c, v] : t.codes) a.codes[c] += v;
      a.notes.insert(a.notes.end(), t.notes.begin(), t.notes.end());
    }
  }
  void print() const {
    for (const auto &[k, t] : by) {
      std::string c;
      for (auto &[n, v] : t.codes) c += (c.empty() ? "" : ",") + n + "=" + std::to_string(v);
      std::printf("group-fault-summary: %s | trials %d | named-within-deadline %d | late %d | "
                  "hang %d | crash %d | not-named-or-wrong-bits %d | split %d | other cause %d | "
                  "codes %s | worst %.1f ms\n",
                  k.c_str(), t.trials, t.named, t.late, t.hang, t.crash, t.wrong, t.split,
                  t.other_cause, c.c_str(), t.worst_ms);
    }
    for (auto &[k, v] : sample) std::printf("  e.g. %s: %s\n", k.c_str(), v.c_str());
    for (const auto &n : by.at("all").notes) std::printf("  note: %s\n", n.c_str());
    std::fflush(stdout);
  }
};

// Forks rank 0, learns its port, forks the others (which dial it).
bool spawn_ranks(const Plan &base, std::vector<Child> &kids, Tally &t) {
  Plan p0 = base;
  p0.rank = 0;
  kids.push_back(Child::spawn([p0](int fd) { return rank_main(fd, p0); }, "rank 0"));
  Report r;
  if (!kids[0].next_of(kReportPort, r, 5000)) {
    t.crash = 1;
    t.notes.push_back("rank 0 did not start");
    for (auto &k : kids) k.reap(1000);
    return false;
  }
  for (int k = 1; k < base.size; k++) {
    Plan pk = base;
    pk.rank = k;
    pk.port = int(r.value);
    pk.data_port = pk.advertise = 0;
    kids.push_back(Child::spawn([pk](int fd) { return rank_main(fd, pk); }, "rank"));
  }
  return true;
}

// A hung rank in words, for the trial's notes: its process state and the
// victim's (R running, S sleeping, T stopped: a victim that is not T was
// resumed or never stopped) and, where gdb is installed, the rank's
// threads' stacks, so a rare hang tells where it waits.
std::string describe_hang(pid_t hung, pid_t victim) {
  auto state = [](pid_t pid) {
    std::FILE *f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
    if (f == nullptr) return std::string("?");
    char buf[512] = {};
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    const char *close = std::strrchr(buf, ')');
    return close != nullptr && size_t(close - buf) + 2 < n ? std::string(1, close[2]) : "?";
  };
  std::string out = "state " + state(hung) + (victim > 0 ? ", victim's " + state(victim) : "");
  if (std::system("command -v gdb >/dev/null 2>&1") != 0) return out;
  const std::string cmd = "timeout 20 gdb -batch -nx -p " + std::to_string(hung) +
                          " -ex 'thread apply all bt 12' 2>/dev/null | grep -E '^(Thread|#)'";
  std::FILE *p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char line[400];
  while (std::fgets(line, sizeof line, p) != nullptr) out += "\n      " + std::string(line, std::strcspn(line, "\n"));
  pclose(p);
  return out;
}

// Every rank but `victim` must report a named error within `deadline_ms`
// of `fault`, after right bits only, and within one call of the others;
// with `cause` set, its message must name that rank.
void judge(std::vector<Child> &kids, int victim, uint64_t fault, int deadline_ms, Tally &t,
           Matrix &m, int cause = -1) {
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  bool all_named = true;
  int first_code = 0;
  for (int k = 0; k < int(kids.size()); k++) {
    if (k == victim) continue;
    Report res;
    const bool got = kids[size_t(k)].next_of(kReportResult, res, deadline_ms + kGraceMs + 3000);
    bool hung = false;
    std::string where;
    if (!got) {
      where = describe_hang(kids[size_t(k)].pid(), victim >= 0 ? kids[size_t(victim)].pid() : -1);
      kids[size_t(k)].signal(SIGKILL);
    }
    const int status = kids[size_t(k)].reap(got ? 3000 : 1000, &hung);
    const std::string who = "rank " + std::to_string(k) + " of " + std::to_string(kids.size());
    if (!got) {
      all_named = false;
      if (hung || (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
        t.hang = 1;
        t.notes.push_back(who + ": hang (" + where + ")");
      } else {
        t.crash = 1;
        t.notes.push_back(who + ": no report");
      }
      continue;
    }
    const double ms = res.t_ns > fault ? double(res.t_ns - fault) / 1e6 : 0.0;
    t.worst_ms = std::max(t.worst_ms, ms);
    t.codes[ds4tp_err_name(res.rc)]++;
    m.sample.emplace(ds4tp_err_name(res.rc), res.msg);
    lo = std::min(lo, int64_t(res.value));
    hi = std::max(hi, int64_t(res.value));
    if (res.rc >= 0 || std::string(ds4tp_err_name(res.rc)) == "DS4TP_UNKNOWN") {
      all_named = false;
      t.wrong = 1;
      t.notes.push_back(who + " call " + std::to_string(res.value) + ": " + res.msg);
    } else if (ms > deadline_ms + kGraceMs) {
      all_named = false;
      t.late = 1;
      t.notes.push_back(who + ": " + std::to_string(int(ms)) + " ms: " + res.msg);
    } else if (cause >= 0 && ((first_code != 0 && res.rc != first_code) ||
                              std::string(res.msg).find("rank " + std::to_string(cause)) ==
                                  std::string::npos)) {
      all_named = false;
      t.other_cause = 1;
      t.notes.push_back(who + " names another cause than rank " + std::to_string(cause) +
                        " with the others' code: " + ds4tp_err_name(res.rc) + " " + res.msg);
    }
    if (first_code == 0) first_code = res.rc;
  }
  if (hi - lo > 1 && lo != INT64_MAX) {  // a rank went on past its next call
    all_named = false;
    t.split = 1;
    t.notes.push_back("survivors failed at calls " + std::to_string(lo) + " and " +
                      std::to_string(hi));
  }
  if (victim >= 0) {
    kids[size_t(victim)].signal(SIGKILL);
    kids[size_t(victim)].reap(2000);
  }
  t.named = all_named ? 1 : 0;
}

// One trial: forks the ranks, kills or stops `victim`, judges the others.
Tally trial(const Plan &base, bool stop, bool in_bringup, int victim, Matrix &m) {
  Tally t;
  t.trials = 1;
  std::vector<Child> kids;
  if (!spawn_ranks(base, kids, t)) return t;
  Child &v = kids[size_t(victim)];
  Report r;
  if (in_bringup) {
    usleep(useconds_t(uniform(0, 30000)));
  } else if (v.next_of(kReportReady, r, 5000)) {
    usleep(useconds_t(uniform(0, 20000)));
  }
  v.signal(stop ? SIGSTOP : SIGKILL);
  const uint64_t fault = mono_ns();
  // A stopped rank is judged by silence or the op deadline, a killed one
  // at once, one lost in bring-up by the connect deadline.
  judge(kids, victim, fault, in_bringup ? kConnectMs : kOpMs, t, m, in_bringup ? -1 : victim);
  return t;
}

// One trial with rank 0's data listener behind a relay that turns to
// `mode` at a random byte of a random direction of the first link.
Tally proxy_trial(Plan base, FaultProxy::Mode mode, Matrix &m) {
  Tally t;
  t.trials = 1;
  net_free_port(base.data_port);
  FaultProxy proxy(base.data_port);
  base.advertise = proxy.port();
  FaultProxy::Trigger tr;
  tr.conn = 0;
  tr.dir = uniform(0, 1) ? FaultProxy::ToLeader : FaultProxy::ToWorker;
  tr.at = uniform(0, 256 * 1024);
  tr.then = mode;
  proxy.set_trigger(tr);
  std::vector<Child> kids;
  if (!spawn_ranks(base, kids, t)) return t;
  proxy.start();  // after the forks: no rank inherits the relay thread
  const uint64_t give_up = mono_ns() + 10'000'000'000ull;
  while (!proxy.triggered() && mono_ns() < give_up) usleep(500);
  const uint64_t fault = mono_ns();
  if (!proxy.triggered()) t.notes.push_back("the relay's trigger never fired");
  judge(kids, -1, fault, kOpMs, t, m);
  proxy.stop();
  return t;
}

// Prints the matrix; every trial must have ended well.
void require_clean(const Matrix &m) {
  m.print();
  const Tally &all = m.by.at("all");
  INFO("see the group-fault-summary lines and notes above");
  CHECK(all.hang == 0);
  CHECK(all.crash == 0);
  CHECK(all.wrong == 0);
  CHECK(all.late == 0);
  CHECK(all.split == 0);
  CHECK(all.other_cause == 0);
  REQUIRE(all.clean());
}

}  // namespace

TEST_CASE("group fault matrix: SIGKILL and SIGSTOP of a random rank at a random moment",
          "[group][fault]") {
  const Work works[] = {Work::OneShot, Work::TwoShot, Work::Chunked, Work::Home,
                        Work::Others,  Work::Between, Work::Moves,   Work::Requests};
  Matrix m;
  const int total = 12 * trials();
  for (int i = 0; i < total; i++) {
    Plan p;
    p.size = 2 + i % 3;
    const int medium = int((i / 3) % 3);  // shm, tcp, ranks on two hosts (auto: tiered)
    p.transport = medium == 0 ? DS4TP_TRANSPORT_SHM : medium == 1 ? DS4TP_TRANSPORT_TCP
                                                                  : DS4TP_TRANSPORT_AUTO;
    p.two_hosts = medium == 2;
    p.work = works[(i / 6) % 8];
    p.ring = p.work == Work::Chunked && uniform(0, 1) == 1;
    const bool stop = (i / 48) % 2 == 1 || uniform(0, 3) == 0;
    const bool in_bringup = uniform(0, 7) == 0;
    const int victim = int(uniform(0, uint64_t(p.size - 1)));
    const Tally t = trial(p, stop, in_bringup, victim, m);
    m.add({"all", p.two_hosts ? std::string("two hosts (tiered from n=3)")
                              : std::string("transport ") + ds4tp_transport_name(p.transport),
           "n=" + std::to_string(p.size), stop ? "SIGSTOP" : "SIGKILL", moment_name(p, in_bringup),
           victim == 0 ? "victim rank 0" : "victim another rank"},
          t);
  }
  require_clean(m);
}

#ifdef DS4TP_TEST_VERBS_PROVIDER
// The same kills and stops over rdma groups (flat, and from 3 ranks on two
// hosts tiered with rdma between the leaders), both provider profiles.
TEST_CASE("group fault matrix over rdma: SIGKILL and SIGSTOP of a random rank",
          "[group][fault][rdma]") {
  const Work works[] = {Work::OneShot, Work::TwoShot, Work::Chunked, Work::Others,
                        Work::Between, Work::Moves,   Work::Requests};
  const char *profiles[] = {"rc", "uc-apple"};
  Matrix m;
  for (int i = 0; i < 6 * trials(); i++) {
    Plan p;
    p.size = 2 + i % 3;
    p.transport = DS4TP_TRANSPORT_RDMA;
    p.rdma_profile = profiles[(i / 3) % 2];
    p.two_hosts = (i / 6) % 2 == 1;
    p.work = works[(i / 6) % 7];
    p.ring = p.work == Work::Chunked && uniform(0, 1) == 1;
    const bool stop = uniform(0, 1) == 1;
    const bool in_bringup = uniform(0, 7) == 0;
    const int victim = int(uniform(0, uint64_t(p.size - 1)));
    const Tally t = trial(p, stop, in_bringup, victim, m);
    m.add({"all", std::string("rdma ") + p.rdma_profile + (p.two_hosts ? ", two hosts" : ""),
           "n=" + std::to_string(p.size), stop ? "SIGSTOP" : "SIGKILL",
           moment_name(p, in_bringup), victim == 0 ? "victim rank 0" : "victim another rank"},
          t);
  }
  require_clean(m);
}
#endif

TEST_CASE("group fault matrix: a relay on a tcp data link stalls, resets or blackholes",
          "[group][fault]") {
  const FaultProxy::Mode modes[] = {FaultProxy::Mode::Stall, FaultProxy::Mode::Reset,
                                    FaultProxy::Mode::Blackhole};
  const char *names[] = {"relay stall", "relay reset", "relay blackhole"};
  const Work works[] = {Work::OneShot, Work::TwoShot, Work::Chunked, Work::Others};
  Matrix m;
  for (int i = 0; i < 6 * trials(); i++) {
    Plan p;
    p.size = 2 + i % 2;
    p.transport = DS4TP_TRANSPORT_TCP;
    p.work = works[(i / 3) % 4];
    const Tally t = proxy_trial(p, modes[i % 3], m);
    m.add({"all", names[i % 3], "n=" + std::to_string(p.size), work_name(p.work)}, t);
  }
  require_clean(m);
}
