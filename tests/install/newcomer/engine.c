/* The newcomer's C program (tests/install/newcomer.sh): a local group of
 * three ranks (threads), one all-reduce of 8 f32 each, every rank's bits
 * compared; prints rank 0's bits for the test to check against its own
 * rank-order sum. */
#include <ds4tp/ds4tp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define RANKS 3
#define COUNT 8

static ds4tp_group *groups[RANKS];
static float v[RANKS][COUNT];
static int rc[RANKS];

static void *rank_main(void *arg) {
  int r = (int)(intptr_t)arg;
  for (int i = 0; i < COUNT; i++) v[r][i] = 1.0f / (float)(3 + i + r);
  rc[r] = ds4tp_group_all_reduce(groups[r], v[r], COUNT, DS4TP_DTYPE_F32, DS4TP_OP_SUM);
  return NULL;
}

int main(void) {
  if (ds4tp_group_new_local(groups, RANKS, NULL, NULL) != DS4TP_OK) {
    fprintf(stderr, "ds4tp_group_new_local: %s\n", ds4tp_last_error());
    return 1;
  }
  pthread_t t[RANKS];
  for (int r = 0; r < RANKS; r++) pthread_create(&t[r], NULL, rank_main, (void *)(intptr_t)r);
  for (int r = 0; r < RANKS; r++) pthread_join(t[r], NULL);
  int bad = 0;
  for (int r = 0; r < RANKS; r++) {
    if (rc[r] != DS4TP_OK) {
      fprintf(stderr, "rank %d: %s\n", r, ds4tp_group_errmsg(groups[r]));
      bad = 1;
    } else if (memcmp(v[r], v[0], sizeof v[0]) != 0) {
      fprintf(stderr, "rank %d's bits differ from rank 0's\n", r);
      bad = 1;
    }
  }
  if (!bad) {
    printf("newcomer all-reduce c:");
    for (int i = 0; i < COUNT; i++) {
      uint32_t b;
      memcpy(&b, &v[0][i], 4);
      printf(" %08x", (unsigned)b);
    }
    printf("\n");
  }
  for (int r = 0; r < RANKS; r++) ds4tp_group_free(groups[r]);
  return bad;
}
