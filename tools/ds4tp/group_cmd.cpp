// `ds4tp group`: runs a group all-reduce check and latency table.
//
//   ds4tp group --local N [--transport auto|shm|tcp|rdma] [--dtype f32|f16|bf16] [--count ELEMS]
//               [--hosts H]   (the N ranks claim H hosts, a block of ranks each:
//                              the tiered plan tried on one machine)
//   ds4tp group --rank R --size N --rendezvous HOST:PORT [...]
//   mpirun -np N ds4tp group    (rank and size from OMPI_COMM_WORLD_*; also
//                                RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, SLURM_*)
//
// Every iteration's result is compared bit for bit with a reference sum
// computed here in the group's order (sum_order.hpp): rank order, or
// host-major in a tiered group (ds4tp_group_topology), and around the ring
// from the size the plan names. Public C API only.
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
#include "sum_order.hpp"

namespace {

struct GArgs {
  int local = 0, rank = -1, size = -1, port = -1, transport = DS4TP_TRANSPORT_AUTO;
  int hosts = 0;  // --local: the hosts the ranks claim (DS4TP_HOST_ID)
  int dtype = DS4TP_DTYPE_F32;
  std::string host;
  uint64_t count = 0;  // 0 = the default size table
  int iters = 0;       // 0 = by size
};

uint32_t fbits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float ffrom(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
float h2f(uint16_t h) {
  uint32_t s = uint32_t(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0) return ffrom(s) + (s ? -1.0f : 1.0f) * float(m) * 5.9604644775390625e-8f;
  if (e == 31) return ffrom(s | 0x7f800000u | (m << 13));
  return ffrom(s | ((e + 112) << 23) | (m << 13));
}
uint16_t f2h(float f) {  // round to nearest even, via the f32 grid of f16
  uint32_t x = fbits(f), s = (x >> 16) & 0x8000;
  float a = std::fabs(f);
  if (a != a) return uint16_t(s | 0x7e00);
  if (a >= 65520.0f) return uint16_t(s | 0x7c00);
  if (a < 6.103515625e-05f) {  // subnormal: multiples of 2^-24, round by the FPU
    float q = a * 16777216.0f;
    return uint16_t(s | uint32_t(std::nearbyint(q)));
  }
  uint32_t ax = fbits(a), lsb = (ax >> 13) & 1;
  ax += 0xfff + lsb;
  return uint16_t(s | (((ax >> 23) - 112) << 10) | ((ax >> 13) & 0x3ff));
}
float b2f(uint16_t h) { return ffrom(uint32_t(h) << 16); }
uint16_t f2b(float f) {
  uint32_t x = fbits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);
  return uint16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}
size_t esize(int dt) { return dt == DS4TP_DTYPE_F32 ? 4 : 2; }
const char *dname(int dt) { return dt == DS4TP_DTYPE_F32 ? "f32" : dt == DS4TP_DTYPE_F16 ? "f16" : "bf16"; }

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

  std::vector<uint64_t> sizes;
  if (a.count)
    sizes = {a.count};
  else
    for (uint64_t b : {4096ull, 16384ull, 65536ull, 262144ull, 1048576ull}) sizes.push_back(b / esize(a.dtype));
  bool ring = false;
  for (uint64_t c : sizes) ring = ring || c * esize(a.dtype) >= shape.ring_from;
  const std::string order_words =
      std::string(tiered ? "host-major" : "rank-order") +
      (ring ? " (around the ring from " + std::to_string(shape.ring_from) + " bytes)" : "");
  const char *order = order_words.c_str();
  const int kSalts = 4;
  std::vector<std::string> lines;
  for (uint64_t c : sizes) {
    const size_t bytes = c * esize(a.dtype);
    std::vector<std::vector<uint8_t>> in(kSalts), want(kSalts);
    for (int s = 0; s < kSalts; s++) {
      in[size_t(s)].resize(bytes);
      want[size_t(s)].resize(bytes);
      for (uint64_t i = 0; i < c; i++) {
        store(a.dtype, in[size_t(s)].data(), i, val(me, i, s));
        auto value = [&](int r) { return rounded(a.dtype, val(r, i, s)); };
        auto round = [&](float v) { return rounded(a.dtype, v); };
        const float acc =
            ds4tp::sum_order::element(shape, c, esize(a.dtype), i, value, round);
        store(a.dtype, want[size_t(s)].data(), i, acc);
      }
    }
    // The group's own buffer, as an engine would use it (over tcp a step
    // from it is one send per peer); a larger call takes a vector.
    void *gbuf = nullptr;
    uint64_t gbytes = 0;
    std::vector<uint8_t> big;
    if (ds4tp_group_buffer(g, &gbuf, &gbytes) != 0 || bytes > gbytes) {
      big.resize(bytes);
      gbuf = big.data();
    }
    auto *buf = static_cast<uint8_t *>(gbuf);
    int iters = a.iters ? a.iters : (bytes <= 65536 ? 2000 : bytes <= 262144 ? 500 : 100);
    std::vector<double> us;
    us.reserve(size_t(iters));
    if ((rc = ds4tp_group_barrier(g)) != 0) return failed("barrier", rc);
    for (int it = -20; it < iters; it++) {
      const int s = (it + 20) % kSalts;
      std::memcpy(buf, in[size_t(s)].data(), bytes);
      auto t0 = std::chrono::steady_clock::now();
      rc = ds4tp_group_all_reduce(g, buf, c, a.dtype, DS4TP_OP_SUM);
      auto t1 = std::chrono::steady_clock::now();
      if (rc != 0) return failed("all_reduce", rc);
      if (std::memcmp(buf, want[size_t(s)].data(), bytes) != 0) {
        uint64_t i = 0;
        while (i < bytes && buf[i] == want[size_t(s)][i]) i++;
        std::fprintf(stderr, "ds4tp group FAILED on rank %d: %" PRIu64 " elements: byte %" PRIu64
                     " differs from the %s reference\n", me, c, i, order);
        ds4tp_group_free(g);
        return 1;
      }
      if (it >= 0) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    std::sort(us.begin(), us.end());
    char line[200];
    std::snprintf(line, sizeof line, "  %8zu bytes (%" PRIu64 " %s): p50 %8.1f us  p99 %8.1f us  (%d calls, verified)",
                  bytes, c, dname(a.dtype), us[us.size() / 2], us[us.size() * 99 / 100], iters);
    lines.push_back(line);
  }
  if ((rc = ds4tp_group_barrier(g)) != 0) return failed("final barrier", rc);
  if (me == 0) {
    std::printf("ds4tp group OK: %d ranks, transport %s, dtype %s, every rank's result bit-identical to the %s reference\n",
                n, ds4tp_transport_name(ds4tp_group_transport(g)), dname(a.dtype), order);
    char plan[512];
    if (ds4tp_group_plan(g, plan, sizeof plan, nullptr) == DS4TP_OK) std::printf("  %s\n", plan);
    for (auto &l : lines) std::printf("%s\n", l.c_str());
    std::fflush(stdout);
  }
  ds4tp_group_free(g);
  return 0;
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
      std::string t = need();
      a.dtype = t == "f32" ? DS4TP_DTYPE_F32 : t == "f16" ? DS4TP_DTYPE_F16 : t == "bf16" ? DS4TP_DTYPE_BF16 : -1;
      if (a.dtype < 0) { std::fprintf(stderr, "ds4tp group: --dtype f32|f16|bf16\n"); return 2; }
    } else {
      std::fprintf(stderr, "ds4tp group: unknown option %s\n", o.c_str());
      return 2;
    }
  }
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
