/* The engine loop (engine_core.h) over Open MPI: MPI_Allreduce (f32 sum)
 * and MPI_Allgather per layer. Bench-only (libopenmpi-dev), built by
 * bench/engine_loop/run.sh, never with the library:
 *   mpicc -O2 -o /tmp/engine_mpi bench/engine_loop/engine_mpi.c bench/engine_loop/engine_core.c
 *   mpirun -np 2 --mca btl self,vader /tmp/engine_mpi --impl mpi-vader [loop options]
 * Rank 0 gathers every rank's results and prints the ENGINE line. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_core.h"

static int mpi_coll(void *ctx, int coll, float *buf, const float *in, float *out, size_t bytes,
                    char *err, size_t cap) {
  const int ranks = *(const int *)ctx;
  int rc;
  if (coll == ENGINE_ALL_REDUCE)
    rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)(bytes / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  else
    rc = MPI_Allgather(in, (int)(bytes / 4 / (size_t)ranks), MPI_FLOAT, out,
                       (int)(bytes / 4 / (size_t)ranks), MPI_FLOAT, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) snprintf(err, cap, "MPI collective failed: %d", rc);
  return rc != MPI_SUCCESS;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  unsigned char *used = calloc((size_t)argc + 1, 1);
  engine_cfg cfg;
  if (engine_parse(&cfg, argc, argv, used) != 0) MPI_Abort(MPI_COMM_WORLD, 2);
  const char *impl = "mpi";
  for (int i = 1; i < argc; i++)
    if (!used[i] && strcmp(argv[i], "--impl") == 0 && i + 1 < argc) impl = argv[++i];
  cfg.ranks = size;
  cfg.rank = rank;
  engine_result *mine = calloc(1, sizeof *mine);
  engine_result *all = rank == 0 ? calloc((size_t)size, sizeof *all) : NULL;
  const int rc = engine_run(&cfg, mpi_coll, NULL, &size, mine);
  if (rc != 0) {
    fprintf(stderr, "rank %d: %s\n", rank, mine->error);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Gather(mine, (int)sizeof *mine, MPI_BYTE, all, (int)sizeof *mine, MPI_BYTE, 0,
             MPI_COMM_WORLD);
  if (rank == 0) engine_report(&cfg, impl, all);
  MPI_Finalize();
  return 0;
}
