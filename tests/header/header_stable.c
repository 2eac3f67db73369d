/* Compiled with -std=c99 -pedantic -Werror and DS4TP_NO_EXPERIMENTAL: the
 * stable API stands alone, and the fence leaves the experimental topics
 * out (this file's own ds4tp_group would clash with the groups header's). */
#define DS4TP_NO_EXPERIMENTAL
#include "ds4tp/ds4tp.h"

#include <stdio.h>

typedef int ds4tp_group;

int main(void) {
  ds4tp_options opt;
  ds4tp_group not_the_library_one = 0;
  ds4tp_options_init(&opt);
  if (opt.size != sizeof opt) return 1;
  printf("ds4tp %s, stable API only\n", ds4tp_version_string());
  return not_the_library_one;
}
