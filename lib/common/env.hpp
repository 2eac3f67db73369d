// Settings the library reads from the environment, one helper for all.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>

namespace ds4tp {

// The number in environment variable `name`; nullopt when unset or empty.
inline std::optional<int64_t> env_number(const char *name) {
  const char *v = std::getenv(name);
  if (v == nullptr || *v == 0) return std::nullopt;
  return int64_t(std::strtoll(v, nullptr, 10));
}

}  // namespace ds4tp
