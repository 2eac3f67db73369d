/* The engine-shaped loop (engine_core.h). */
#define _GNU_SOURCE
#include "engine_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t engine_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void engine_usage(void) {
  fprintf(stderr,
          "loop options: --ranks N (2..16) --coll allreduce|allgather --bytes B\n"
          "  --layers L (collectives per token, 18) --tokens T (300) --warm W (30)\n"
          "  --dim D (compute: a D x D f32 matrix-vector product per layer, 384)\n"
          "  --skew RANK:US (extra compute per layer on RANK; repeatable)\n"
          "  --jitter-us J (plus uniform [0, J) us per layer on every rank, 10) --seed S\n");
}

int engine_parse(engine_cfg *c, int argc, char **argv, unsigned char *used) {
  memset(c, 0, sizeof *c);
  c->ranks = 2;
  c->coll = ENGINE_ALL_REDUCE;
  c->bytes = 16384;
  c->layers = 18;
  c->tokens = 300;
  c->warm = 30;
  c->dim = 384;
  c->jitter_us = 10;
  c->seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int take = 1;
    if (strcmp(a, "--ranks") == 0 && v) c->ranks = atoi(v);
    else if (strcmp(a, "--coll") == 0 && v) {
      if (strcmp(v, "allreduce") == 0) c->coll = ENGINE_ALL_REDUCE;
      else if (strcmp(v, "allgather") == 0) c->coll = ENGINE_ALL_GATHER;
      else { fprintf(stderr, "--coll %s: allreduce or allgather\n", v); return 1; }
    } else if (strcmp(a, "--bytes") == 0 && v) c->bytes = (size_t)strtoull(v, NULL, 10);
    else if (strcmp(a, "--layers") == 0 && v) c->layers = atoi(v);
    else if (strcmp(a, "--tokens") == 0 && v) c->tokens = atoi(v);
    else if (strcmp(a, "--warm") == 0 && v) c->warm = atoi(v);
    else if (strcmp(a, "--dim") == 0 && v) c->dim = atoi(v);
    else if (strcmp(a, "--jitter-us") == 0 && v) c->jitter_us = atof(v);
    else if (strcmp(a, "--seed") == 0 && v) c->seed = (unsigned)atoi(v);
    else if (strcmp(a, "--skew") == 0 && v) {
      int r = atoi(v);
      const char *colon = strchr(v, ':');
      if (!colon || r < 0 || r >= ENGINE_MAX_RANKS) {
        fprintf(stderr, "--skew %s: RANK:US\n", v);
        return 1;
      }
      c->skew_us[r] = atof(colon + 1);
    } else take = 0;
    if (take) {
      used[i] = used[i + 1] = 1;
      i++;
    }
  }
  if (c->ranks < 2 || c->ranks > ENGINE_MAX_RANKS || c->layers < 1 || c->tokens < 1 ||
      c->tokens > ENGINE_MAX_TOKENS || c->warm < 0 || c->dim < 1 || c->bytes < 64 ||
      c->bytes % (4u * (unsigned)c->ranks) != 0) {
    fprintf(stderr, "bad loop options (ranks 2..16, tokens 1..%d, bytes a multiple of 4 x ranks)\n",
            ENGINE_MAX_TOKENS);
    return 1;
  }
  return 0;
}

/* The value rank r contributes at element i of layer call k: a small
 * integer, so any rank-order f32 sum of up to 16 of them is exact. */
static float part(uint64_t k, int r, size_t i) {
  return (float)((k * 7 + (uint64_t)r * 3 + i) % 11);
}

static uint32_t next_rand(uint32_t *s) {
  uint32_t x = *s;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *s = x;
}

/* y = W x, and x takes y back scaled: the next layer depends on this one. */
static float matvec(const float *w, float *x, float *y, int d) {
  float acc = 0;
  for (int i = 0; i < d; i++) {
    const float *row = w + (size_t)i * (size_t)d;
    float s = 0;
    for (int j = 0; j < d; j++) s += row[j] * x[j];
    y[i] = s;
    acc += s;
  }
  for (int i = 0; i < d; i++) x[i] = y[i] * (1.0f / (float)d) + 0.5f;
  return acc;
}

static void busy_until(uint64_t t) {
  while (engine_now_ns() < t) {
  }
}

static int fail(engine_result *out, const char *what, uint64_t k, size_t i, float got, float want) {
  out->failed = 1;
  snprintf(out->error, sizeof out->error, "%s: call %llu element %zu is %g, expected %g", what,
           (unsigned long long)k, i, (double)got, (double)want);
  return 1;
}

int engine_run(const engine_cfg *c, engine_coll_fn coll, engine_mark_fn mark, void *ctx,
               engine_result *out) {
  const size_t n = c->bytes / 4, per = n / (size_t)c->ranks;
  const int d = c->dim;
  float *w = malloc(sizeof(float) * (size_t)d * (size_t)d);
  float *x = malloc(sizeof(float) * (size_t)d), *y = malloc(sizeof(float) * (size_t)d);
  float *own = c->buffer ? NULL : aligned_alloc(64, c->bytes);
  float *buf = c->buffer ? c->buffer : own, *in = aligned_alloc(64, c->bytes / (size_t)c->ranks);
  if (!w || !x || !y || !buf || !in) {
    out->failed = 1;
    snprintf(out->error, sizeof out->error, "out of memory");
    return 1;
  }
  for (size_t i = 0; i < (size_t)d * (size_t)d; i++) w[i] = (float)((i * 2654435761u) % 97) / 97.0f;
  for (int i = 0; i < d; i++) x[i] = 1;
  uint32_t rnd = c->seed * 2654435761u + (uint32_t)c->rank * 40503u + 1u;
  float sink = 0;
  uint64_t k = 0, wall0 = 0, cpu0 = 0, compute = 0;
  for (int t = -c->warm; t < c->tokens; t++) {
    if (t == 0) {
      wall0 = engine_now_ns();
      cpu0 = cpu_ns();
      compute = 0;
      if (mark) mark(ctx);
    }
    const uint64_t tok0 = engine_now_ns();
    uint64_t sync = 0;
    for (int l = 0; l < c->layers; l++, k++) {
      const uint64_t c0 = engine_now_ns();
      sink += matvec(w, x, y, d);
      double extra = c->skew_us[c->rank];
      if (c->jitter_us > 0) extra += c->jitter_us * (double)(next_rand(&rnd) % 10000) / 10000.0;
      if (extra > 0) busy_until(engine_now_ns() + (uint64_t)(extra * 1000.0));
      if (c->coll == ENGINE_ALL_REDUCE) {
        for (size_t i = 0; i < n; i++) buf[i] = part(k, c->rank, i);
      } else {
        for (size_t i = 0; i < per; i++) in[i] = part(k, c->rank, i);
      }
      const uint64_t s0 = engine_now_ns();
      compute += s0 - c0;
      if (coll(ctx, c->coll, buf, in, buf, c->bytes, out->error, sizeof out->error)) {
        out->failed = 1;
        return 1;
      }
      const uint64_t s1 = engine_now_ns();
      sync += s1 - s0;
      /* Checked outside the timing, as the engine's next layer would read it. */
      if (c->coll == ENGINE_ALL_REDUCE) {
        for (size_t i = 0; i < n; i++) {
          float want = 0;
          for (int r = 0; r < c->ranks; r++) want += part(k, r, i);
          if (buf[i] != want) return fail(out, "all-reduce", k, i, buf[i], want);
        }
      } else {
        for (size_t i = 0; i < n; i++) {
          const float want = part(k, (int)(i / per), i % per);
          if (buf[i] != want) return fail(out, "all-gather", k, i, buf[i], want);
        }
      }
      x[0] += buf[k % n] * 1e-6f;
      compute += engine_now_ns() - s1;
    }
    if (t >= 0) {
      out->sync_ns[t] = sync;
      out->token_ns[t] = engine_now_ns() - tok0;
    }
  }
  out->wall_ns = engine_now_ns() - wall0;
  out->cpu_ns = cpu_ns() - cpu0;
  out->compute_ns = compute;
  if (sink == 12345.678f) fprintf(stderr, " ");  /* keeps the compute */
  free(w);
  free(x);
  free(y);
  free(own);
  free(in);
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double pct(const uint64_t *v, int n, double p) {
  return (double)v[(int)(p * (n - 1) + 0.5)];
}

void engine_report(const engine_cfg *c, const char *impl, const engine_result *all) {
  static uint64_t sync[ENGINE_MAX_TOKENS], tok[ENGINE_MAX_TOKENS];
  double cpu = 0, compute = 0, spin = 0, yield = 0, sleep = 0, waits = 0;
  for (int t = 0; t < c->tokens; t++) {
    uint64_t s = 0, w = 0;
    for (int r = 0; r < c->ranks; r++) {
      s += all[r].sync_ns[t];
      w = all[r].token_ns[t] > w ? all[r].token_ns[t] : w;
    }
    sync[t] = s / (uint64_t)c->ranks; /* the mean rank's sync time */
    tok[t] = w;                       /* the slowest rank's token */
  }
  for (int r = 0; r < c->ranks; r++) {
    cpu += 100.0 * (double)all[r].cpu_ns / (double)all[r].wall_ns;
    compute += (double)all[r].compute_ns;
    spin += (double)all[r].spin_ns;
    yield += (double)all[r].yield_ns;
    sleep += (double)all[r].sleep_ns;
    waits += (double)all[r].waits;
  }
  qsort(sync, (size_t)c->tokens, sizeof sync[0], cmp_u64);
  qsort(tok, (size_t)c->tokens, sizeof tok[0], cmp_u64);
  const double per = 1e3 * c->ranks * c->tokens; /* ns summed over ranks -> us per rank-token */
  printf("ENGINE impl=%s ranks=%d coll=%s bytes=%zu sync_p10=%.1f sync_p50=%.1f sync_p90=%.1f "
         "token_p50=%.1f compute_us=%.1f cpu=%.1f spin_us=%.1f yield_us=%.1f sleep_us=%.1f "
         "waits=%.1f\n",
         impl, c->ranks, c->coll == ENGINE_ALL_REDUCE ? "allreduce" : "allgather", c->bytes,
         pct(sync, c->tokens, 0.1) / 1e3, pct(sync, c->tokens, 0.5) / 1e3,
         pct(sync, c->tokens, 0.9) / 1e3, pct(tok, c->tokens, 0.5) / 1e3, compute / per,
         cpu / c->ranks, spin / per, yield / per, sleep / per, waits / (c->ranks * c->tokens));
  fflush(stdout);
}
