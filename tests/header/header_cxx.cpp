// Compiled with -pedantic -Werror: the public header is valid C++.
#include "ds4tp/ds4tp.h"

#include <cstdio>

int main() {
  ds4tp_options opt;
  ds4tp_options_init(&opt);
  ds4tp_pair *p = nullptr;
  // A worker without a port is refused with a message, not a crash.
  opt.role = DS4TP_ROLE_WORKER;
  ds4tp_identity id;
  ds4tp_identity_init(&id);
  id.n_layer = 1;
  id.n_embd = 4;
  int rc = ds4tp_new(&p, &opt, &id);
  if (rc != DS4TP_EINVAL || p != nullptr || ds4tp_last_error()[0] == 0) return 1;
  std::printf("ds4tp %s from C++: %s\n", ds4tp_version_string(), ds4tp_last_error());
  return 0;
}
