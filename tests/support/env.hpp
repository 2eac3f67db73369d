// An environment variable set (or unset, with nullptr) for a scope, and
// the library's test hooks set for a scope; the old values come back at
// its end. Forked ranks inherit what is set.
#pragma once

#include <cstdlib>
#include <string>

#include "common/test_hooks.hpp"

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

// The library's fault hooks (common/test_hooks.hpp): `hooks->field = v`.
class ScopedHooks {
 public:
  ScopedHooks() : saved_(test_hooks()) {}
  ~ScopedHooks() { test_hooks() = saved_; }
  ScopedHooks(const ScopedHooks &) = delete;
  ScopedHooks &operator=(const ScopedHooks &) = delete;
  TestHooks *operator->() { return &test_hooks(); }

 private:
  TestHooks saved_;
};

}  // namespace ds4tp::test
