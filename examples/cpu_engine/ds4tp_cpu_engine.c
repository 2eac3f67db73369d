/*
 * ds4tp_cpu_engine: an engine shaped like a GPU engine, on the CPU.
 *
 * Its "kernels" are threads: a gang of --threads device threads runs each
 * layer's two blocks (attention, FFN) in parallel row chunks, writes the
 * rank's partial into the slab's out vector, then signals the gate the way
 * a GPU kernel does with host-mapped memory: a release-store of seq into
 * the slab's ready word, then a spin on the release word until it reaches
 * seq (DS4TP_GATE_POISON = the pair failed: give up). The host thread
 * never calls a gate; it only launches tokens and waits for them.
 *
 * Who runs the gates:
 *   --mode service    the library's gate service thread
 *                     (ds4tp_gate_service_start)
 *   --mode callback   the engine's own gate machinery thread, holding a
 *                     ds4tp_gate_fn (ds4tp_gate_callback, user data = the
 *                     pair), as a GPU backend's service thread would
 *
 * Every rank checks its hidden state bit for bit against a single-process
 * computation of the whole model, and the ranks compare final states.
 *
 *   ds4tp_cpu_engine [--mode service|callback] [--transport auto|tcp|shm]
 *                    [--threads N] [--layers N] [--embd N] [--ffn N]
 *                    [--tokens N]
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ds4tp/ds4tp.h"

#include "../common/self_exe.h"

enum { MODE_SERVICE = 0, MODE_CALLBACK = 1 };

typedef struct {
  int mode, transport, threads, layers, embd, ffn, tokens;
  int role; /* 0 = spawn the worker too */
  int port;
} config;

/* ---- deterministic toy model (one block per gate) ------------------- */

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

/* up: half x embd, down: embd x half, for rank `rank`'s half of the FFN. */
typedef struct {
  float *up, *down;
} block;

static int make_block(block *b, const config *c, int slot, int rank) {
  int half = c->ffn / 2;
  b->up = malloc(sizeof(float) * (size_t)half * (size_t)c->embd);
  b->down = malloc(sizeof(float) * (size_t)half * (size_t)c->embd);
  if (!b->up || !b->down) return -1;
  for (int r = 0; r < half; r++)
    for (int e = 0; e < c->embd; e++)
      b->up[(size_t)r * c->embd + e] =
          weight((uint64_t)slot * 2, (uint64_t)(rank * half + r), (uint64_t)e);
  for (int e = 0; e < c->embd; e++)
    for (int r = 0; r < half; r++)
      b->down[(size_t)e * half + r] =
          weight((uint64_t)slot * 2 + 1, (uint64_t)e, (uint64_t)(rank * half + r));
  return 0;
}

/* The three per-element pieces of a block; the device gang and the
 * reference call the same functions, so results are bit-identical however
 * the rows are split across threads. */
static float rms_inv(const float *h, int embd) {
  double ss = 0;
  for (int e = 0; e < embd; e++) ss += (double)h[e] * h[e];
  return (float)(1.0 / sqrt(ss / embd + 1e-6));
}

static float act_row(const block *b, int embd, const float *x, int r) {
  float s = 0;
  const float *w = b->up + (size_t)r * embd;
  for (int e = 0; e < embd; e++) s += w[e] * x[e];
  return s > 0 ? s : 0;
}

static float out_row(const block *b, int half, const float *act, int e) {
  float s = 0;
  const float *w = b->down + (size_t)e * half;
  for (int r = 0; r < half; r++) s += w[r] * act[r];
  return s;
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

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the "device": a gang of kernel threads -------------------------- */

typedef struct engine engine;

typedef struct {
  engine *e;
  int id;
} lane;

struct engine {
  const config *c;
  ds4tp_pair *tp;
  uint8_t *slab;
  ds4tp_slab_layout lay;
  block *blocks;       /* this rank's half, one per slot */
  float *h, *x, *act;  /* device state shared by the gang */
  uint64_t seq_base;   /* row gate seq before this token's first gate */
  int quit;            /* set by the host before the start barrier */
  int error;           /* set by lane 0 before a barrier: all lanes see it */
  char why[160];
  pthread_barrier_t start, done, step;
  pthread_t *lanes;
  lane *lane_args;
  /* --mode callback: the engine's own gate machinery */
  ds4tp_gate_fn gate_fn;
  void *gate_ud;
  pthread_t machinery;
  int machinery_quit; /* atomic */
  int machinery_failed;
};

static uint64_t *ready_word(engine *e, int slot) {
  return (uint64_t *)(e->slab + e->lay.gpu_flags_offset + (uint64_t)slot * e->lay.flag_stride);
}
static uint64_t *release_word(engine *e, int slot) {
  return (uint64_t *)(e->slab + e->lay.gpu_release_offset + (uint64_t)slot * e->lay.flag_stride);
}

static void chunk(int n, int parts, int i, int *lo, int *hi) {
  *lo = (int)((int64_t)n * i / parts);
  *hi = (int)((int64_t)n * (i + 1) / parts);
}

/* What a GPU kernel's gate does: publish arrival, wait for the release.
 * Returns 0 when released, -1 when poisoned or stuck past 30 s. */
static int kernel_gate(engine *e, int slot, uint64_t seq) {
  __atomic_store_n(ready_word(e, slot), seq, __ATOMIC_RELEASE);
  double t0 = 0;
  for (unsigned spins = 0;; spins++) {
    uint64_t v = __atomic_load_n(release_word(e, slot), __ATOMIC_ACQUIRE);
    if (v == DS4TP_GATE_POISON) {
      snprintf(e->why, sizeof e->why, "gate seq %llu: release word poisoned (pair failed)",
               (unsigned long long)seq);
      return -1;
    }
    if (v >= seq) return 0;
    /* A real kernel spins; on a small CPU box yield so the gate thread runs. */
    if (spins > 2000) sched_yield();
    if ((spins & 0xffff) == 0xffff) {
      if (t0 == 0) t0 = now_s();
      else if (now_s() - t0 > 30) {
        snprintf(e->why, sizeof e->why, "gate seq %llu: no release after 30 s",
                 (unsigned long long)seq);
        return -1;
      }
    }
  }
}

static void *lane_main(void *arg) {
  lane *ln = arg;
  engine *e = ln->e;
  const config *c = e->c;
  const int T = c->threads, id = ln->id, half = c->ffn / 2, embd = c->embd;
  int elo, ehi, rlo, rhi;
  chunk(embd, T, id, &elo, &ehi);
  chunk(half, T, id, &rlo, &rhi);
  for (;;) {
    pthread_barrier_wait(&e->start);
    if (e->quit) break;
    for (int slot = 0; slot < c->layers * 2 && !e->error; slot++) {
      const block *b = &e->blocks[slot];
      float *out = (float *)(e->slab + e->lay.out_offset + (uint64_t)slot * e->lay.slot_stride);
      const float *in =
          (const float *)(e->slab + e->lay.in_offset + (uint64_t)slot * e->lay.slot_stride);
      float inv = rms_inv(e->h, embd); /* every lane, same order: same value */
      for (int i = elo; i < ehi; i++) e->x[i] = e->h[i] * inv;
      pthread_barrier_wait(&e->step);
      for (int r = rlo; r < rhi; r++) e->act[r] = act_row(b, embd, e->x, r);
      pthread_barrier_wait(&e->step);
      for (int i = elo; i < ehi; i++) out[i] = out_row(b, half, e->act, i);
      pthread_barrier_wait(&e->step); /* the whole partial is in out[slot] */
      if (id == 0 && kernel_gate(e, slot, e->seq_base + (uint64_t)slot + 1) != 0) e->error = 1;
      pthread_barrier_wait(&e->step); /* in[slot] landed (or error) */
      if (e->error) break;
      for (int i = elo; i < ehi; i++) e->h[i] += out[i] + in[i];
      pthread_barrier_wait(&e->step);
    }
    pthread_barrier_wait(&e->done);
  }
  return NULL;
}

/* ---- --mode callback: the engine's own gate machinery ---------------- */

/* Polls the ready word of the next scheduled gate, calls the registered
 * gate function, releases the kernel; on failure poisons every release
 * word so all kernels give up, exactly what the library's service does. */
static void *machinery_main(void *arg) {
  engine *e = arg;
  const int slots = e->c->layers * 2;
  uint64_t seq = 0;
  for (;;) {
    seq++;
    int slot = (int)((seq - 1) % (uint64_t)slots); /* identity schedule */
    unsigned spins = 0;
    while (__atomic_load_n(ready_word(e, slot), __ATOMIC_ACQUIRE) != seq) {
      if (__atomic_load_n(&e->machinery_quit, __ATOMIC_ACQUIRE)) return NULL;
      if (++spins > 2000) sched_yield();
    }
    if (!e->gate_fn(e->gate_ud, (uint32_t)slot / 2, (uint32_t)slot % 2, seq)) {
      e->machinery_failed = 1;
      for (int s = 0; s < slots; s++)
        __atomic_store_n(release_word(e, s), DS4TP_GATE_POISON, __ATOMIC_RELEASE);
      return NULL;
    }
    __atomic_store_n(release_word(e, slot), seq, __ATOMIC_RELEASE);
  }
}

/* ---- one rank ---------------------------------------------------------- */

static int run_rank(const config *c, ds4tp_pair *tp) {
  const int rank = ds4tp_rank(tp), embd = c->embd, slots = c->layers * 2, half = c->ffn / 2;
  engine e;
  memset(&e, 0, sizeof e);
  e.c = c;
  e.tp = tp;
  e.lay.size = sizeof e.lay;
  block *mine = calloc((size_t)slots, sizeof *mine);
  block *ref0 = calloc((size_t)slots, sizeof *ref0), *ref1 = calloc((size_t)slots, sizeof *ref1);
  e.h = calloc((size_t)embd, 4), e.x = calloc((size_t)embd, 4), e.act = calloc((size_t)half, 4);
  float *ref = calloc((size_t)embd, 4), *rx = calloc((size_t)embd, 4);
  float *ract = calloc((size_t)half, 4), *p0 = calloc((size_t)embd, 4),
        *p1 = calloc((size_t)embd, 4), *peer_final = calloc((size_t)embd, 4);
  e.lanes = calloc((size_t)c->threads, sizeof *e.lanes);
  e.lane_args = calloc((size_t)c->threads, sizeof *e.lane_args);
  if (!mine || !ref0 || !ref1 || !e.h || !e.x || !e.act || !ref || !rx || !ract || !p0 || !p1 ||
      !peer_final || !e.lanes || !e.lane_args) {
    fprintf(stderr, "cpu engine: out of memory\n");
    return 1;
  }
  for (int s = 0; s < slots; s++)
    if (make_block(&mine[s], c, s, rank) || make_block(&ref0[s], c, s, 0) ||
        make_block(&ref1[s], c, s, 1)) {
      fprintf(stderr, "cpu engine: out of memory for weights\n");
      return 1;
    }
  e.blocks = mine;

  int rc = ds4tp_connect(tp);
  if (rc == DS4TP_OK) rc = ds4tp_attach_slab(tp, NULL, 0);
  if (rc == DS4TP_OK) rc = ds4tp_slab_layout_get(tp, &e.lay);
  if (rc != DS4TP_OK) {
    fprintf(stderr, "cpu engine rank %d: %s: %s\n", rank, ds4tp_err_name(rc), ds4tp_errmsg(tp));
    return 1;
  }
  e.slab = ds4tp_slab_base(tp);

  /* Who runs the gates. */
  if (c->mode == MODE_SERVICE) {
    ds4tp_gate_service_options so;
    ds4tp_gate_service_options_init(&so);
    rc = ds4tp_gate_service_start(tp, &so);
    if (rc != DS4TP_OK) {
      fprintf(stderr, "cpu engine rank %d: service start: %s\n", rank, ds4tp_errmsg(tp));
      return 1;
    }
  } else {
    e.gate_fn = ds4tp_gate_callback; /* registered directly, pair as user data */
    e.gate_ud = tp;
    if (pthread_create(&e.machinery, NULL, machinery_main, &e) != 0) {
      fprintf(stderr, "cpu engine: cannot start the gate machinery thread\n");
      return 1;
    }
  }

  /* Launch the device gang. */
  pthread_barrier_init(&e.start, NULL, (unsigned)c->threads + 1);
  pthread_barrier_init(&e.done, NULL, (unsigned)c->threads + 1);
  pthread_barrier_init(&e.step, NULL, (unsigned)c->threads);
  for (int i = 0; i < c->threads; i++) {
    e.lane_args[i].e = &e;
    e.lane_args[i].id = i;
    if (pthread_create(&e.lanes[i], NULL, lane_main, &e.lane_args[i]) != 0) {
      fprintf(stderr, "cpu engine: cannot start device thread %d\n", i);
      return 1;
    }
  }

  int token = 1, ref_token = 1, mismatches = 0, failed = 0;
  double t0 = now_s();
  for (int t = 0; t < c->tokens && !failed; t++) {
    embed(e.h, embd, token);
    e.seq_base = (uint64_t)t * (uint64_t)slots;
    pthread_barrier_wait(&e.start); /* "launch" the token's graph */
    embed(ref, embd, ref_token);    /* meanwhile: the single-process reference */
    for (int s = 0; s < slots; s++) {
      float inv = rms_inv(ref, embd);
      for (int i = 0; i < embd; i++) rx[i] = ref[i] * inv;
      for (int r = 0; r < half; r++) ract[r] = act_row(&ref0[s], embd, rx, r);
      for (int i = 0; i < embd; i++) p0[i] = out_row(&ref0[s], half, ract, i);
      for (int r = 0; r < half; r++) ract[r] = act_row(&ref1[s], embd, rx, r);
      for (int i = 0; i < embd; i++) p1[i] = out_row(&ref1[s], half, ract, i);
      /* the device adds own + peer: rank 0 p0 + p1, rank 1 p1 + p0 */
      for (int i = 0; i < embd; i++) ref[i] += rank == 0 ? p0[i] + p1[i] : p1[i] + p0[i];
    }
    pthread_barrier_wait(&e.done); /* "synchronize" */
    if (e.error) {
      fprintf(stderr, "cpu engine rank %d: token %d: %s; pair: %s\n", rank, t, e.why,
              ds4tp_errmsg(tp));
      failed = 1;
      break;
    }
    if (memcmp(e.h, ref, (size_t)embd * 4) != 0) mismatches++;
    token = next_token(e.h, embd);
    ref_token = next_token(ref, embd);
  }
  double elapsed = now_s() - t0;
  e.quit = 1;
  pthread_barrier_wait(&e.start);
  for (int i = 0; i < c->threads; i++) pthread_join(e.lanes[i], NULL);

  /* Stop whoever ran the gates, then swap final states with a big gate
   * (the engine calls gates itself again once the service is stopped). */
  if (c->mode == MODE_SERVICE) {
    rc = ds4tp_gate_service_stop(tp);
    if (rc != DS4TP_OK) {
      fprintf(stderr, "cpu engine rank %d: service stop: %s\n", rank, ds4tp_errmsg(tp));
      failed = 1;
    }
  } else {
    __atomic_store_n(&e.machinery_quit, 1, __ATOMIC_RELEASE);
    pthread_join(e.machinery, NULL);
    if (e.machinery_failed) failed = 1;
  }
  int same_as_peer = 0;
  if (!failed) {
    rc = ds4tp_big_gate_exchange(tp, 0, 1, e.h, peer_final, (uint64_t)embd * 4);
    if (rc != DS4TP_OK) {
      fprintf(stderr, "cpu engine rank %d: final big gate: %s\n", rank, ds4tp_errmsg(tp));
      failed = 1;
    }
    same_as_peer = memcmp(e.h, peer_final, (size_t)embd * 4) == 0;
  }
  int ok = !failed && mismatches == 0 && same_as_peer;
  if (rank == 0) {
    printf("ds4tp cpu engine: mode %s, transport %s, %d kernel threads, %d layers, n_embd %d, "
           "%d tokens\n",
           c->mode == MODE_SERVICE ? "service" : "callback",
           ds4tp_transport_name(ds4tp_transport_active(tp)), c->threads, c->layers, embd,
           c->tokens);
    printf("  hidden state vs single-process reference: %s (%d tokens differ)\n",
           mismatches ? "MISMATCH" : "bit-identical", mismatches);
    printf("  hidden state vs the worker's: %s\n", same_as_peer ? "bit-identical" : "MISMATCH");
    printf("  %.1f tokens/s, %llu row gates\n", c->tokens / elapsed,
           (unsigned long long)ds4tp_gate_seq(tp));
  }
  pthread_barrier_destroy(&e.start);
  pthread_barrier_destroy(&e.done);
  pthread_barrier_destroy(&e.step);
  for (int s = 0; s < slots; s++) {
    free(mine[s].up), free(mine[s].down), free(ref0[s].up), free(ref0[s].down);
    free(ref1[s].up), free(ref1[s].down);
  }
  free(mine), free(ref0), free(ref1), free(e.h), free(e.x), free(e.act), free(ref), free(rx);
  free(ract), free(p0), free(p1), free(peer_final), free(e.lanes), free(e.lane_args);
  return ok ? 0 : 1;
}

/* ---- command line ------------------------------------------------------ */

static void usage(void) {
  fprintf(stderr,
          "usage: ds4tp_cpu_engine [--mode service|callback] [--transport auto|tcp|shm]\n"
          "                        [--threads N] [--layers N] [--embd N] [--ffn N] "
          "[--tokens N]\n");
}

static int parse_args(int argc, char **argv, config *c) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *a = argv[i], *v = argv[i + 1];
    if (!strcmp(a, "--mode")) {
      if (!strcmp(v, "service")) c->mode = MODE_SERVICE;
      else if (!strcmp(v, "callback")) c->mode = MODE_CALLBACK;
      else return -1;
    } else if (!strcmp(a, "--transport")) {
      if (!strcmp(v, "auto")) c->transport = DS4TP_TRANSPORT_AUTO;
      else if (!strcmp(v, "tcp")) c->transport = DS4TP_TRANSPORT_TCP;
      else if (!strcmp(v, "shm")) c->transport = DS4TP_TRANSPORT_SHM;
      else return -1;
    } else if (!strcmp(a, "--threads")) c->threads = atoi(v);
    else if (!strcmp(a, "--layers")) c->layers = atoi(v);
    else if (!strcmp(a, "--embd")) c->embd = atoi(v);
    else if (!strcmp(a, "--ffn")) c->ffn = atoi(v);
    else if (!strcmp(a, "--tokens")) c->tokens = atoi(v);
    else if (!strcmp(a, "--role-worker")) {  /* internal: spawned worker */
      c->role = DS4TP_ROLE_WORKER;
      c->port = atoi(v);
    } else return -1;
  }
  if (argc % 2 == 0) return -1; /* an option without its value */
  if (c->threads < 1 || c->threads > 64 || c->layers < 1 || c->layers > 128 || c->embd < 4 ||
      c->ffn < 2 || c->ffn % 2 || c->tokens < 1)
    return -1;
  return 0;
}

int main(int argc, char **argv) {
  config c = {MODE_SERVICE, DS4TP_TRANSPORT_AUTO, 2, 4, 1024, 64, 8, 0, 0};
  if (parse_args(argc, argv, &c) != 0) {
    usage();
    return 2;
  }
  ds4tp_identity id;
  ds4tp_identity_init(&id);
  id.model_bytes = (uint64_t)c.layers * 2 * (uint64_t)c.ffn * (uint64_t)c.embd * 8;
  id.model_id = 0xC0E;
  id.n_layer = (uint32_t)c.layers;
  id.n_embd = (uint32_t)c.embd;
  id.n_vocab = 32000;
  id.quant_bits = 32;
  id.ctx_size = 4096;

  ds4tp_options opt;
  ds4tp_options_init(&opt);
  opt.transport = c.transport;
  opt.log_level = DS4TP_LOG_WARN;
  opt.role = c.role ? c.role : DS4TP_ROLE_LEADER;
  opt.leader_port = c.port;
  ds4tp_pair *tp = NULL;
  int rc = ds4tp_new(&tp, &opt, &id);
  if (rc != DS4TP_OK) {
    fprintf(stderr, "cpu engine: %s: %s\n", ds4tp_err_name(rc), ds4tp_last_error());
    return 1;
  }
  pid_t child = -1;
  if (c.role == 0) {
    /* One command: spawn the worker on loopback with the same settings. */
    fflush(stdout);
    child = fork();
    if (child < 0) {
      perror("cpu engine: fork");
      return 1;
    }
    if (child == 0) {
      char port[16];
      snprintf(port, sizeof port, "%d", ds4tp_listen_port(tp));
      char **args = calloc((size_t)argc + 3, sizeof *args);
      if (!args) _exit(127);
      for (int i = 0; i < argc; i++) args[i] = argv[i];
      args[argc] = "--role-worker";
      args[argc + 1] = port;
      char self[4096];
      execv(self_exe(self, sizeof self, argv[0]), args);
      perror("cpu engine: exec worker");
      _exit(127);
    }
  }
  int result = run_rank(&c, tp);
  ds4tp_free(tp);
  if (child > 0) {
    int status = 0;
    if (waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "cpu engine: the worker process failed (status 0x%x)\n", status);
      result = 1;
    }
    printf("%s\n", result == 0 ? "cpu engine OK" : "cpu engine FAILED");
  }
  return result;
}
