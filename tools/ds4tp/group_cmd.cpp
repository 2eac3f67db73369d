// `ds4tp group`: runs group collectives, each call checked bit for bit,
// and prints their latency table.
//
//   ds4tp group --local N [--transport auto|shm|tcp|rdma] [--dtype f32|f16|bf16|f64|i32|i64|u8]
//               [--op NAME[,NAME...]|all] [--reduce sum|max|min|prod] [--count ELEMS]
//               [--hosts H]   (the N ranks claim H hosts, a block of ranks each:
//                              the tiered plan tried on one machine)
//   ds4tp group --rank R --size N --rendezvous HOST:PORT [...]
//   mpirun -np N ds4tp group    (rank and size from OMPI_COMM_WORLD_*; also
//                                RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, SLURM_*)
//
// An all-reduce sum of f32, f16 or bf16 (the default run) is compared with
// a reference sum of random values computed here in the group's order
// (sum_order.hpp): rank order, or host-major in a tiered group
// (ds4tp_group_topology), and around the ring from the size the plan
// names. Every other op, dtype and reduction runs on exact inputs
// (group_ops.cpp), whose reference holds in any order. Public C API only.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ds4tp/ds4tp.h"
#include "elements.hpp"
#include "group_ops.hpp"
#include "sum_order.hpp"

namespace {

using namespace ds4tp_cli::elements;
using ds4tp_cli::GroupOp;
using ds4tp_cli::OpCase;
using ds4tp_cli::OpResult;
using ds4tp_cli::group_op_name;
using ds4tp_cli::run_op;

struct GArgs {
  int local = 0, rank = -1, size = -1, port = -1, transport = DS4TP_TRANSPORT_AUTO;
  int hosts = 0;  // --local: the hosts the ranks claim (DS4TP_HOST_ID)
  int dtype = DS4TP_DTYPE_F32;
  int reduce = DS4TP_OP_SUM;
  std::vector<GroupOp> ops;  // empty: the all-reduce table alone
  bool all_ops = false;      // --op all (a tiered group skips all_to_all_v)
  std::string host;
  uint64_t count = 0;  // 0 = the default size table
  int iters = 0;       // 0 = by size
};

float val(int rank, uint64_t i, int salt) {
  uint64_t h = (uint64_t(rank) * 0x9e3779b97f4a7c15ull) ^ (i * 0xc2b2ae3d27d4eb4full) ^ uint64_t(salt);
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return float(int64_t(h % 20001) - 10000) / 1000.0f;
}
float rounded(int dt, float v) {
  return dt == DS4TP_DTYPE_F32 ? v : dt == DS4TP_DTYPE_F16 ? h2f(f2h(v)) : b2f(f2b(v));
}
void store(int dt, uint8_t *p, uint64_t i, float v) {
  if (dt == DS4TP_DTYPE_F32) {
    std::memcpy(p + i * 4, &v, 4);
  } else {
    uint16_t h = dt == DS4TP_DTYPE_F16 ? f2h(v) : f2b(v);
    std::memcpy(p + i * 2, &h, 2);
  }
}

bool reduces(GroupOp op) {
  return op == GroupOp::AllReduce || op == GroupOp::ReduceScatter || op == GroupOp::Reduce;
}

// The all-reduce sum of f32, f16 or bf16 on random values, checked against
// the sum in the group's order (`order` names it); from the group's own
// buffer where it fits, as an engine would use it (over tcp a step from it
// is one send per peer).
OpResult ordered_all_reduce(ds4tp_group *g, const ds4tp::sum_order::Shape &shape,
                            const OpCase &c, const std::string &order) {
  const int me = ds4tp_group_rank(g), kSalts = 4;
  const size_t es = esize(c.dtype), bytes = c.count * es;
  std::vector<std::vector<uint8_t>> in(kSalts), want(kSalts);
  for (int s = 0; s < kSalts; s++) {
    in[size_t(s)].resize(bytes);
    want[size_t(s)].resize(bytes);
    for (uint64_t i = 0; i < c.count; i++) {
      store(c.dtype, in[size_t(s)].data(), i, val(me, i, s));
      auto value = [&](int r) { return rounded(c.dtype, val(r, i, s)); };
      auto round = [&](float v) { return rounded(c.dtype, v); };
      store(c.dtype, want[size_t(s)].data(), i,
            ds4tp::sum_order::element(shape, c.count, es, i, value, round));
    }
  }
  void *gbuf = nullptr;
  uint64_t gbytes = 0;
  std::vector<uint8_t> big;
  if (ds4tp_group_buffer(g, &gbuf, &gbytes) != 0 || bytes > gbytes) {
    big.resize(bytes);
    gbuf = big.data();
  }
  auto *buf = static_cast<uint8_t *>(gbuf);
  OpResult res;
  res.bytes = bytes;
  res.us.reserve(size_t(c.iters));
  for (int it = -20; it < c.iters; it++) {
    const int s = (it + 20) % kSalts;
    std::memcpy(buf, in[size_t(s)].data(), bytes);
    auto t0 = std::chrono::steady_clock::now();
    const int rc = ds4tp_group_all_reduce(g, buf, c.count, c.dtype, DS4TP_OP_SUM);
    auto t1 = std::chrono::steady_clock::now();
    if (rc != 0) {
      res.error = std::string("all_reduce: ") + ds4tp_err_name(rc) + ": " + ds4tp_group_errmsg(g);
      return res;
    }
    if (std::memcmp(buf, want[size_t(s)].data(), bytes) != 0) {
      uint64_t i = 0;
      while (i < bytes && buf[i] == want[size_t(s)][i]) i++;
      res.error = std::to_string(c.count) + " elements: byte " + std::to_string(i) +
                  " differs from the " + order + " reference";
      return res;
    }
    if (it >= 0) res.us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(res.us.begin(), res.us.end());
  return res;
}

int run_rank(const GArgs &a, int rank_override, int port_fd) {
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.rank = rank_override >= 0 ? rank_override : a.rank;
  if (a.local && a.hosts > 0)
    setenv("DS4TP_HOST_ID", ("local-host-" + std::to_string(o.rank * a.hosts / a.local)).c_str(), 1);
  o.group_size = a.local ? a.local : a.size;
  if (!a.host.empty()) o.rendezvous_host = a.host.c_str();
  o.rendezvous_port = a.local ? (rank_override == 0 ? 0 : a.port) : a.port;
  o.transport = a.transport;
  o.op_timeout_ms = 10000;
  ds4tp_group *g = nullptr;
  int rc = ds4tp_group_new(&g, &o, nullptr);
  if (rc != 0) {
    std::fprintf(stderr, "ds4tp group FAILED: %s: %s\n", ds4tp_err_name(rc), ds4tp_last_error());
    return 1;
  }
  if (port_fd >= 0) {
    int p = ds4tp_group_rendezvous_port(g);
    (void)!write(port_fd, &p, sizeof p);
    close(port_fd);
  }
  const int me = ds4tp_group_rank(g), n = ds4tp_group_size(g);
  auto failed = [&](const char *what, int code) {
    std::fprintf(stderr, "ds4tp group FAILED on rank %d at %s: %s: %s\n", me, what,
                 ds4tp_err_name(code), ds4tp_group_errmsg(g));
    ds4tp_group_free(g);
    return 1;
  };
  if ((rc = ds4tp_group_connect(g)) != 0) return failed("connect", rc);
  // The summation order: each host's ranks in local order, hosts in order
  // (flat: every rank alone, in rank order); the ring and the step size
  // from the plan.
  ds4tp::sum_order::Shape shape;
  int tiered = 0;
  for (int r = 0; r < n; r++) {
    int h = 0, l = 0;
    if ((rc = ds4tp_group_topology(g, r, &h, &l, &tiered)) != 0) return failed("topology", rc);
    if (!tiered) h = r, l = 0;
    auto &hosts = shape.hosts;
    if (size_t(h) >= hosts.size()) hosts.resize(size_t(h) + 1);
    if (size_t(l) >= hosts[size_t(h)].size()) hosts[size_t(h)].resize(size_t(l) + 1);
    hosts[size_t(h)][size_t(l)] = r;
  }
  char plan[512] = "";
  if ((rc = ds4tp_group_plan(g, plan, sizeof plan, nullptr)) != 0) return failed("plan", rc);
  shape.tiered = tiered != 0;
  shape.ring_from = ds4tp::sum_order::plan_size(plan, "ring", UINT64_MAX);
  shape.chunk_bytes = ds4tp::sum_order::plan_size(plan, "steps of at most", 1u << 20);

  // No --op: the all-reduce alone; an f32, f16 or bf16 sum prints the
  // classic table, checked in the group's order.
  std::vector<GroupOp> ops = a.ops.empty() ? std::vector<GroupOp>{GroupOp::AllReduce} : a.ops;
  const size_t es = esize(a.dtype);
  std::vector<uint64_t> sizes;
  if (a.count)
    sizes = {a.count};
  else
    for (uint64_t b : {4096ull, 16384ull, 65536ull, 262144ull, 1048576ull}) sizes.push_back(b / es);
  const bool ordered = a.reduce == DS4TP_OP_SUM && a.dtype <= DS4TP_DTYPE_BF16;
  const bool classic = a.ops.empty() && ordered;
  size_t ran = 0;
  bool ring = false;
  for (uint64_t c : sizes) ring = ring || c * es >= shape.ring_from;
  const std::string order =
      std::string(tiered ? "host-major" : "rank-order") +
      (ring ? " (around the ring from " + std::to_string(shape.ring_from) + " bytes)" : "");
  std::vector<std::string> lines;
  for (GroupOp op : ops) {
    if (op == GroupOp::AllToAllV && tiered && a.all_ops) {
      lines.push_back("  all_to_all_v      skipped: flat groups only, and this one is tiered");
      continue;
    }
    ran++;
    for (uint64_t c : op == GroupOp::Barrier ? std::vector<uint64_t>{0} : sizes) {
      const uint64_t bytes = c * es;
      const int iters = a.iters ? a.iters : bytes <= 65536 ? 2000 : bytes <= 262144 ? 500 : 100;
      const OpCase oc{op, a.dtype, a.reduce, c, iters};
      if ((rc = ds4tp_group_barrier(g)) != 0) return failed("barrier", rc);
      const OpResult res = op == GroupOp::AllReduce && ordered
                               ? ordered_all_reduce(g, shape, oc, order)
                               : run_op(g, oc);
      if (!res.error.empty()) {
        std::fprintf(stderr, "ds4tp group FAILED on rank %d: %s\n", me, res.error.c_str());
        ds4tp_group_free(g);
        return 1;
      }
      const double p50 = res.us[res.us.size() / 2], p99 = res.us[res.us.size() * 99 / 100];
      char what[80] = "", line[200];
      if (op != GroupOp::Barrier)
        std::snprintf(what, sizeof what, "%8" PRIu64 " bytes (%" PRIu64 " %s%s%s):", bytes, c,
                      dname(a.dtype), reduces(op) ? " " : "", reduces(op) ? op_name(a.reduce) : "");
      if (classic)  // the all-reduce table's own words
        std::snprintf(line, sizeof line, "  %8" PRIu64 " bytes (%" PRIu64 " %s): p50 %8.1f us  "
                      "p99 %8.1f us  (%d calls, verified)", bytes, c, dname(a.dtype), p50, p99, iters);
      else
        std::snprintf(line, sizeof line, "  %-16s %-32s p50 %8.1f us  p99 %8.1f us  (%d calls%s)",
                      group_op_name(op), what, p50, p99, iters,
                      op == GroupOp::Barrier ? "" : ", verified");
      lines.push_back(line);
    }
  }
  if ((rc = ds4tp_group_barrier(g)) != 0) return failed("final barrier", rc);
  if (me == 0) {
    const char *transport = ds4tp_transport_name(ds4tp_group_transport(g));
    if (classic)
      std::printf("ds4tp group OK: %d ranks, transport %s, dtype %s, every rank's result "
                  "bit-identical to the %s reference\n", n, transport, dname(a.dtype), order.c_str());
    else
      std::printf("ds4tp group OK: %d ranks, transport %s, dtype %s, reduce %s: %zu op%s, every "
                  "rank's result bit-identical to its reference\n", n, transport, dname(a.dtype),
                  op_name(a.reduce), ran, ran == 1 ? "" : "s");
    std::printf("  %s\n", plan);
    for (auto &l : lines) std::printf("%s\n", l.c_str());
    std::fflush(stdout);
  }
  ds4tp_group_free(g);
  return 0;
}

// --op all, or NAME[,NAME...]: the ops to run, in that order.
bool parse_ops(const std::string &list, GArgs &a) {
  a.ops.clear();
  a.all_ops = list == "all";
  for (size_t at = 0; !a.all_ops && at <= list.size();) {
    const size_t end = std::min(list.find(',', at), list.size());
    GroupOp op;
    if (!ds4tp_cli::parse_group_op(list.substr(at, end - at), &op)) {
      std::fprintf(stderr, "ds4tp group: --op %s: no op \"%s\"; one or more of", list.c_str(),
                   list.substr(at, end - at).c_str());
      for (int i = 0; i < ds4tp_cli::kGroupOps; i++) std::fprintf(stderr, " %s", group_op_name(GroupOp(i)));
      std::fprintf(stderr, ", comma-separated, or all\n");
      return false;
    }
    a.ops.push_back(op);
    at = end + 1;
  }
  for (int i = 0; a.all_ops && i < ds4tp_cli::kGroupOps; i++) a.ops.push_back(GroupOp(i));
  return true;
}

}  // namespace

int cmd_group(int argc, char **argv) {
  GArgs a;
  for (int i = 2; i < argc; i++) {
    std::string o = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
    auto need = [&]() {
      if (v == nullptr) {
        std::fprintf(stderr, "ds4tp group: %s needs a value\n", o.c_str());
        std::exit(2);
      }
      i++;
      return std::string(v);
    };
    if (o == "--local") a.local = std::atoi(need().c_str());
    else if (o == "--rank") a.rank = std::atoi(need().c_str());
    else if (o == "--size") a.size = std::atoi(need().c_str());
    else if (o == "--count") a.count = std::strtoull(need().c_str(), nullptr, 10);
    else if (o == "--iters") a.iters = std::atoi(need().c_str());
    else if (o == "--hosts") a.hosts = std::atoi(need().c_str());
    else if (o == "--rendezvous") {
      std::string hp = need();
      size_t c = hp.rfind(':');
      if (c == std::string::npos) { std::fprintf(stderr, "ds4tp group: --rendezvous HOST:PORT\n"); return 2; }
      a.host = hp.substr(0, c);
      a.port = std::atoi(hp.c_str() + c + 1);
    } else if (o == "--transport") {
      std::string t = need();
      a.transport = t == "tcp" ? DS4TP_TRANSPORT_TCP : t == "shm" ? DS4TP_TRANSPORT_SHM : t == "rdma" ? DS4TP_TRANSPORT_RDMA : t == "auto" ? DS4TP_TRANSPORT_AUTO : -1;
      if (a.transport < 0) { std::fprintf(stderr, "ds4tp group: --transport auto|shm|tcp|rdma\n"); return 2; }
    } else if (o == "--dtype") {
      a.dtype = parse_dtype(need());
      if (a.dtype < 0) { std::fprintf(stderr, "ds4tp group: --dtype f32|f16|bf16|f64|i32|i64|u8\n"); return 2; }
    } else if (o == "--reduce") {
      a.reduce = parse_op(need());
      if (a.reduce < 0) { std::fprintf(stderr, "ds4tp group: --reduce sum|max|min|prod\n"); return 2; }
    } else if (o == "--op") {
      if (!parse_ops(need(), a)) return 2;
    } else {
      std::fprintf(stderr, "ds4tp group: unknown option %s\n", o.c_str());
      return 2;
    }
  }
  if (a.iters < 0) { std::fprintf(stderr, "ds4tp group: --iters N needs N >= 1\n"); return 2; }
  if (!a.local) return run_rank(a, -1, -1);
  if (a.local < 2 || a.local > 16) { std::fprintf(stderr, "ds4tp group: --local 2..16\n"); return 2; }
  int p[2];
  if (pipe(p) != 0) return 1;
  std::fflush(stdout);
  std::vector<pid_t> kids;
  pid_t k0 = fork();
  if (k0 == 0) { close(p[0]); _exit(run_rank(a, 0, p[1])); }
  close(p[1]);
  kids.push_back(k0);
  int port = 0;
  if (read(p[0], &port, sizeof port) != sizeof port) port = -1;
  close(p[0]);
  if (port > 0) {
    a.port = port;
    if (a.host.empty()) a.host = "127.0.0.1";
    for (int r = 1; r < a.local; r++) {
      pid_t k = fork();
      if (k == 0) _exit(run_rank(a, r, -1));
      kids.push_back(k);
    }
  }
  int bad = port > 0 ? 0 : 1;
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad++;
  }
  return bad ? 1 : 0;
}
