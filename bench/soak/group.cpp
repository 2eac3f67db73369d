// The group mode of ds4tp_soak (main.cpp has the overview): the supervisor
// is rank 0, a second long-lived process (group-rank --rank 1, started
// once) is rank 1 and is told each cycle's plan through a pipe, ranks
// 2..N-1 are children of the cycle, and one of them is the victim of the
// cycle's fault. Every rank derives the same collectives from the seed.
#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "soak.hpp"

namespace soak {
namespace {

// ---- group traffic --------------------------------------------------------

// Small integers, exact in f16 and bf16 and in any rank-order sum of 16 of
// them, so the reference is the plain sum whatever the dtype.
int elem(uint64_t seed, int rank, uint64_t i, uint64_t e) {
  uint32_t h = uint32_t(mix(seed ^ (uint64_t(rank) << 56) ^ (i << 24))) + uint32_t(e) * 0x9e3779b1u;
  return int(h >> 27) - 16;
}
uint16_t half_of_int(int v) {
  if (v == 0) return 0;
  uint16_t s = v < 0 ? 0x8000 : 0;
  unsigned a = unsigned(v < 0 ? -v : v), e = 0;
  while ((a >> (e + 1)) != 0) e++;
  return uint16_t(s | ((e + 15) << 10) | (((a << (10 - e)) & 0x3ffu)));
}
void store(int dt, uint8_t *p, uint64_t e, int v) {
  float f = float(v);
  if (dt == DS4TP_DTYPE_F32) {
    std::memcpy(p + e * 4, &f, 4);
    return;
  }
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t h = dt == DS4TP_DTYPE_BF16 ? uint16_t(u >> 16) : half_of_int(v);
  std::memcpy(p + e * 2, &h, 2);
}

// Collective i of a group cycle, derived from the seed on every rank.
int group_step(ds4tp_group *g, uint64_t seed, uint64_t i, const char *&call, std::string &why) {
  static const uint64_t counts[] = {1, 33, 1024, 4096, 16384, 40001, 131072, 300000};
  static const uint64_t sizes[] = {1, 64, 1000, 4096, 65536, 200001};
  const int me = ds4tp_group_rank(g), n = ds4tp_group_size(g);
  const uint64_t r = mix(seed ^ (i + 1) * 0xd1b54a32d192ed03ull);
  const int k = int(r % 100);
  if (k < 55) {
    call = "all_reduce";
    const int dt = int((r >> 8) % 3);
    const uint64_t count = counts[(r >> 12) % 8], es = dt == DS4TP_DTYPE_F32 ? 4 : 2;
    const uint64_t bytes = count * es;
    uint8_t *mine = bufs().a.data(), *want = bufs().b.data();
    int *sum = bufs().sum.data();
    std::memset(sum, 0, count * sizeof *sum);
    for (int rk = 0; rk < n; rk++)
      for (uint64_t e = 0; e < count; e++) {
        int v = elem(seed, rk, i, e);
        sum[e] += v;
        if (rk == me) store(dt, mine, e, v);
      }
    for (uint64_t e = 0; e < count; e++) store(dt, want, e, sum[e]);
    uint8_t *buf = mine;
    void *home = nullptr;
    uint64_t room = 0;
    if ((r >> 16) & 1 && ds4tp_group_buffer(g, &home, &room) == 0 && room >= bytes) {
      buf = static_cast<uint8_t *>(home);  // the no-copy path over shm
      std::memcpy(buf, mine, bytes);
    }
    if (int rc = ds4tp_group_all_reduce(g, buf, count, dt, DS4TP_OP_SUM)) return rc;
    if (std::memcmp(buf, want, bytes) != 0) {
      why = "all_reduce of " + std::to_string(count) + " elements, dtype " + std::to_string(dt) +
            ": result differs from the sum";
      return kWrongBits;
    }
    return 0;
  }
  const uint64_t bytes = sizes[(r >> 12) % 6];
  uint8_t *a = bufs().a.data(), *b = bufs().b.data();
  if (k < 72) {
    call = "all_gather";
    std::memset(b, 0, bytes * uint64_t(n));
    fill_words(a, bytes, word_base(seed, me, i));
    if (int rc = ds4tp_group_all_gather(g, a, b, bytes)) return rc;
    for (int rk = 0; rk < n; rk++)
      if (!check_words(b + uint64_t(rk) * bytes, bytes, word_base(seed, rk, i))) {
        why = "all_gather of " + std::to_string(bytes) + " bytes: rank " + std::to_string(rk) +
              "'s part differs";
        return kWrongBits;
      }
    return 0;
  }
  if (k < 88) {
    call = "broadcast";
    const int root = int((r >> 32) % uint64_t(n));
    fill_words(a, bytes, word_base(seed, me, i));
    if (int rc = ds4tp_group_broadcast(g, a, bytes, root)) return rc;
    if (!check_words(a, bytes, word_base(seed, root, i))) {
      why = "broadcast of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root) +
            ": result differs";
      return kWrongBits;
    }
    return 0;
  }
  call = "barrier";
  return ds4tp_group_barrier(g);
}

struct GroupPlan {
  int n = 3, rank = 0, port = 0, transport = DS4TP_TRANSPORT_TCP;
  uint64_t seed = 0;
  long ops = -1, exit_after = -1;
};

ds4tp_group_options group_options(const GroupPlan &p) {
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.rank = p.rank;
  o.group_size = p.n;
  o.rendezvous_host = "127.0.0.1";
  o.rendezvous_port = p.rank == 0 ? 0 : p.port;
  o.transport = p.transport;
  o.connect_timeout_ms = kConnectMs;
  o.op_timeout_ms = kGroupOpMs;
  o.peer_silence_ms = kSilenceMs;
  return o;
}

// As pair_side, for a group handle made by ds4tp_group_new. Giving up on
// an unnoticed fault fails the group on every rank (ds4tp_group_mark_failed).
void group_side(ds4tp_group *g, const GroupPlan &p, Side &s, const std::function<void()> &connected,
                const std::function<bool()> &overdue) {
  const char *call = "bring-up";
  std::string why;
  int rc = ds4tp_group_connect(g);
  if (rc == 0 && connected) connected();
  for (long i = 0; rc == 0 && (p.ops < 0 || i < p.ops); i++) {
    if (p.exit_after >= 0 && i == p.exit_after) return;
    if (overdue && overdue()) {
      ds4tp_group_mark_failed(g);
      s.rc = kUnnoticed, s.t_err = now_ns(), s.where = "collectives", s.msg = "no call failed";
      return;
    }
    rc = group_step(g, p.seed, uint64_t(i), call, why);
    if (rc == 0) s.ops++;
  }
  if (rc == 0) {
    call = "final barrier";
    rc = ds4tp_group_barrier(g);
  }
  if (rc) {
    s.rc = rc, s.t_err = now_ns(), s.where = call;
    s.msg = rc == kWrongBits ? why : one_line(ds4tp_group_errmsg(g));
  }
}

ds4tp_identity group_identity() {
  ds4tp_identity id = pair_identity();
  id.model_id = 0x50a5;
  return id;
}

}  // namespace

// ---- group: ranks and supervisor ----------------------------------------------

// A short-lived rank (2..N-1) of one cycle.
int group_child(const Args &a) {
  GroupPlan p;
  p.n = a.n, p.rank = a.rank, p.port = a.port, p.transport = a.transport;
  p.seed = a.seed, p.ops = a.ops, p.exit_after = a.exit_after;
  ds4tp_group_options o = group_options(p);
  ds4tp_identity id = group_identity();
  ds4tp_group *g = nullptr;
  if (ds4tp_group_new(&g, &o, &id) != 0) {
    emit(2, "soak rank %d: ds4tp_group_new: %s", a.rank, ds4tp_last_error());
    return kExitSetup;
  }
  Side s;
  group_side(g, p, s, nullptr, nullptr);
  ds4tp_group_free(g);
  if (s.rc == 0) return kExitOk;
  emit(2, "soak rank %d pid %d (%s): %s at %s: %s", a.rank, int(getpid()), a.tag.c_str(),
       code_name(s.rc), s.where.c_str(), s.msg.c_str());
  return named_code(s.rc) ? kExitNamed : kExitUnexpected;
}

// The long-lived rank 1: one cycle per plan line from rank 0
// ("n port seed ops cycle"), one report line back
// ("rc t_err_ns ops where|msg"); ends at EOF of the plan.
int group_rank1(const Args &a) {
  const uint64_t t0 = now_ns();
  bufs();
  const std::string role = a.tag + "/rank1";
  g_dog.tag = role;
  g_dog.run();
  for (;;) {
    std::string line;
    if (!read_line(a.plan_fd, 24 * 3600 * 1000, line)) break;
    GroupPlan p;
    unsigned long long seed = 0;
    long cycle = 0;
    if (std::sscanf(line.c_str(), "%d %d %llu %ld %ld", &p.n, &p.port, &seed, &p.ops, &cycle) != 5)
      break;
    p.rank = 1, p.seed = seed, p.transport = a.transport;
    g_dog.cycle = cycle;
    g_dog.set("rank 1: cycle");
    ds4tp_group_options o = group_options(p);
    ds4tp_identity id = group_identity();
    ds4tp_group *g = nullptr;
    Side s;
    if (ds4tp_group_new(&g, &o, &id) != 0) {
      s.rc = DS4TP_EINVAL, s.t_err = now_ns(), s.where = "new", s.msg = one_line(ds4tp_last_error());
    } else {
      group_side(g, p, s, nullptr, nullptr);
    }
    g_dog.set("rank 1: free");
    ds4tp_group_free(g);
    emit(a.report_fd, "%d %" PRIu64 " %ld %s|%s", s.rc, s.t_err, s.ops, s.where.c_str(),
         s.msg.c_str());
    print_sample(a.tag.c_str(), role.c_str(), cycle, t0);
    g_dog.since = 0;
  }
  return 0;
}

int group_supervisor(const Args &a) {
  std::mt19937_64 rng(a.seed);
  const std::string tr = ds4tp_transport_name(a.transport);
  const std::string role0 = a.tag + "/rank0";
  const uint64_t t0 = now_ns(), t_end = t0 + uint64_t(a.seconds * 1e9);
  long failures = 0, n = 0;
  int plan[2], report[2];
  if (pipe2(plan, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0) return 1;
  pid_t rank1 = spawn({"group-rank", "--rank", "1", "--transport", tr, "--tag", a.tag, "--plan-fd",
                       std::to_string(plan[0]), "--report-fd", std::to_string(report[1])},
                      plan[0], report[1]);
  ::close(plan[0]);
  ::close(report[1]);
  emit(1, "start tag=%s pid=%d seed=%" PRIu64 " transport=%s rank1=%d", a.tag.c_str(),
       int(getpid()), a.seed, tr.c_str(), int(rank1));
  bool rank1_lost = false;
  while (now_ns() < t_end && !rank1_lost) {
    n++;
    g_dog.cycle = n;
    g_dog.set("group cycle");
    GroupPlan p;
    p.n = 3 + int(rng() % 2);
    p.transport = a.transport;
    p.seed = rng();
    const Fault f = pick_fault(rng);
    const int victim = 2 + int(rng() % uint64_t(p.n - 2));
    p.ops = f == Fault::None ? long(20 + rng() % 150) : -1;
    const long exit_after = f == Fault::Exit ? long(rng() % 100) : -1;
    const int delay = f == Fault::BringupKill ? int(rng() % 8) : int(rng() % 300);
    const int stop_ms = kSilenceMs + 500 + int(rng() % 1000);

    Verdict v;
    Side s;
    Injector inj;
    std::vector<pid_t> kids(size_t(p.n), -1);
    ds4tp_group_options o = group_options(p);
    ds4tp_identity id = group_identity();
    ds4tp_group *g = nullptr;
    bool planned = false;
    if (ds4tp_group_new(&g, &o, &id) != 0) {
      v.no(std::string("ds4tp_group_new: ") + one_line(ds4tp_last_error()));
    } else {
      p.port = ds4tp_group_rendezvous_port(g);
      emit(plan[1], "%d %d %" PRIu64 " %ld %ld", p.n, p.port, p.seed, p.ops, n);
      planned = true;
      for (int r = 2; r < p.n; r++)
        kids[size_t(r)] = spawn({"group-rank", "--rank", std::to_string(r), "--size",
                                 std::to_string(p.n), "--port", std::to_string(p.port),
                                 "--transport", tr, "--tag", a.tag, "--seed", std::to_string(p.seed),
                                 "--ops", std::to_string(p.ops), "--exit-after",
                                 std::to_string(r == victim ? exit_after : -1)});
      g_dog.set("group: rank 0");
      if (f == Fault::BringupKill) inj.start(f, kids[size_t(victim)], delay, 0);
      group_side(
          g, p, s,
          [&] {
            if (f == Fault::Kill || f == Fault::Stop)
              inj.start(f, kids[size_t(victim)], delay, stop_ms);
          },
          [&] { return past_bound(f, inj.fired_ns(), stop_ms); });
    }
    g_dog.set("group: free");
    ds4tp_group_free(g);
    g_dog.set("group: rank 1's report");
    inj.join();
    Side s1;
    if (planned) {
      std::string rep;
      if (!read_line(report[0], kChildExitMs + kConnectMs, rep)) {
        v.no("rank 1 sent no report");
        rank1_lost = true;
      } else {
        unsigned long long t = 0;
        int used = 0;
        std::sscanf(rep.c_str(), "%d %llu %ld %n", &s1.rc, &t, &s1.ops, &used);
        s1.t_err = t;
        s1.where = rep.substr(size_t(used));
      }
    }
    g_dog.set("group: reaping the children");
    std::string how, pids = std::to_string(getpid()) + "," + std::to_string(rank1);
    double ms = -1, ms1 = -1;
    const uint64_t fired = inj.fired_ns();
    if (v.ok) judge_survivor("rank 0", f, s, fired, v, ms);
    if (v.ok && !rank1_lost) judge_survivor("rank 1", f, s1, fired, v, ms1);
    for (int r = 2; r < p.n; r++) {
      if (kids[size_t(r)] <= 0) continue;
      int st = -1;
      std::string h = reap(kids[size_t(r)], kChildExitMs, &st);
      how += (how.empty() ? "" : ",") + std::to_string(r) + ":" + h;
      pids += "," + std::to_string(kids[size_t(r)]);
      if (r == victim) judge_victim(f, st, h, v);
      else if (!exited_with(st, f == Fault::None ? kExitOk : kExitNamed))
        v.no("rank " + std::to_string(r) + " (a survivor) ended " + h);
    }
    if (!v.ok) failures++;
    const char *outcome = !v.ok ? "fail" : f == Fault::None ? "ok" : "named";
    emit(1, "cycle tag=%s n=%ld role=rank0 size=%d victim=%d fault=%s outcome=%s code=%s code1=%s "
            "ms=%.1f ms1=%.1f ops=%ld child=%s pids=%s msg=\"%s%s%s | rank 1: %s\"",
         a.tag.c_str(), n, p.n, victim, fault_name(f), outcome, code_name(s.rc), code_name(s1.rc),
         ms, ms1, s.ops + s1.ops, how.c_str(), pids.c_str(), v.ok ? "" : v.why.c_str(),
         v.ok ? "" : ": ", s.where.empty() ? "" : (s.where + ": " + s.msg).c_str(),
         one_line(s1.where.c_str()).c_str());
    if (!v.ok) emit(1, "fail tag=%s n=%ld what=\"%s\"", a.tag.c_str(), n, v.why.c_str());
    g_dog.set("group: between cycles");
    print_sample(a.tag.c_str(), role0.c_str(), n, t0);
    g_dog.since = 0;
    usleep(useconds_t(20000 + rng() % 180000));
  }
  ::close(plan[1]);  // rank 1 takes EOF as the end
  int st = -1;
  std::string how = reap(rank1, kChildExitMs, &st);
  if (!exited_with(st, 0)) {
    emit(1, "fail tag=%s n=%ld what=\"rank 1 ended %s\"", a.tag.c_str(), n, how.c_str());
    failures++;
  }
  ::close(report[0]);
  emit(1, "end tag=%s cycles=%ld failures=%ld", a.tag.c_str(), n, failures);
  return failures ? 1 : 0;
}

}  // namespace soak
