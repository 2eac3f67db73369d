// ds4tp_bench: gate latency and throughput of libds4tp, measured side by
// side with a raw baseline of the same bytes over the same medium in the
// same run (bench/README.md says how to run and read it).
//
//   ds4tp_bench [options]                      leader here, worker spawned
//   ds4tp_bench --role leader --listen 0.0.0.0 --port 7070 [options]
//   ds4tp_bench --role worker --connect HOST:7070
//
// The leader drives: it sends each case to the worker over a coordination
// connection (port P), opens library pairs (port P+1) and the raw TCP
// baseline (port P+2); with --port 0 (the default) every port is picked
// by the kernel and sent over the coordination connection.
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sched.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "cases.hpp"
#include "options.hpp"
#include "ds4tp/ds4tp.h"
#include "report.hpp"

extern char **environ;

namespace bench {
namespace {

void pin_to(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    std::fprintf(stderr, "ds4tp_bench: cannot pin to CPU %d: %s\n", cpu, std::strerror(errno));
}

void ensure_big(Session &s, uint64_t bytes) {
  if (s.big_out.size() >= bytes) return;
  // Zero-filled here, so every page is faulted in before any timing.
  s.big_out.assign(bytes, 0x5a);
  s.big_in.assign(bytes, 0);
}

std::vector<Case> plan(const Config &c) {
  std::vector<Case> out;
  for (Section sec : c.sections)
    for (int t : c.transports) {
      // Control frames always travel on the TCP control connection,
      // whatever the data transport: measure them once.
      if (sec == Section::Control && t != c.transports.front()) continue;
      // The group section is tcp's all-reduce against one raw exchange; shm
      // groups are measured against Open MPI's (bench/group/run.sh).
      if (sec == Section::Group && t != DS4TP_TRANSPORT_TCP) continue;
      Case k;
      k.section = sec;
      k.transport = t;
      k.rounds = c.rounds;
      k.warm = c.warm;
      k.warm_first = c.warm_first;
      k.policies = c.policies;
      k.big_modes = c.big_modes;
      switch (sec) {
        case Section::Row:
        case Section::Group:
          for (uint64_t b : c.sizes) {
            // A group all-reduces up to its buffer (chunk_bytes, 1 MiB) in one step.
            if (sec == Section::Group && b > (1u << 20)) continue;
            k.bytes = b;
            // Above 64 KiB, scale down so a block moves about as many
            // bytes as a 64 KiB one, but keep at least 1/8 of --iters.
            k.iters = b == kHeadline ? c.headline_iters
                      : b <= (64u << 10)
                          ? c.iters
                          : std::max({1, c.iters / 8, int(uint64_t(c.iters) * (64u << 10) / b)});
            out.push_back(k);
          }
          break;
        case Section::Batch:
          for (uint32_t r : c.rows) {
            k.bytes = kHeadline;
            k.rows = r;
            k.iters = c.iters;
            out.push_back(k);
          }
          break;
        case Section::Big:
          for (uint64_t b : c.big_sizes) {
            k.bytes = b;
            // Keep each block near the same wall time whatever the size.
            k.iters = b > (16ull << 20) ? std::max(1, c.big_iters / 3) : c.big_iters;
            k.warm = 1;
            k.warm_first = 1;
            out.push_back(k);
          }
          break;
        case Section::Token:
          k.bytes = kHeadline;
          k.layers = c.layers;
          k.iters = c.tokens;
          k.warm = std::min(c.warm, 3);
          k.warm_first = std::min(c.warm_first, 10);
          out.push_back(k);
          break;
        case Section::Control:
          k.transport = DS4TP_TRANSPORT_TCP;
          k.bytes = kHeadline;  // unused: the pair's slab is never touched
          k.iters = c.iters;
          for (uint32_t op : {uint32_t(kEvalLogits), uint32_t(kMtpAck)}) {
            k.op = op;
            out.push_back(k);
          }
          break;
      }
    }
  return out;
}

// ---- worker ----------------------------------------------------------

int run_worker(const Config &c) {
  pin_to(c.pin);
  Session s;
  s.rank = 1;
  s.lib_host = c.connect_host;
  s.connect_timeout_ms = c.connect_timeout_ms;
  Fd fd;
  Status st = tcp_dial(c.connect_host, c.connect_port, 300000, fd);
  if (!st.ok) {
    std::fprintf(stderr, "ds4tp_bench worker: %s\n", st.why.c_str());
    return 1;
  }
  s.coord = Lines(std::move(fd));
  Msg hello;
  hello.verb = "HELLO";
  hello.set("host", host_tag()).set("pid", getpid()).set("version", ds4tp_version_string());
  if (!(st = s.coord.send(hello)).ok) {
    std::fprintf(stderr, "ds4tp_bench worker: %s\n", st.why.c_str());
    return 1;
  }
  for (;;) {
    Msg m;
    if (!(st = s.coord.recv(m, 600000)).ok) break;
    Msg reply;
    reply.verb = "STATUS";
    if (m.verb == "QUIT") return 0;
    if (m.verb == "RAWTCP") {
      Fd raw;
      Status r = tcp_dial(s.lib_host, int(m.num("port")), 10000, raw);
      if (r.ok) s.raw_tcp = RawTcp(std::move(raw));
      reply.set("ok", r.ok ? 1 : 0);
      if (!r.ok) reply.set("why", r.why);
    } else if (m.verb == "RAWSHM") {
      Status r = s.raw_shm.open(m.get("name"));
      reply.set("ok", r.ok ? 1 : 0);
      if (!r.ok) reply.set("why", r.why);
    } else if (m.verb == "CASE") {
      Case k;
      CaseResult res;
      Status r = Case::from_msg(m, k) ? Status{} : Status::fail("bad case: " + m.encode());
      if (r.ok) {
        if (k.section == Section::Big) ensure_big(s, k.bytes);
        r = run_case(s, k, res);
      }
      reply.verb = "DONE";
      reply.set("ok", r.ok ? 1 : 0);
      if (!r.ok) reply.set("why", r.why);
      // Both ranks report; the leader decides whether the run goes on.
      Msg theirs;
      if (!(st = s.coord.send(reply)).ok || !(st = s.coord.recv(theirs, 120000, "DONE")).ok)
        break;
      continue;
    } else {
      st = Status::fail("unexpected message '" + m.encode() + "'");
      break;
    }
    if (!(st = s.coord.send(reply)).ok) break;
  }
  std::fprintf(stderr, "ds4tp_bench worker: %s\n", st.why.c_str());
  return 1;
}

// ---- leader ----------------------------------------------------------

pid_t spawn_worker(const Config &c, int port) {
  std::vector<std::string> args = {"ds4tp_bench", "--role", "worker", "--connect",
                                   "127.0.0.1:" + std::to_string(port), "--connect-timeout",
                                   std::to_string(c.connect_timeout_ms)};
  if (c.pin >= 0) {
    args.push_back("--pin-cpu");
    args.push_back(std::to_string(c.pin + 1));
  }
  std::vector<char *> av;
  for (auto &a : args) av.push_back(a.data());
  av.push_back(nullptr);
  // Our own binary by its real path (so ps shows ds4tp_bench, not "exe").
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    std::fprintf(stderr, "ds4tp_bench: cannot find my own binary: %s\n", std::strerror(errno));
    return -1;
  }
  self[n] = '\0';
  pid_t pid = -1;
  int rc = posix_spawn(&pid, self, nullptr, nullptr, av.data(), environ);
  if (rc != 0) {
    std::fprintf(stderr, "ds4tp_bench: cannot start the worker: %s\n", std::strerror(rc));
    return -1;
  }
  return pid;
}

// Waits for the spawned worker; kills it if it has not ended in time.
void reap(pid_t pid) {
  if (pid <= 0) return;
  for (int i = 0; i < 500; i++) {
    int status;
    if (waitpid(pid, &status, WNOHANG) != 0) return;
    usleep(10000);
  }
  std::fprintf(stderr, "ds4tp_bench: the worker did not exit; killing it\n");
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// The 1-minute load average at the start, from /proc/loadavg.
std::string load_average() {
  FILE *f = std::fopen("/proc/loadavg", "r");
  if (!f) return "?";
  char buf[64] = {};
  bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  if (!ok) return "?";
  std::string s(buf);
  return s.substr(0, s.find(' '));
}

std::string preamble(const Config &c, const std::string &peer_host, bool same_host,
                     const std::string &load_start) {
  utsname u{};
  uname(&u);
  std::string args;
  for (auto &a : c.argv) args += (args.empty() ? "" : " ") + a;
  std::string pol;
  for (int p : c.policies) pol += (pol.empty() ? "" : ",") + std::to_string(p);
  return fmt::format(
      "ds4tp_bench: libds4tp {} | {} {} {} | {} CPUs online | {} | nice {} | load {}\n"
      "command: {}\n"
      "worker: {} | rounds {} (+1 warm-up), variants interleaved A B A B | library "
      "spin_us policies {}\n"
      "raw baselines: tcp 'raw block' (blocking recv) and 'raw busy' (non-blocking spin) on "
      "a socket tuned like the library's; shm 'raw copy2' (copy in, flag, copy out)\n"
      "/raw columns: library (or raw) figure over the faster raw variant's same figure\n",
      ds4tp_version_string(), u.sysname, u.release, u.machine, sysconf(_SC_NPROCESSORS_ONLN),
      c.pin >= 0 ? "pinned (leader CPU 0, worker CPU 1)" : "not pinned",
      getpriority(PRIO_PROCESS, 0), load_start + " at start, " + load_average() + " at end", args,
      same_host ? "same host" : "other host (" + peer_host + ")", c.rounds, pol);
}

int run_leader(const Config &c) {
  const std::string load_start = load_average();
  pin_to(c.pin);
  std::signal(SIGPIPE, SIG_IGN);
  Session s;
  s.rank = 0;
  s.lib_host = c.listen_host;
  s.lib_port = c.port ? c.port + 1 : 0;
  s.connect_timeout_ms = c.connect_timeout_ms;

  Fd lis;
  int port = 0;
  Status st = tcp_listen(c.listen_host, c.port, lis, port);
  if (!st.ok) {
    std::fprintf(stderr, "ds4tp_bench: %s\n", st.why.c_str());
    return 1;
  }
  pid_t worker = -1;
  if (c.role == Config::Local) {
    worker = spawn_worker(c, port);
    if (worker < 0) return 1;
  } else {
    std::fprintf(stderr,
                 "ds4tp_bench: waiting for the worker: ds4tp_bench --role worker --connect "
                 "<this host>:%d\n", port);
  }
  auto fail = [&](const std::string &why) {
    std::fprintf(stderr, "ds4tp_bench: %s\n", why.c_str());
    if (s.coord.valid()) {
      Msg q;
      q.verb = "QUIT";
      s.coord.send(q);
    }
    if (worker > 0) reap(worker);
    return 1;
  };

  Fd cfd;
  st = tcp_accept(lis, c.role == Config::Local ? 15000 : 600000, cfd);
  if (!st.ok) return fail("no worker: " + st.why);
  lis.reset();
  s.coord = Lines(std::move(cfd));
  Msg hello;
  if (!(st = s.coord.recv(hello, 15000, "HELLO")).ok) return fail(st.why);
  const std::string peer_host = hello.get("host");
  const bool same_host = peer_host == host_tag();

  // Raw TCP baseline connection, kept for the whole run.
  {
    Fd rl;
    int rport = 0;
    if (!(st = tcp_listen(c.listen_host, c.port ? c.port + 2 : 0, rl, rport)).ok)
      return fail(st.why);
    Msg m;
    m.verb = "RAWTCP";
    m.set("port", rport);
    if (!(st = s.coord.send(m)).ok) return fail(st.why);
    Fd raw;
    if (!(st = tcp_accept(rl, 15000, raw)).ok) return fail("raw tcp baseline: " + st.why);
    s.raw_tcp = RawTcp(std::move(raw));
    Msg r;
    if (!(st = s.coord.recv(r, 15000, "STATUS")).ok) return fail(st.why);
    if (r.num("ok") != 1) return fail("raw tcp baseline (worker): " + r.get("why"));
  }
  std::vector<std::string> skipped;
  // Raw shared-memory baseline, when the ranks share a host.
  if (same_host) {
    std::string name = fmt::format("/ds4tp-bench-{}", getpid());
    st = s.raw_shm.create(name);
    Msg r;
    if (st.ok) {
      Msg m;
      m.verb = "RAWSHM";
      m.set("name", name);
      if (!(st = s.coord.send(m)).ok || !(st = s.coord.recv(r, 15000, "STATUS")).ok)
        return fail(st.why);
      s.raw_shm.unlink();
      if (r.num("ok") != 1) st = Status::fail("worker: " + r.get("why"));
    }
    if (!st.ok) {
      s.raw_shm.reset();
      skipped.push_back("raw shm baseline unavailable: " + st.why);
    }
  }

  std::vector<Case> cases = plan(c);
  std::vector<CaseResult> results;
  std::vector<int> dead;  // transports found unavailable
  size_t i = 0;
  for (const Case &k : cases) {
    i++;
    bool is_dead = false;
    for (int t : dead) is_dead |= t == k.transport;
    if (is_dead) continue;
    uint64_t t0 = now_ns();
    if (k.section == Section::Big) ensure_big(s, k.bytes);
    if (!(st = s.coord.send(k.to_msg())).ok) return fail(st.why);
    CaseResult res;
    Status mine = run_case(s, k, res);
    Msg done;
    done.verb = "DONE";
    done.set("ok", mine.ok ? 1 : 0);
    if (!mine.ok) done.set("why", mine.why);
    Msg theirs;
    if (!(st = s.coord.send(done)).ok || !(st = s.coord.recv(theirs, 120000, "DONE")).ok)
      return fail(k.label() + ": " + (mine.ok ? st.why : mine.why));
    // Both sides' reasons: the first failure often shows up on the peer.
    std::string why;
    if (!mine.ok) why = "leader: " + mine.why;
    if (theirs.num("ok") != 1) why += (why.empty() ? "" : "; ") + ("worker: " + theirs.get("why"));
    if (!why.empty()) return fail(k.label() + ": " + why);
    if (res.unavailable) {
      dead.push_back(k.transport);
      std::string line = fmt::format("{}: skipped: the library cannot run it here: {}",
                                     ds4tp_transport_name(k.transport), res.why);
      skipped.push_back(line);
      std::fprintf(stderr, "[%zu/%zu] %s\n", i, cases.size(), line.c_str());
      continue;
    }
    std::fprintf(stderr, "[%zu/%zu] %-24s %.1f s\n", i, cases.size(), k.label().c_str(),
                 double(now_ns() - t0) / 1e9);
    results.push_back(std::move(res));
  }
  Msg q;
  q.verb = "QUIT";
  s.coord.send(q);
  reap(worker);

  ReportConfig rc;
  rc.out_dir = c.out_dir;
  rc.preamble = preamble(c, peer_host, same_host, load_start);
  rc.skipped = skipped;
  rc.headline_bytes = kHeadline;
  if (!(st = write_report(rc, results)).ok) {
    std::fprintf(stderr, "ds4tp_bench: %s\n", st.why.c_str());
    return 1;
  }
  std::fprintf(stderr, "ds4tp_bench: wrote %s/table.txt, results.csv, samples-16k.csv "
                       "(plot: /usr/bin/python3 bench/plot.py %s)\n",
               c.out_dir.c_str(), c.out_dir.c_str());
  return 0;
}

}  // namespace
}  // namespace bench

int main(int argc, char **argv) {
  bench::Config c = bench::parse(argc, argv);
  std::signal(SIGPIPE, SIG_IGN);
  if (c.role == bench::Config::Worker) return bench::run_worker(c);
  return bench::run_leader(c);
}
