/* The newcomer's C program (tests/install/newcomer.sh): one rank of a
 * three-rank group, started three times as the README shows. Rank and size
 * come from RANK and WORLD_SIZE, rank 0's rendezvous from MASTER_ADDR and
 * MASTER_PORT (default 127.0.0.1:29600). One all-reduce of 8 f32; each
 * rank prints its bits for the test to check against its own rank-order
 * sum. */
#include <ds4tp/ds4tp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define COUNT 8

int main(void) {
  ds4tp_group_options o;
  ds4tp_group_options_init(&o); /* rank, size, rendezvous from the environment */
  o.connect_timeout_ms = 30000;
  ds4tp_group *g = NULL;
  if (ds4tp_group_new(&g, &o, NULL) != DS4TP_OK) {
    fprintf(stderr, "ds4tp_group_new: %s\n", ds4tp_last_error());
    return 1;
  }
  if (ds4tp_group_connect(g) != DS4TP_OK) {
    fprintf(stderr, "ds4tp_group_connect: %s\n", ds4tp_group_errmsg(g));
    ds4tp_group_free(g);
    return 1;
  }
  const int r = ds4tp_group_rank(g);
  float v[COUNT];
  for (int i = 0; i < COUNT; i++) v[i] = 1.0f / (float)(3 + i + r);
  if (ds4tp_group_all_reduce(g, v, COUNT, DS4TP_DTYPE_F32, DS4TP_OP_SUM) != DS4TP_OK) {
    fprintf(stderr, "rank %d: %s\n", r, ds4tp_group_errmsg(g));
    ds4tp_group_free(g);
    return 1;
  }
  printf("newcomer all-reduce c:");
  for (int i = 0; i < COUNT; i++) {
    uint32_t b;
    memcpy(&b, &v[i], 4);
    printf(" %08x", (unsigned)b);
  }
  printf(" (rank %d of %d)\n", r, ds4tp_group_size(g));
  ds4tp_group_free(g);
  return 0;
}
