/* Baseline for `ds4tp group`: MPI_Allreduce (sum, f32) p50/p99 at one size.
 * Bench-only (libopenmpi-dev), never built with the library:
 *   mpicc -O2 -o /tmp/mpi_allreduce bench/group/mpi_allreduce.c
 *   mpirun -np 4 --mca btl self,vader /tmp/mpi_allreduce 4096 2000
 *   mpirun -np 4 --mca btl self,tcp   /tmp/mpi_allreduce 4096 2000
 * Compare with: ds4tp group --local 4 --transport shm --count 4096 --iters 2000 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int count = argc > 1 ? atoi(argv[1]) : 4096, iters = argc > 2 ? atoi(argv[2]) : 2000;
  float *buf = malloc(sizeof(float) * (size_t)count);
  double *us = malloc(sizeof(double) * (size_t)iters);
  for (int i = 0; i < count; i++) buf[i] = (float)(rank + i % 7);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int it = -20; it < iters; it++) {
    double t0 = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t1 = MPI_Wtime();
    if (it >= 0) us[it] = (t1 - t0) * 1e6;
    for (int i = 0; i < count; i++) buf[i] = (float)(rank + i % 7);
  }
  qsort(us, (size_t)iters, sizeof *us, cmp);
  if (rank == 0)
    printf("MPI_Allreduce %d ranks, %zu bytes f32: p50 %.1f us  p99 %.1f us  (%d calls)\n", size,
           (size_t)count * 4, us[iters / 2], us[iters * 99 / 100], iters);
  free(buf);
  free(us);
  MPI_Finalize();
  return 0;
}
