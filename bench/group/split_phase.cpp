// ds4tp_bench_split: what the split-phase calls cost and what they buy
// (bench/README.md, "Split-phase"). N forked ranks of one libds4tp group
// (shm or tcp), for each size:
//   blocking     ds4tp_group_all_reduce, per call;
//   start+wait   ds4tp_group_all_reduce_start then ds4tp_group_wait at
//                once: the hop to the group's progress thread and back;
//   layer loop   per layer some compute (a spin of --compute-us, as long
//                as a blocking call by default) then the layer's
//                all-reduce: in series (blocking), and overlapped (layer
//                k's all-reduce started, layer k+1's compute, then the
//                wait), per layer.
// Medians over --iters calls (layers), the slowest rank's. One line per
// case: "SPLIT transport=.. ranks=.. bytes=.. case=.. us=..".
//   ds4tp_bench_split [--ranks N] [--transport shm|tcp] [--iters N]
//                     [--bytes B,...] [--compute-us US]
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ds4tp/ds4tp.h"

namespace {

constexpr int kMaxRanks = 16;
constexpr int kCases = 4;
const char *const kCaseNames[kCases] = {"blocking", "start+wait", "layers-serial",
                                        "layers-overlap"};

struct Shared {
  std::atomic<int> port{0};
  double us[kMaxRanks][kCases] = {};
  int failed[kMaxRanks] = {};
  char error[kMaxRanks][200] = {};
};

double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

void spin_us(double us) {
  const double until = now_us() + us;
  while (now_us() < until) {
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Rank {
  ds4tp_group *g = nullptr;
  std::string err;
  bool check(int rc, const char *what) {
    if (rc != DS4TP_OK && err.empty()) err = std::string(what) + ": " + ds4tp_group_errmsg(g);
    return rc == DS4TP_OK;
  }
};

// Per-call medians of the four cases for one size; false on a failure.
bool measure(Rank &k, size_t bytes, int iters, double compute_us, double out[kCases]) {
  const uint64_t n = bytes / 4;
  std::vector<float> a(n, 1.0f), b(n, 1.0f);
  std::vector<double> t;
  for (int i = 0; i < 20; i++)  // warm-up, and the progress thread made
    if (!k.check(ds4tp_group_all_reduce(k.g, a.data(), n, DS4TP_DTYPE_F32, DS4TP_OP_SUM), "warm"))
      return false;
  ds4tp_group_request *req = nullptr;
  if (!k.check(ds4tp_group_all_reduce_start(k.g, a.data(), n, DS4TP_DTYPE_F32, DS4TP_OP_SUM, &req),
               "start") ||
      !k.check(ds4tp_group_wait(req), "wait"))
    return false;
  ds4tp_group_request_free(req);
  for (int i = 0; i < iters; i++) {
    ds4tp_group_barrier(k.g);
    const double t0 = now_us();
    if (!k.check(ds4tp_group_all_reduce(k.g, a.data(), n, DS4TP_DTYPE_F32, DS4TP_OP_SUM), "blocking"))
      return false;
    t.push_back(now_us() - t0);
  }
  out[0] = median(t);
  t.clear();
  for (int i = 0; i < iters; i++) {
    ds4tp_group_barrier(k.g);
    const double t0 = now_us();
    if (!k.check(ds4tp_group_all_reduce_start(k.g, a.data(), n, DS4TP_DTYPE_F32, DS4TP_OP_SUM, &req),
                 "start"))
      return false;
    const int rc = ds4tp_group_wait(req);
    ds4tp_group_request_free(req);
    if (!k.check(rc, "start+wait")) return false;
    t.push_back(now_us() - t0);
  }
  out[1] = median(t);
  t.clear();
  const double c = compute_us > 0 ? compute_us : out[0];
  ds4tp_group_barrier(k.g);
  for (int i = 0; i < iters; i++) {  // compute, then this layer's all-reduce
    const double t0 = now_us();
    spin_us(c);
    if (!k.check(ds4tp_group_all_reduce(k.g, a.data(), n, DS4TP_DTYPE_F32, DS4TP_OP_SUM), "serial"))
      return false;
    t.push_back(now_us() - t0);
  }
  out[2] = median(t);
  t.clear();
  ds4tp_group_barrier(k.g);
  // Layer i's all-reduce runs while layer i+1 computes into the other buffer.
  ds4tp_group_request *prev = nullptr;
  float *buf[2] = {a.data(), b.data()};
  for (int i = 0; i <= iters; i++) {
    const double t0 = now_us();
    spin_us(c);
    if (prev != nullptr) {
      const int rc = ds4tp_group_wait(prev);
      ds4tp_group_request_free(prev);
      prev = nullptr;
      if (!k.check(rc, "overlap wait")) return false;
    }
    if (i == iters) break;
    if (!k.check(ds4tp_group_all_reduce_start(k.g, buf[i % 2], n, DS4TP_DTYPE_F32, DS4TP_OP_SUM,
                                              &prev),
                 "overlap start"))
      return false;
    if (i > 0) t.push_back(now_us() - t0);
  }
  out[3] = median(t);
  return true;
}

void usage() {
  std::fprintf(stderr, "usage: ds4tp_bench_split [--ranks N] [--transport shm|tcp] [--iters N]\n"
                       "  [--bytes B,...] [--compute-us US]\n");
}

}  // namespace

int main(int argc, char **argv) {
  int ranks = 2, iters = 2000;
  int transport = DS4TP_TRANSPORT_SHM;
  double compute_us = 0;
  std::vector<size_t> sizes = {16384, 1 << 20};
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (v == nullptr) return usage(), 2;
    if (a == "--ranks") ranks = std::atoi(v);
    else if (a == "--iters") iters = std::atoi(v);
    else if (a == "--compute-us") compute_us = std::atof(v);
    else if (a == "--transport") transport = std::strcmp(v, "tcp") == 0 ? DS4TP_TRANSPORT_TCP : DS4TP_TRANSPORT_SHM;
    else if (a == "--bytes") {
      sizes.clear();
      for (const char *p = v; *p != 0;) {
        sizes.push_back(size_t(std::strtoull(p, const_cast<char **>(&p), 10)));
        if (*p == ',') p++;
      }
    } else {
      return usage(), 2;
    }
    i++;
  }
  if (ranks < 2 || ranks > kMaxRanks || iters < 1) return usage(), 2;
  for (size_t bytes : sizes) {
    auto *sh = static_cast<Shared *>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                                          MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    if (sh == MAP_FAILED) return 1;
    new (sh) Shared();
    std::vector<pid_t> kids;
    for (int r = 0; r < ranks; r++) {
      const pid_t pid = fork();
      if (pid < 0) return 1;
      if (pid > 0) {
        kids.push_back(pid);
        continue;
      }
      ds4tp_group_options o;
      ds4tp_group_options_init(&o);
      o.rank = r;
      o.group_size = ranks;
      o.rendezvous_host = "127.0.0.1";
      o.transport = transport;
      int port = 0;  // rank 0 picks one
      if (r != 0)
        while ((port = sh->port.load()) == 0) usleep(1000);
      o.rendezvous_port = port;
      Rank k;
      int rc = port < 0 ? DS4TP_EFAILED : ds4tp_group_new(&k.g, &o, nullptr);
      if (rc == DS4TP_OK && r == 0) sh->port.store(ds4tp_group_rendezvous_port(k.g));
      if (rc == DS4TP_OK) rc = ds4tp_group_connect(k.g);
      if (rc != DS4TP_OK) {
        if (r == 0) sh->port.store(-1);
        k.err = std::string("bring-up: ") + ds4tp_err_name(rc) + ": " +
                (k.g ? ds4tp_group_errmsg(k.g) : ds4tp_last_error());
      } else {
        measure(k, bytes, iters, compute_us, sh->us[r]);
      }
      sh->failed[r] = !k.err.empty();
      std::snprintf(sh->error[r], sizeof sh->error[r], "%s", k.err.c_str());
      ds4tp_group_free(k.g);
      _exit(k.err.empty() ? 0 : 1);
    }
    bool ok = true;
    for (pid_t p : kids) {
      int st = 0;
      waitpid(p, &st, 0);
      ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    for (int r = 0; r < ranks; r++)
      if (sh->failed[r]) std::fprintf(stderr, "rank %d: %s\n", r, sh->error[r]);
    if (!ok) return 1;
    for (int c = 0; c < kCases; c++) {
      double slowest = 0;
      for (int r = 0; r < ranks; r++) slowest = std::max(slowest, sh->us[r][c]);
      std::printf("SPLIT transport=%s ranks=%d bytes=%zu case=%s us=%.2f\n",
                  transport == DS4TP_TRANSPORT_TCP ? "tcp" : "shm", ranks, bytes, kCaseNames[c],
                  slowest);
    }
    munmap(sh, sizeof(Shared));
  }
  return 0;
}
