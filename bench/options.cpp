#include "options.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <sched.h>

#include <fmt/format.h>

#include "util.hpp"

namespace bench {
namespace {

[[noreturn]] void usage(const char *why) {
  if (why) std::fprintf(stderr, "ds4tp_bench: %s\n\n", why);
  std::fprintf(stderr,
      "usage: ds4tp_bench [options]                       leader + spawned worker on loopback\n"
      "       ds4tp_bench --role leader [--listen HOST] --port P [options]\n"
      "       ds4tp_bench --role worker --connect HOST:P   (takes every setting from the leader)\n"
      "\n"
      "  --transports LIST   tcp,shm,rdma (default all; an unavailable one is skipped)\n"
      "  --sections LIST     row,batch,big,token,control,group (default all)\n"
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
      "  --pin, --no-pin     the leader on CPU 0 and the worker on CPU 1, or wherever the\n"
      "                      kernel puts them (default: pinned when both CPUs are ours;\n"
      "                      bench/README.md says why)\n"
      "  --out DIR           table.txt, results.csv, samples-16k.csv (default bench-out)\n"
      "  --connect-timeout MS  library bring-up deadline (default 10000)\n");
  std::exit(why ? 2 : 0);
}

// Unpinned on loopback, the kernel's wake-up of a blocked receiver can
// move it onto the sender's CPU, so a blocking ping-pong runs on one
// core, cheaper than any exchange between two hosts; pinned, each rank
// keeps a CPU of its own, as it would on its own host.
bool two_cpus_ours() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 && CPU_ISSET(0, &set) && CPU_ISSET(1, &set);
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

}  // namespace

Config parse(int argc, char **argv) {
  Config c;
  for (int i = 0; i < argc; i++) c.argv.push_back(argv[i]);
  auto val = [&](int &i) -> std::string {
    if (i + 1 >= argc) usage(fmt::format("{} needs a value", argv[i]).c_str());
    return argv[++i];
  };
  bool quick = false, longer = false;
  int pin = -1;  // -1: pin when CPUs 0 and 1 are both ours
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
      pin = 1;
    } else if (a == "--no-pin") {
      pin = 0;
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
  if (pin < 0) pin = two_cpus_ours() ? 1 : 0;
  if (pin == 1 && c.role == Config::Local) c.pin = 0;
  if (c.role == Config::Worker && c.connect_host.empty())
    usage("--role worker needs --connect HOST:PORT");
  if (c.role == Config::Leader && c.listen_host.empty()) usage("--listen wants a host");
  return c;
}

}  // namespace bench
