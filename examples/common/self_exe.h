/* The running program's own path, for examples that exec a worker copy of
 * themselves: /proc on Linux, the loader's record on macOS (no /proc
 * there). Header-only: each example is one C file. */
#ifndef DS4TP_EXAMPLES_SELF_EXE_H
#define DS4TP_EXAMPLES_SELF_EXE_H

#include <stdint.h>
#ifdef __APPLE__
#include <mach-o/dyld.h>
#endif

static const char *self_exe(char *buf, uint32_t len, const char *argv0) {
#ifdef __APPLE__
  if (_NSGetExecutablePath(buf, &len) == 0) return buf;
  return argv0;
#else
  (void)buf;
  (void)len;
  (void)argv0;
  return "/proc/self/exe";
#endif
}

#endif
