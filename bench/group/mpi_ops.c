/* Baseline for `ds4tp group --op NAME`: the Open MPI call of each group
 * collective at one size, p50/p99, with the very sizes and roots the tool
 * uses (tools/ds4tp/group_ops.cpp): `count` f32 elements per rank; for the
 * byte moves count x 4 bytes per rank; all_gather_v: rank r gives
 * (r % 3) halves of it; all_to_all_v: rank a sends rank b
 * ((a + 2b) % 3 + 1) halves of it; the roots rotate call by call.
 * Bench-only (libopenmpi-dev), never built with the library:
 *   mpicc -O2 -o /tmp/mpi_ops bench/group/mpi_ops.c
 *   mpirun -np 4 --mca btl self,vader /tmp/mpi_ops reduce_scatter 4096 2000 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const char *op = argc > 1 ? argv[1] : "all_reduce";
  const int count = argc > 2 ? atoi(argv[2]) : 4096, iters = argc > 3 ? atoi(argv[3]) : 2000;
  const int bytes = count * 4, half = bytes / 2 > 0 ? bytes / 2 : 1;
  char *in = calloc((size_t)n * 3, (size_t)bytes), *out = calloc((size_t)n * 3, (size_t)bytes);
  double *us = malloc(sizeof(double) * (size_t)iters);
  int *sc = malloc(sizeof(int) * (size_t)n), *sd = malloc(sizeof(int) * (size_t)n);
  int *rc = malloc(sizeof(int) * (size_t)n), *rd = malloc(sizeof(int) * (size_t)n);
  int st = 0, rt = 0;
  for (int r = 0; r < n; r++) {
    if (strcmp(op, "all_gather_v") == 0) {
      rc[r] = bytes * (r % 3) / 2;
    } else {
      sc[r] = ((rank + 2 * r) % 3 + 1) * half;
      rc[r] = ((r + 2 * rank) % 3 + 1) * half;
    }
    sd[r] = st, st += sc[r];
    rd[r] = rt, rt += rc[r];
  }
  for (int i = 0; i < n * 3 * bytes / 4; i++) ((float *)in)[i] = (float)(rank + i % 7);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int it = -20; it < iters; it++) {
    const int root = (it + 20) % n;
    /* Untimed, as ds4tp's side (tools/ds4tp/group_ops.cpp): every timed
     * call starts with every rank in it. */
    if (strcmp(op, "barrier") != 0) MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (strcmp(op, "all_reduce") == 0)
      MPI_Allreduce(MPI_IN_PLACE, in, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (strcmp(op, "reduce_scatter") == 0)
      MPI_Reduce_scatter_block(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (strcmp(op, "reduce") == 0)
      MPI_Reduce(rank == root ? MPI_IN_PLACE : in, rank == root ? in : NULL, count, MPI_FLOAT,
                 MPI_SUM, root, MPI_COMM_WORLD);
    else if (strcmp(op, "gather") == 0)
      MPI_Gather(in, bytes, MPI_BYTE, out, bytes, MPI_BYTE, root, MPI_COMM_WORLD);
    else if (strcmp(op, "scatter") == 0)
      MPI_Scatter(in, bytes, MPI_BYTE, out, bytes, MPI_BYTE, root, MPI_COMM_WORLD);
    else if (strcmp(op, "all_gather") == 0)
      MPI_Allgather(in, bytes, MPI_BYTE, out, bytes, MPI_BYTE, MPI_COMM_WORLD);
    else if (strcmp(op, "all_gather_v") == 0)
      MPI_Allgatherv(in, rc[rank], MPI_BYTE, out, rc, rd, MPI_BYTE, MPI_COMM_WORLD);
    else if (strcmp(op, "all_to_all_v") == 0)
      MPI_Alltoallv(in, sc, sd, MPI_BYTE, out, rc, rd, MPI_BYTE, MPI_COMM_WORLD);
    else if (strcmp(op, "broadcast") == 0)
      MPI_Bcast(in, bytes, MPI_BYTE, root, MPI_COMM_WORLD);
    else if (strcmp(op, "barrier") == 0)
      MPI_Barrier(MPI_COMM_WORLD);
    else {
      if (rank == 0) fprintf(stderr, "mpi_ops: no MPI call for %s\n", op);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double t1 = MPI_Wtime();
    if (it >= 0) us[it] = (t1 - t0) * 1e6;
    if (strcmp(op, "all_reduce") == 0 || strcmp(op, "reduce") == 0)
      for (int i = 0; i < count; i++) ((float *)in)[i] = (float)(rank + i % 7);
  }
  qsort(us, (size_t)iters, sizeof *us, cmp);
  if (rank == 0)
    printf("MPI %s %d ranks, %d bytes per rank: p50 %.1f us  p99 %.1f us  (%d calls)\n", op, n,
           bytes, us[iters / 2], us[iters * 99 / 100], iters);
  free(in), free(out), free(us), free(sc), free(sd), free(rc), free(rd);
  MPI_Finalize();
  return 0;
}
