/*
 * ds4tp_demo: a toy tensor-parallel model split across two processes.
 *
 * Each layer has two gates (attention, FFN). At a gate each rank runs its
 * half of a small MLP block on the normalised hidden state, writes the
 * partial into its slab out vector, swaps it with the peer through
 * ds4tp_gate_exchange, and adds (own + peer) to the hidden state. The next
 * token is a hash of the final hidden state, so both ranks walk the same
 * token sequence without any control traffic.
 *
 * Every rank also computes the whole model in-process and checks that its
 * hidden state is bit-identical to that single-process result; at the end
 * the two ranks swap their final states with a big gate and compare.
 *
 *   ds4tp_demo                      leader here, worker spawned (loopback)
 *   ds4tp_demo --role leader --port 7070 [--listen 0.0.0.0]
 *   ds4tp_demo --role worker --connect HOST:7070
 * Common: --layers N --embd N --ffn N --tokens N --transport auto|tcp|shm
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ds4tp/ds4tp.h"

#include "../common/self_exe.h"

typedef struct {
  int layers, embd, ffn, tokens, transport, spin_us;
  int role; /* 0 = spawn both */
  const char *host;
  int port;
} config;

/* ---- deterministic toy weights -------------------------------------- */

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static float weight(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = mix(a * 0x100000001b3ull ^ mix(b * 131 + c));
  return (float)((double)(h >> 40) / (double)(1ull << 24) - 0.5) * 0.1f;
}

/* One gate's block for one rank: up (half x embd), down (embd x half). */
typedef struct {
  float *up, *down;
} block;

static void make_block(block *b, const config *c, int layer, int gate, int rank) {
  int half = c->ffn / 2;
  b->up = malloc(sizeof(float) * (size_t)half * (size_t)c->embd);
  b->down = malloc(sizeof(float) * (size_t)half * (size_t)c->embd);
  if (!b->up || !b->down) {
    fprintf(stderr, "demo: out of memory for weights\n");
    exit(1);
  }
  uint64_t id = (uint64_t)layer * 2 + (uint64_t)gate;
  for (int r = 0; r < half; r++)
    for (int e = 0; e < c->embd; e++)
      b->up[(size_t)r * c->embd + e] = weight(id * 2, (uint64_t)(rank * half + r), (uint64_t)e);
  for (int e = 0; e < c->embd; e++)
    for (int r = 0; r < half; r++)
      b->down[(size_t)e * half + r] = weight(id * 2 + 1, (uint64_t)e, (uint64_t)(rank * half + r));
}

/* partial = down * relu(up * rmsnorm(h)); the same code on every rank and
 * in the reference, so results are bit-identical. */
static void block_forward(const block *b, const config *c, const float *h, float *x,
                          float *act, float *partial) {
  int half = c->ffn / 2;
  double ss = 0;
  for (int e = 0; e < c->embd; e++) ss += (double)h[e] * h[e];
  float inv = (float)(1.0 / sqrt(ss / c->embd + 1e-6));
  for (int e = 0; e < c->embd; e++) x[e] = h[e] * inv;
  for (int r = 0; r < half; r++) {
    float s = 0;
    const float *w = b->up + (size_t)r * c->embd;
    for (int e = 0; e < c->embd; e++) s += w[e] * x[e];
    act[r] = s > 0 ? s : 0;
  }
  for (int e = 0; e < c->embd; e++) {
    float s = 0;
    const float *w = b->down + (size_t)e * half;
    for (int r = 0; r < half; r++) s += w[r] * act[r];
    partial[e] = s;
  }
}

static void embed(float *h, int embd, int token) {
  for (int e = 0; e < embd; e++) h[e] = weight(0xE11Bull, (uint64_t)token, (uint64_t)e) * 10.0f;
}

static int next_token(const float *h, int embd) {
  uint64_t acc = 0;
  for (int e = 0; e < embd; e++) {
    uint32_t bits;
    memcpy(&bits, &h[e], 4);
    acc = mix(acc ^ bits);
  }
  return (int)(acc % 32000);
}

/* ---- helpers ---------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void usage(void) {
  fprintf(stderr,
          "usage: ds4tp_demo [--role leader|worker] [--port P] [--listen HOST]\n"
          "                  [--connect HOST:PORT] [--layers N] [--embd N] [--ffn N]\n"
          "                  [--tokens N] [--transport auto|tcp|shm|rdma] [--spin-us N]\n");
}

static int parse_transport(const char *s) {
  if (!strcmp(s, "auto")) return DS4TP_TRANSPORT_AUTO;
  if (!strcmp(s, "tcp")) return DS4TP_TRANSPORT_TCP;
  if (!strcmp(s, "shm")) return DS4TP_TRANSPORT_SHM;
  if (!strcmp(s, "rdma")) return DS4TP_TRANSPORT_RDMA;
  return -1;
}

static int parse_args(int argc, char **argv, config *c) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage();
      exit(0);
    }
    if (!v) {
      fprintf(stderr, "demo: %s needs a value\n", a);
      return -1;
    }
    i++;
    if (!strcmp(a, "--role")) {
      if (!strcmp(v, "leader")) c->role = DS4TP_ROLE_LEADER;
      else if (!strcmp(v, "worker")) c->role = DS4TP_ROLE_WORKER;
      else return -1;
    } else if (!strcmp(a, "--port")) {
      c->port = atoi(v);
    } else if (!strcmp(a, "--listen")) {
      c->host = v;
    } else if (!strcmp(a, "--connect")) {
      static char host[256];
      const char *colon = strrchr(v, ':');
      if (!colon || (size_t)(colon - v) >= sizeof host) return -1;
      memcpy(host, v, (size_t)(colon - v));
      host[colon - v] = 0;
      c->host = host;
      c->port = atoi(colon + 1);
    } else if (!strcmp(a, "--layers")) {
      c->layers = atoi(v);
    } else if (!strcmp(a, "--embd")) {
      c->embd = atoi(v);
    } else if (!strcmp(a, "--ffn")) {
      c->ffn = atoi(v);
    } else if (!strcmp(a, "--tokens")) {
      c->tokens = atoi(v);
    } else if (!strcmp(a, "--spin-us")) {
      c->spin_us = atoi(v);
    } else if (!strcmp(a, "--transport")) {
      c->transport = parse_transport(v);
      if (c->transport < 0) return -1;
    } else {
      fprintf(stderr, "demo: unknown option %s\n", a);
      return -1;
    }
  }
  if (c->layers < 1 || c->layers > 128 || c->embd < 4 || c->ffn < 2 || c->ffn % 2 ||
      c->tokens < 1)
    return -1;
  return 0;
}

/* ---- one rank ---------------------------------------------------------- */

static int run_rank(const config *c, ds4tp_pair *tp, pid_t child) {
  int rank = ds4tp_rank(tp);
  int embd = c->embd, L = c->layers;
  int ngates = L * 2;
  block *mine = calloc((size_t)ngates, sizeof *mine);
  block *full0 = calloc((size_t)ngates, sizeof *full0);
  block *full1 = calloc((size_t)ngates, sizeof *full1);
  float *h = calloc((size_t)embd, 4), *ref = calloc((size_t)embd, 4);
  float *x = calloc((size_t)embd, 4), *act = calloc((size_t)c->ffn, 4);
  float *p0 = calloc((size_t)embd, 4), *p1 = calloc((size_t)embd, 4);
  float *peer_final = calloc((size_t)embd, 4);
  uint64_t *lat = calloc((size_t)ngates * (size_t)c->tokens, sizeof *lat);
  if (!mine || !full0 || !full1 || !h || !ref || !x || !act || !p0 || !p1 || !peer_final || !lat) {
    fprintf(stderr, "demo: out of memory\n");
    return 1;
  }
  for (int g = 0; g < ngates; g++) {
    make_block(&mine[g], c, g / 2, g % 2, rank);
    make_block(&full0[g], c, g / 2, g % 2, 0); /* the single-process reference */
    make_block(&full1[g], c, g / 2, g % 2, 1);
  }

  int rc = ds4tp_connect(tp);
  if (rc != DS4TP_OK) {
    fprintf(stderr, "demo rank %d: connect failed: %s: %s\n", rank, ds4tp_err_name(rc),
            ds4tp_errmsg(tp));
    return 1;
  }
  rc = ds4tp_attach_slab(tp, NULL, 0); /* library-allocated slab */
  if (rc != DS4TP_OK) {
    fprintf(stderr, "demo rank %d: attach failed: %s\n", rank, ds4tp_errmsg(tp));
    return 1;
  }
  uint8_t *slab = ds4tp_slab_base(tp);

  int token = 1, ref_token = 1, mismatches = 0;
  uint64_t seq = 0;
  size_t nlat = 0;
  double t0 = now_s();
  for (int t = 0; t < c->tokens; t++) {
    embed(h, embd, token);
    embed(ref, embd, ref_token);
    for (int g = 0; g < ngates; g++) {
      int layer = g / 2, gate = g % 2;
      float *out = (float *)(slab + ds4tp_slab_out_offset(tp, (uint32_t)layer, (uint32_t)gate));
      float *in = (float *)(slab + ds4tp_slab_in_offset(tp, (uint32_t)layer, (uint32_t)gate));
      block_forward(&mine[g], c, h, x, act, out);
      struct timespec a, b;
      clock_gettime(CLOCK_MONOTONIC, &a);
      rc = ds4tp_gate_exchange(tp, (uint32_t)layer, (uint32_t)gate, ++seq);
      clock_gettime(CLOCK_MONOTONIC, &b);
      if (rc != DS4TP_OK) {
        fprintf(stderr, "demo rank %d: gate failed: %s: %s\n", rank, ds4tp_err_name(rc),
                ds4tp_errmsg(tp));
        return 1;
      }
      lat[nlat++] = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ull + (uint64_t)(b.tv_nsec - a.tv_nsec);
      for (int e = 0; e < embd; e++) h[e] += out[e] + in[e];
      /* reference: both halves in this process */
      block_forward(&full0[g], c, ref, x, act, p0);
      block_forward(&full1[g], c, ref, x, act, p1);
      for (int e = 0; e < embd; e++) ref[e] += p0[e] + p1[e];
    }
    if (memcmp(h, ref, (size_t)embd * 4) != 0) mismatches++;
    token = next_token(h, embd);
    ref_token = next_token(ref, embd);
  }
  double elapsed = now_s() - t0;

  /* Both ranks must end in the same state: swap it and compare. */
  rc = ds4tp_big_gate_exchange(tp, 0, 1, h, peer_final, (uint64_t)embd * 4);
  if (rc != DS4TP_OK) {
    fprintf(stderr, "demo rank %d: final big gate failed: %s\n", rank, ds4tp_errmsg(tp));
    return 1;
  }
  int same_as_peer = memcmp(h, peer_final, (size_t)embd * 4) == 0;

  if (rank == 0) {
    qsort(lat, nlat, sizeof *lat, cmp_u64);
    double p50 = (double)lat[nlat / 2] / 1000.0;
    double p99 = (double)lat[(nlat * 99) / 100] / 1000.0;
    printf("ds4tp demo: %d layers, n_embd %d, %d tokens, transport %s\n", L, embd, c->tokens,
           ds4tp_transport_name(ds4tp_transport_active(tp)));
    printf("  hidden state vs single-process reference: %s (%d of %d tokens differ)\n",
           mismatches ? "MISMATCH" : "bit-identical", mismatches, c->tokens);
    printf("  hidden state vs the worker's: %s\n", same_as_peer ? "bit-identical" : "MISMATCH");
    printf("  gate latency (%zu gates, incl. rank skew): p50 %.1f us, p99 %.1f us\n", nlat, p50,
           p99);
    printf("  throughput: %.1f tokens/s (%.2f ms/token)\n", c->tokens / elapsed,
           elapsed * 1000.0 / c->tokens);
  }
  ds4tp_free(tp);
  int ok = mismatches == 0 && same_as_peer;
  if (child > 0) {
    int status = 0;
    if (waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "demo: the worker process failed (status 0x%x)\n", status);
      ok = 0;
    }
  }
  if (rank == 0) printf("%s\n", ok ? "demo OK" : "demo FAILED");
  for (int g = 0; g < ngates; g++) {
    free(mine[g].up), free(mine[g].down);
    free(full0[g].up), free(full0[g].down);
    free(full1[g].up), free(full1[g].down);
  }
  free(mine), free(full0), free(full1), free(h), free(ref), free(x), free(act);
  free(p0), free(p1), free(peer_final), free(lat);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  config c = {8, 4096, 128, 32, DS4TP_TRANSPORT_AUTO, -1, 0, "127.0.0.1", 0};
  if (parse_args(argc, argv, &c) != 0) {
    usage();
    return 2;
  }
  ds4tp_identity id;
  ds4tp_identity_init(&id);
  id.model_bytes = (uint64_t)c.layers * 2 * (uint64_t)c.ffn * (uint64_t)c.embd * 8;
  id.model_id = 0xD3110;
  id.n_layer = (uint32_t)c.layers;
  id.n_embd = (uint32_t)c.embd;
  id.n_vocab = 32000;
  id.quant_bits = 32;
  id.ctx_size = 4096;

  ds4tp_options opt;
  ds4tp_options_init(&opt);
  opt.transport = c.transport;
  if (c.spin_us >= 0) opt.spin_us = c.spin_us;
  opt.role = c.role ? c.role : DS4TP_ROLE_LEADER;
  if (opt.role == DS4TP_ROLE_LEADER) {
    opt.listen_host = c.host;
    opt.listen_port = c.port;
  } else {
    opt.leader_host = c.host;
    opt.leader_port = c.port;
  }
  ds4tp_pair *tp = NULL;
  int rc = ds4tp_new(&tp, &opt, &id);
  if (rc != DS4TP_OK) {
    fprintf(stderr, "demo: %s: %s\n", ds4tp_err_name(rc), ds4tp_last_error());
    return 1;
  }

  pid_t child = -1;
  if (c.role == 0) {
    /* One command: spawn the worker on loopback with the chosen port. */
    char port[16], layers[16], embd[16], ffn[16], tokens[16], spin[16];
    snprintf(port, sizeof port, "127.0.0.1:%d", ds4tp_listen_port(tp));
    snprintf(layers, sizeof layers, "%d", c.layers);
    snprintf(embd, sizeof embd, "%d", c.embd);
    snprintf(ffn, sizeof ffn, "%d", c.ffn);
    snprintf(tokens, sizeof tokens, "%d", c.tokens);
    snprintf(spin, sizeof spin, "%d", opt.spin_us);
    child = fork();
    if (child < 0) {
      perror("demo: fork");
      return 1;
    }
    if (child == 0) {
      char *args[] = {argv[0], "--role", "worker", "--connect", port, "--layers", layers,
                      "--embd", embd, "--ffn", ffn, "--tokens", tokens, "--transport",
                      (char *)ds4tp_transport_name(c.transport), "--spin-us", spin, NULL};
      char self[4096];
      execv(self_exe(self, sizeof self, argv[0]), args);
      perror("demo: exec worker");
      _exit(127);
    }
  }
  return run_rank(&c, tp, child);
}
