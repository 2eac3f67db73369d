// ds4tp_bench_service: what each way of driving the gates costs.
//
// Two processes on this host (the worker is forked), one pair, row gates
// of --embd floats (default 4096 = 16 KiB). Variants, run in turn on the
// same pair, both ranks walking the same sequence:
//   call       the engine thread calls ds4tp_gate_exchange
//   callback   the engine thread calls a ds4tp_gate_fn (ds4tp_gate_callback)
//   service/*  a "kernel" thread stores the ready word and spins on the
//              release word; the library's gate service runs the exchange,
//              with several wait policies (the pair under it keeps its
//              default, adaptive, in every variant)
// Between gates the engine "computes" for --gap-us, as a GPU does between
// two gates; that is what lets a service with a short spin fall asleep.
// The compute is a sleep and the kernel's wait yields at once, because on
// a GPU neither costs a CPU: the only CPU spinners are the gate threads
// (the caller, or the service), as in a real GPU engine. Reported: the leader's per-gate latency from the moment its
// partial is ready until the peer's has landed (calls: the call itself;
// service: ready store to release observed), p50 / p99 / mean in us.
// Every payload is checked on arrival.
//
//   ds4tp_bench_service [--transport auto|tcp|shm] [--iters N] [--gap-us N]
//                       [--embd N] [--only service]
// (--only service: the service variants alone, as bench/loaded.sh runs it)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>
#include <time.h>
#include "ds4tp/ds4tp.h"
#include "../examples/common/spawn_worker.h"

namespace {

using Clock = std::chrono::steady_clock;

uint64_t now_ns() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

void compute_elsewhere(uint64_t ns) {
  if (ns == 0) return;
  timespec ts{time_t(ns / 1000000000ull), long(ns % 1000000000ull)};
  nanosleep(&ts, nullptr);
}

struct Variant {
  const char *name;
  int kind;  // 0 call, 1 callback, 2 service
  int spin_us, yield_us, sleep_us;
};

const Variant kVariants[] = {
    {"call", 0, 0, 0, 0},
    {"callback", 1, 0, 0, 0},
    {"service adaptive (default)", 2, DS4TP_SPIN_ADAPTIVE, 10000, 20},
    {"service spin 1000us", 2, 1000, 10000, 20},
    {"service spin 0, yield", 2, 0, 10000, 20},
    {"service always-spin", 2, 1000000, 10000, 20},
    {"service sleep 20us", 2, 0, 0, 20},
    {"service sleep 100us", 2, 0, 0, 100},
};

struct Config {
  int transport = DS4TP_TRANSPORT_AUTO;
  int iters = 2000, warm = 200, gap_us = 50, embd = 4096;
  int worker_port = 0;
  bool service_only = false;
};

struct Rank {
  ds4tp_pair *tp;
  int rank;
  uint8_t *slab;
  ds4tp_slab_layout l;
  uint64_t seq = 0;
  int bad = 0;

  uint32_t slots() const { return l.slots; }
  float *out(uint32_t s) const { return reinterpret_cast<float *>(slab + l.out_offset + s * l.slot_stride); }
  float *in(uint32_t s) const { return reinterpret_cast<float *>(slab + l.in_offset + s * l.slot_stride); }
  uint64_t *ready(uint32_t s) const {
    return reinterpret_cast<uint64_t *>(slab + l.gpu_flags_offset + s * l.flag_stride);
  }
  uint64_t *release(uint32_t s) const {
    return reinterpret_cast<uint64_t *>(slab + l.gpu_release_offset + s * l.flag_stride);
  }
  // Stamp the partial; check the peer's stamp after the gate.
  void fill(uint32_t s) {
    float *o = out(s);
    o[0] = float(seq % 1000003);
    o[l.vec_bytes / 4 - 1] = float(rank + 1);
  }
  void check(uint32_t s) {
    const float *i = in(s);
    if (i[0] != float(seq % 1000003) || i[l.vec_bytes / 4 - 1] != float(2 - rank)) bad++;
  }
};

// One gate of the given variant; returns its latency in ns (0 on failure).
uint64_t one_gate(Rank &r, const Variant &v, ds4tp_gate_fn fn) {
  r.seq++;
  const uint32_t s = uint32_t((r.seq - 1) % r.slots());
  r.fill(s);
  uint64_t t0 = now_ns(), t1;
  if (v.kind == 0 || v.kind == 1) {
    int ok = v.kind == 0 ? ds4tp_gate_exchange(r.tp, s / 2, s % 2, r.seq) == DS4TP_OK
                         : fn(r.tp, s / 2, s % 2, r.seq);
    t1 = now_ns();
    if (!ok) return 0;
  } else {
    __atomic_store_n(r.ready(s), r.seq, __ATOMIC_RELEASE);
    uint64_t w;
    while ((w = __atomic_load_n(r.release(s), __ATOMIC_ACQUIRE)) < r.seq) sched_yield();
    t1 = now_ns();
    if (w == DS4TP_GATE_POISON) return 0;
  }
  r.check(s);
  return t1 - t0 ? t1 - t0 : 1;
}

int run_rank(const Config &c, ds4tp_pair *tp) {
  Rank r{tp, ds4tp_rank(tp), nullptr, {}};
  r.l.size = sizeof r.l;
  int rc = ds4tp_connect(tp);
  if (rc == DS4TP_OK) rc = ds4tp_attach_slab(tp, nullptr, 0);
  if (rc == DS4TP_OK) rc = ds4tp_slab_layout_get(tp, &r.l);
  if (rc != DS4TP_OK) {
    std::fprintf(stderr, "bench rank %d: %s\n", r.rank, ds4tp_errmsg(tp));
    return 1;
  }
  r.slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
  if (r.rank == 0)
    std::printf("ds4tp gate integration bench: transport %s, %d-byte row gates, %d iterations, "
                "%d us compute between gates, %u CPUs\n",
                ds4tp_transport_name(ds4tp_transport_active(tp)), c.embd * 4, c.iters, c.gap_us,
                std::thread::hardware_concurrency());
  std::vector<uint64_t> lat;
  lat.reserve(size_t(c.iters));
  ds4tp_gate_fn fn = ds4tp_gate_callback;
  for (const Variant &v : kVariants) {
    if (c.service_only && v.kind != 2) continue;
    if (v.kind == 2) {
      ds4tp_gate_service_options o;
      ds4tp_gate_service_options_init(&o);
      o.spin_us = v.spin_us;
      o.yield_us = v.yield_us;
      o.sleep_us = v.sleep_us;
      if (ds4tp_gate_service_start(tp, &o) != DS4TP_OK) {
        std::fprintf(stderr, "bench rank %d: service start: %s\n", r.rank, ds4tp_errmsg(tp));
        return 1;
      }
    }
    lat.clear();
    for (int i = 0; i < c.warm + c.iters; i++) {
      compute_elsewhere(uint64_t(c.gap_us) * 1000);
      uint64_t ns = one_gate(r, v, fn);
      if (ns == 0) {
        std::fprintf(stderr, "bench rank %d: %s gate %llu failed: %s\n", r.rank, v.name,
                     (unsigned long long)r.seq, ds4tp_errmsg(tp));
        return 1;
      }
      if (i >= c.warm) lat.push_back(ns);
    }
    if (v.kind == 2 && ds4tp_gate_service_stop(tp) != DS4TP_OK) {
      std::fprintf(stderr, "bench rank %d: service stop: %s\n", r.rank, ds4tp_errmsg(tp));
      return 1;
    }
    if (r.rank == 0) {
      std::sort(lat.begin(), lat.end());
      double sum = 0;
      for (uint64_t x : lat) sum += double(x);
      std::printf("  %-32s p50 %8.1f us   p99 %8.1f us   mean %8.1f us\n", v.name,
                  double(lat[lat.size() / 2]) / 1e3, double(lat[lat.size() * 99 / 100]) / 1e3,
                  sum / double(lat.size()) / 1e3);
    }
  }
  // A closing gate as a barrier: a rank that finished first must not exit
  // (failing the peer's pair, whose service then poisons the release word)
  // while the peer's engine has yet to see its last release.
  if (one_gate(r, kVariants[0], fn) == 0) {
    std::fprintf(stderr, "bench rank %d: closing gate failed: %s\n", r.rank, ds4tp_errmsg(tp));
    return 1;
  }
  if (r.bad) {
    std::fprintf(stderr, "bench rank %d: %d payloads arrived wrong\n", r.rank, r.bad);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  Config c;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--transport")
      c.transport = v == "tcp" ? DS4TP_TRANSPORT_TCP : v == "shm" ? DS4TP_TRANSPORT_SHM : DS4TP_TRANSPORT_AUTO;
    else if (a == "--iters") c.iters = std::max(10, std::atoi(v.c_str()));
    else if (a == "--gap-us") c.gap_us = std::max(0, std::atoi(v.c_str()));
    else if (a == "--embd") c.embd = std::max(1, std::atoi(v.c_str()));
    else if (a == "--role-worker") c.worker_port = std::atoi(v.c_str());
    else if (a == "--only" && v == "service") c.service_only = true;
    else {
      std::fprintf(stderr, "usage: ds4tp_bench_service [--transport auto|tcp|shm] [--iters N] "
                           "[--gap-us N] [--embd N] [--only service]\n");
      return 2;
    }
  }
  c.warm = std::max(10, c.iters / 10);
  ds4tp_identity id;
  ds4tp_identity_init(&id);
  id.model_bytes = 1;
  id.n_layer = 8;
  id.n_embd = uint32_t(c.embd);
  id.n_vocab = 1000;
  id.quant_bits = 32;
  ds4tp_pair *tp = nullptr;
  pid_t child = 0;
  if (start_role(&tp, &child, c.transport, c.worker_port, &id, argc, argv, "bench")) return 1;
  return end_role(tp, child, run_rank(c, tp));
}
