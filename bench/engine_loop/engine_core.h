/* The engine-shaped loop of bench/engine_loop: per token, `layers` rounds
 * of compute (a float matrix-vector product, plus this rank's skew and
 * jitter) each followed by one collective, timed on every rank. Plain C,
 * shared by the forking driver (engine_loop.cpp: libds4tp and the raw
 * busy-polling TCP mesh) and the Open MPI program (engine_mpi.c), so every
 * implementation runs the very same loop and compute.
 *
 * Collective payloads are small integers per (token, layer, rank, index),
 * so the rank-order f32 sum is exact: every rank checks its whole result
 * against the expected values after each call, outside the timing. */
#ifndef ENGINE_CORE_H
#define ENGINE_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { ENGINE_ALL_REDUCE = 0, ENGINE_ALL_GATHER = 1 };
enum { ENGINE_MAX_RANKS = 16, ENGINE_MAX_TOKENS = 4096 };

typedef struct engine_cfg {
  int ranks, rank;
  int coll;          /* ENGINE_ALL_REDUCE or ENGINE_ALL_GATHER */
  size_t bytes;      /* all-reduce: the vector; all-gather: the whole output */
  int layers;        /* collectives per token */
  int tokens, warm;  /* measured tokens, and tokens run before them */
  int dim;           /* compute per layer: a dim x dim f32 matrix times a vector */
  double skew_us[ENGINE_MAX_RANKS];  /* extra compute per layer, per rank */
  double jitter_us;  /* plus uniform [0, jitter_us) per layer, per rank */
  unsigned seed;
  /* The collective's buffer (all-reduce: in place; all-gather: the
   * output), e.g. the library's own; NULL: the loop allocates one. */
  float *buffer;
} engine_cfg;

/* One rank's measurements (lives in shared memory for the forked ranks). */
typedef struct engine_result {
  uint64_t sync_ns[ENGINE_MAX_TOKENS];   /* time inside collectives, per token */
  uint64_t token_ns[ENGINE_MAX_TOKENS];  /* whole token */
  uint64_t wall_ns, cpu_ns;              /* the measured tokens: wall and process CPU */
  uint64_t compute_ns;                   /* of wall: the compute (measured) */
  /* libds4tp only: wait phases over the measured tokens (ds4tp_stats). */
  uint64_t spin_ns, yield_ns, sleep_ns, waits;
  int failed;                            /* nonzero: the message is in `error` */
  char error[200];
} engine_result;

/* A collective: all-reduce sums `buf` (bytes/4 floats) in place in rank
 * order; all-gather puts each rank's `bytes / ranks` from `in` at its
 * place in `out`. 0 on success, else nonzero with a message in err. */
typedef int (*engine_coll_fn)(void *ctx, int coll, float *buf, const float *in, float *out,
                              size_t bytes, char *err, size_t err_cap);

/* Called once on each rank as the measured tokens begin (may be NULL). */
typedef void (*engine_mark_fn)(void *ctx);

/* Parses the loop's options from argv (the ones it knows; unknown ones
 * are left to the caller: *used gets the indexes consumed as 1). 0 on
 * success, else prints why and returns nonzero. */
int engine_parse(engine_cfg *cfg, int argc, char **argv, unsigned char *used);
void engine_usage(void);

/* Runs the loop on this rank: the warm tokens, then the measured ones.
 * Fills *out. 0 on success, else out->error says why. */
int engine_run(const engine_cfg *cfg, engine_coll_fn coll, engine_mark_fn mark, void *ctx,
               engine_result *out);

/* Prints the one summary line of a run from every rank's results:
 *   ENGINE impl=... ranks=N coll=... bytes=B sync_p10=.. sync_p50=.. sync_p90=..
 *   token_p50=.. compute_us=.. cpu=.. (us; cpu: mean per rank, % of a core) */
void engine_report(const engine_cfg *cfg, const char *impl, const engine_result *all);

uint64_t engine_now_ns(void);

#ifdef __cplusplus
}
#endif

#endif
