/* Compiled with -std=c99 -pedantic -Werror: the public header is C99. */
#include "ds4tp/ds4tp.h"

#include <stdio.h>
#include <string.h>

int main(void) {
  ds4tp_options opt;
  ds4tp_identity id;
  ds4tp_options_init(&opt);
  ds4tp_identity_init(&id);
  if (opt.size != sizeof opt || id.size != sizeof id) return 1;
  if (ds4tp_version() != DS4TP_VERSION_HEX) return 2;
  if (strcmp(ds4tp_err_name(DS4TP_ETIMEDOUT), "DS4TP_ETIMEDOUT") != 0) return 3;
  printf("ds4tp %s from C99\n", ds4tp_version_string());
  return 0;
}
