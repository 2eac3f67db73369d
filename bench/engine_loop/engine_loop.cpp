// ds4tp_bench_engine: an engine's decode loop on N ranks (forked
// processes), per layer some compute then one collective, timed per token
// on every rank (bench/README.md, "Engine loop"). The implementations:
//   --impl shm | tcp  libds4tp groups over that medium, the wait policy
//                     from --spin (adaptive, always, never, or a spin in us);
//                     the engine writes its partials into the group's
//                     buffer (ds4tp_group_buffer), as the API suggests, or
//                     with --private-buffer into its own;
//   --impl raw        the raw busy-polling TCP mesh (raw_mesh.hpp);
//   --impl raw-poll   the same mesh spinning on poll() instead of recv().
// Open MPI runs the same loop from engine_mpi.c (bench/engine_loop/run.sh).
// Prints one ENGINE line (engine_core.h); exits 1 naming the rank and its
// error when any rank fails.
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ds4tp/ds4tp.h"
#include "engine_core.h"
#include "raw_mesh.hpp"

namespace {

struct Shared {
  std::atomic<int> port{0};  // rank 0's rendezvous port, once it listens
  engine_result result[ENGINE_MAX_RANKS];
};

struct Lib {
  ds4tp_group *g = nullptr;
};

int lib_coll(void *ctx, int coll, float *buf, const float *in, float *out, size_t bytes,
             char *err, size_t cap) {
  ds4tp_group *g = static_cast<Lib *>(ctx)->g;
  const int rc = coll == ENGINE_ALL_REDUCE
                     ? ds4tp_group_all_reduce(g, buf, bytes / 4, DS4TP_DTYPE_F32, DS4TP_OP_SUM)
                     : ds4tp_group_all_gather(g, in, out, bytes / uint64_t(ds4tp_group_size(g)));
  if (rc != DS4TP_OK) std::snprintf(err, cap, "%s", ds4tp_group_errmsg(g));
  return rc != DS4TP_OK;
}

void lib_mark(void *ctx) { ds4tp_group_stats_reset(static_cast<Lib *>(ctx)->g); }

int raw_coll(void *ctx, int coll, float *buf, const float *in, float *out, size_t bytes,
             char *err, size_t cap) {
  return static_cast<engine::RawMesh *>(ctx)->collective(coll, buf, in, out, bytes, err, cap);
}

bool parse_spin(const char *v, int32_t &spin) {
  if (std::strcmp(v, "adaptive") == 0) spin = DS4TP_SPIN_ADAPTIVE;
#ifdef DS4TP_SPIN_ALWAYS  // a library from before the sentinels (run.sh --before) has none
  else if (std::strcmp(v, "always") == 0) spin = DS4TP_SPIN_ALWAYS;
  else if (std::strcmp(v, "never") == 0) spin = DS4TP_SPIN_NEVER;
#endif
  else if (*v >= '0' && *v <= '9') spin = int32_t(std::atoi(v));
  else return false;
  return true;
}

// One rank of a libds4tp group: bring-up, the loop, its wait counters.
void run_lib(engine_cfg c, int transport, int32_t spin, bool own_buffer, Shared &sh,
             engine_result &out) {
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  o.rank = c.rank;
  o.group_size = c.ranks;
  o.rendezvous_host = "127.0.0.1";
  o.transport = transport;
  o.spin_us = spin;
  if (c.rank != 0) {
    while (sh.port.load() == 0) usleep(1000);
    o.rendezvous_port = sh.port.load();
  } else {
    o.rendezvous_port = 0;
  }
  Lib lib;
  int rc = ds4tp_group_new(&lib.g, &o, nullptr);
  if (rc == DS4TP_OK && c.rank == 0) sh.port.store(ds4tp_group_rendezvous_port(lib.g));
  if (rc == DS4TP_OK) rc = ds4tp_group_connect(lib.g);
  if (rc != DS4TP_OK) {
    out.failed = 1;
    std::snprintf(out.error, sizeof out.error, "bring-up: %s",
                  lib.g ? ds4tp_group_errmsg(lib.g) : ds4tp_last_error());
    if (c.rank == 0) sh.port.store(-1);
    ds4tp_group_free(lib.g);
    return;
  }
  void *gbuf = nullptr;
  uint64_t gbytes = 0;
  if (own_buffer && ds4tp_group_buffer(lib.g, &gbuf, &gbytes) == DS4TP_OK && gbytes >= c.bytes)
    c.buffer = static_cast<float *>(gbuf);  // the engine writes its partials there
  if (engine_run(&c, lib_coll, lib_mark, &lib, &out) == 0) {
    ds4tp_stats st;
    std::memset(&st, 0, sizeof st);
    st.size = sizeof st;
#ifdef DS4TP_SPIN_ALWAYS  // the wait phases came with the sentinels
    if (ds4tp_group_stats_read(lib.g, &st) == DS4TP_OK) {
      out.waits = st.waits;
      out.spin_ns = st.wait_spin_ns;
      out.yield_ns = st.wait_yield_ns;
      out.sleep_ns = st.wait_sleep_ns;
    }
#endif
  }
  ds4tp_group_free(lib.g);
}

void usage() {
  std::fprintf(stderr,
               "usage: ds4tp_bench_engine --impl shm|tcp|raw|raw-poll\n"
               "  [--spin adaptive|always|never|US] [--private-buffer]\n"
               "  [--pin] [loop options]\n");
  engine_usage();
}

}  // namespace

int main(int argc, char **argv) {
  std::vector<unsigned char> used(size_t(argc) + 1, 0);
  engine_cfg cfg;
  if (engine_parse(&cfg, argc, argv, used.data()) != 0) return 2;
  std::string impl;
  int32_t spin = DS4TP_SPIN_ADAPTIVE;
  bool pin = false, lib_buffer = true;
  for (int i = 1; i < argc; i++) {
    if (used[size_t(i)]) continue;
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (std::strcmp(a, "--impl") == 0 && v) {
      impl = v;
      i++;
    } else if (std::strcmp(a, "--spin") == 0 && v && parse_spin(v, spin)) {
      i++;
    } else if (std::strcmp(a, "--pin") == 0) {
      pin = true;
    } else if (std::strcmp(a, "--private-buffer") == 0) {
      lib_buffer = false;
    } else {
      usage();
      return 2;
    }
  }
  if (impl != "shm" && impl != "tcp" && impl != "raw" && impl != "raw-poll") {
    usage();
    return 2;
  }
  auto *sh = static_cast<Shared *>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                                        MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (sh == MAP_FAILED) return 1;
  new (sh) Shared();
  std::vector<int> ports, listeners;
  if (impl.rfind("raw", 0) == 0) listeners = engine::RawMesh::listen_all(cfg.ranks, ports);
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  std::vector<pid_t> kids;
  for (int r = 0; r < cfg.ranks; r++) {
    const pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid > 0) {
      kids.push_back(pid);
      continue;
    }
    cfg.rank = r;
    engine_result &out = sh->result[r];
    if (pin) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(int(r % cpus), &set);
      sched_setaffinity(0, sizeof set, &set);
    }
    if (impl.rfind("raw", 0) == 0) {
      engine::RawMesh mesh(impl == "raw" ? engine::RawMesh::Spin::Recv
                                         : engine::RawMesh::Spin::Poll);
      std::string err;
      if (!mesh.connect(r, cfg.ranks, listeners, ports, err)) {
        out.failed = 1;
        std::snprintf(out.error, sizeof out.error, "%s", err.c_str());
        _exit(1);
      }
      engine_run(&cfg, raw_coll, nullptr, &mesh, &out);
    } else {
      run_lib(cfg, impl == "shm" ? DS4TP_TRANSPORT_SHM : DS4TP_TRANSPORT_TCP, spin, lib_buffer,
              *sh, out);
    }
    _exit(out.failed ? 1 : 0);
  }
  for (int fd : listeners) close(fd);
  bool ok = true;
  for (pid_t p : kids) {
    int st = 0;
    waitpid(p, &st, 0);
    ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  for (int r = 0; r < cfg.ranks; r++)
    if (sh->result[r].failed) std::fprintf(stderr, "rank %d: %s\n", r, sh->result[r].error);
  if (!ok) {
    std::fprintf(stderr, "ds4tp_bench_engine: a rank failed\n");
    return 1;
  }
  std::string name = impl == "raw" ? "raw-busy" : impl == "raw-poll" ? impl : "lib-" + impl;
  if (impl.rfind("raw", 0) != 0 && spin != DS4TP_SPIN_ADAPTIVE)
    name += spin == -2 ? "/always" : spin == -3 ? "/never" : "/spin" + std::to_string(spin);
  if (impl.rfind("raw", 0) != 0 && !lib_buffer) name += "/private";
  engine_report(&cfg, name.c_str(), sh->result);
  return 0;
}
