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
#include "ds4tp/ds4tp.h"
#include "report.hpp"

extern char **environ;

namespace bench {
namespace {

constexpr uint64_t kHeadline = 16384;  // n_embd 4096 in f32

struct Config {
  enum { Local, Leader, Worker } role = Local;
  std::string listen_host = "127.0.0.1";
  int port = 0;
  std::string connect_host;
  int connect_port = 0;
  std::vector<int> transports = {DS4TP_TRANSPORT_TCP, DS4TP_TRANSPORT_SHM,
                                 DS4TP_TRANSPORT_RDMA};
  std::vector<Section> sections = {Section::Row, Section::Batch, Section::Big,
                                   Section::Token, Section::Control};
  std::vector<uint64_t> sizes = {1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20};
  std::vector<uint32_t> rows = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint64_t> big_sizes = {8ull << 20, 64ull << 20};
  std::vector<int> policies = {0, DS4TP_SPIN_ADAPTIVE, 1000000};
  std::vector<std::string> big_modes;  // DS4TP_BIG_GATE values for big tcp pairs
  // Many short rounds: a load change on a shared machine then hits every
  // variant alike, which keeps the lib/raw ratios meaningful.
  int rounds = 8;
  int iters = 100;            // row (up to 64 KiB) and batch, per variant per round
  int headline_iters = 500;   // row 16 KiB, per variant per round
  int warm = 10;
  int warm_first = 100;
  int big_iters = 3;          // 8 MiB; 64 MiB gets a third of it, at least 1
  int tokens = 12;            // per variant per round
  uint32_t layers = 43;
  int pin = -1;               // CPU for this process; -1 = no pinning
  std::string out_dir = "bench-out";
  int connect_timeout_ms = 10000;
  std::vector<std::string> argv;  // as given, for the table's preamble
};

[[noreturn]] void usage(const char *why) {
  if (why) std::fprintf(stderr, "ds4tp_bench: %s\n\n", why);
  std::fprintf(stderr,
      "usage: ds4tp_bench [options]                       leader + spawned worker on loopback\n"
      "       ds4tp_bench --role leader [--listen HOST] --port P [options]\n"
      "       ds4tp_bench --role worker --connect HOST:P   (takes every setting from the leader)\n"
      "\n"
      "  --transports LIST   tcp,shm,rdma (default all; an unavailable one is skipped)\n"
      "  --sections LIST     row,batch,big,token,control (default all)\n"
      "  --sizes LIST        row gate vector sizes (default 1k,4k,16k,64k,256k,1m)\n"
      "  --rows LIST         batch gate rows of 16 KiB (default 1,2,3,4,5,6,7,8)\n"
      "  --big LIST          big gate payloads each way (default 8m,64m)\n"
      "  --policies LIST     library spin_us values, one pair each; 'adaptive' (or -1) is\n"
      "                      the library default (default 0,adaptive,1000000)\n"
      "  --big-gate LIST     big tcp gates: one pair per policy per DS4TP_BIG_GATE value\n"
      "                      (duplex,alternate,auto; default: the environment's)\n"
      "  --rounds N          recorded rounds, variants interleaved in each (default 8)\n"
      "  --iters N           exchanges per variant per round (default 100; fewer above\n"
      "                      64 KiB so each block moves about the same bytes)\n"
      "  --headline-iters N  same for the 16 KiB row gate (default 500)\n"
      "  --warm N            unrecorded exchanges before every block (default 10)\n"
      "  --big-iters N       big gates per variant per round (default 3)\n"
      "  --tokens N          token-loop tokens per variant per round (default 12)\n"
      "  --layers N          token-loop layers, 2 gates each (default 43)\n"
      "  --quick             tiny run (smoke test): a few exchanges of each kind\n"
      "  --long              5x the default iterations\n"
      "  --pin               pin the leader to CPU 0 and the worker to CPU 1\n"
      "  --out DIR           table.txt, results.csv, samples-16k.csv (default bench-out)\n"
      "  --connect-timeout MS  library bring-up deadline (default 10000)\n");
  std::exit(why ? 2 : 0);
}

int to_int(const std::string &s, const char *opt) {
  char *end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end || v < 0 || v > 100000000)
    usage(fmt::format("{} wants a non-negative number, not '{}'", opt, s).c_str());
  return int(v);
}

std::vector<uint64_t> to_sizes(const std::string &s, const char *opt) {
  std::vector<uint64_t> out;
  for (auto &w : split(s, ',')) {
    uint64_t b = parse_bytes(w);
    if (b < 8 || b % 64 != 0)
      usage(fmt::format("{}: '{}' is not a size of at least 64 bytes in multiples of 64", opt, w)
                .c_str());
    out.push_back(b);
  }
  if (out.empty()) usage(fmt::format("{} wants a list", opt).c_str());
  return out;
}

Config parse(int argc, char **argv) {
  Config c;
  for (int i = 0; i < argc; i++) c.argv.push_back(argv[i]);
  auto val = [&](int &i) -> std::string {
    if (i + 1 >= argc) usage(fmt::format("{} needs a value", argv[i]).c_str());
    return argv[++i];
  };
  bool quick = false, longer = false, pin = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--role") {
      std::string r = val(i);
      if (r == "leader") c.role = Config::Leader;
      else if (r == "worker") c.role = Config::Worker;
      else usage("--role is leader or worker");
    } else if (a == "--listen") {
      c.listen_host = val(i);
    } else if (a == "--port") {
      c.port = to_int(val(i), "--port");
      if (c.port > 65533) usage("--port must leave room for P+1 and P+2");
    } else if (a == "--connect") {
      std::string hp = val(i);
      size_t colon = hp.rfind(':');
      if (colon == std::string::npos) usage("--connect wants HOST:PORT");
      c.connect_host = hp.substr(0, colon);
      c.connect_port = to_int(hp.substr(colon + 1), "--connect");
    } else if (a == "--transports") {
      c.transports.clear();
      for (auto &t : split(val(i), ',')) {
        if (t == "tcp") c.transports.push_back(DS4TP_TRANSPORT_TCP);
        else if (t == "shm") c.transports.push_back(DS4TP_TRANSPORT_SHM);
        else if (t == "rdma") c.transports.push_back(DS4TP_TRANSPORT_RDMA);
        else usage(("unknown transport " + t).c_str());
      }
    } else if (a == "--sections") {
      c.sections.clear();
      for (auto &s : split(val(i), ',')) {
        Section sec;
        if (!section_from_name(s, sec)) usage(("unknown section " + s).c_str());
        c.sections.push_back(sec);
      }
    } else if (a == "--sizes") {
      c.sizes = to_sizes(val(i), "--sizes");
    } else if (a == "--big") {
      c.big_sizes = to_sizes(val(i), "--big");
    } else if (a == "--rows") {
      c.rows.clear();
      for (auto &r : split(val(i), ',')) {
        int n = to_int(r, "--rows");
        if (n < 1 || n > DS4TP_BATCH_MAX_ROWS) usage("--rows: each value in 1..8");
        c.rows.push_back(uint32_t(n));
      }
    } else if (a == "--policies") {
      c.policies.clear();
      for (auto &p : split(val(i), ','))
        c.policies.push_back(p == "adaptive" || p == "-1" ? DS4TP_SPIN_ADAPTIVE
                                                          : to_int(p, "--policies"));
      if (c.policies.empty()) usage("--policies wants a list");
    } else if (a == "--big-gate") {
      c.big_modes = split(val(i), ',');
      for (auto &m : c.big_modes)
        if (m != "duplex" && m != "alternate" && m != "auto")
          usage("--big-gate: each value is duplex, alternate or auto");
    } else if (a == "--rounds") {
      c.rounds = to_int(val(i), "--rounds");
      if (c.rounds < 1) usage("--rounds must be at least 1");
    } else if (a == "--iters") {
      c.iters = std::max(1, to_int(val(i), "--iters"));
    } else if (a == "--headline-iters") {
      c.headline_iters = std::max(1, to_int(val(i), "--headline-iters"));
    } else if (a == "--warm") {
      c.warm = to_int(val(i), "--warm");
    } else if (a == "--big-iters") {
      c.big_iters = std::max(1, to_int(val(i), "--big-iters"));
    } else if (a == "--tokens") {
      c.tokens = std::max(1, to_int(val(i), "--tokens"));
    } else if (a == "--layers") {
      c.layers = uint32_t(std::max(1, to_int(val(i), "--layers")));
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--long") {
      longer = true;
    } else if (a == "--pin") {
      pin = true;
    } else if (a == "--pin-cpu") {  // internal: the spawned worker's CPU
      c.pin = to_int(val(i), "--pin-cpu");
    } else if (a == "--out") {
      c.out_dir = val(i);
    } else if (a == "--connect-timeout") {
      c.connect_timeout_ms = std::max(1, to_int(val(i), "--connect-timeout"));
    } else if (a == "-h" || a == "--help") {
      usage(nullptr);
    } else {
      usage(("unknown option " + a).c_str());
    }
  }
  if (quick) {
    // Every section and both kinds of variant, a handful of exchanges each.
    c.sizes = {1 << 10, kHeadline};
    c.rows = {1, 8};
    c.big_sizes = {1 << 20};
    c.rounds = 1;
    c.iters = 10;
    c.headline_iters = 30;
    c.warm = 2;
    c.warm_first = 5;
    c.big_iters = 2;
    c.tokens = 2;
    c.layers = 4;
  }
  if (longer) {
    c.iters *= 5;
    c.headline_iters *= 5;
    c.big_iters *= 5;
    c.tokens *= 5;
  }
  if (pin && c.role == Config::Local) c.pin = 0;
  if (c.role == Config::Worker && c.connect_host.empty())
    usage("--role worker needs --connect HOST:PORT");
  if (c.role == Config::Leader && c.listen_host.empty()) usage("--listen wants a host");
  return c;
}

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
          for (uint64_t b : c.sizes) {
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
