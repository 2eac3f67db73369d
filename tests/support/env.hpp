// An environment variable set (or unset, with nullptr) for a scope; the
// old value comes back at its end. Forked ranks inherit what is set.
#pragma once

#include <cstdlib>
#include <string>

namespace ds4tp::test {

struct ScopedEnv {
  ScopedEnv(const char *k, const char *v) : key(k) {
    if (const char *old = std::getenv(k)) saved = old, had = true;
    if (v) setenv(k, v, 1);
    else unsetenv(k);
  }
  ~ScopedEnv() {
    if (had) setenv(key, saved.c_str(), 1);
    else unsetenv(key);
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;
  const char *key;
  std::string saved;
  bool had = false;
};

}  // namespace ds4tp::test
