/* With DS4TP_WARN_EXPERIMENTAL an experimental call warns: built with
 * -Werror, this file must FAIL to compile (tests/CMakeLists.txt checks
 * it). A call of the stable API alone compiles (header_stable.c). */
#define DS4TP_WARN_EXPERIMENTAL
#include "ds4tp/ds4tp.h"

int main(void) {
  ds4tp_group_options o;
  ds4tp_group_options_init(&o);
  return 0;
}
