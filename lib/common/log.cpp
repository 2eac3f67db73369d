#include "common/log.hpp"

#include <cstdio>

namespace ds4tp {

void Logger::emit(int level, const std::string &msg) const {
  if (fn_ != nullptr) {
    fn_(ud_, level, msg.c_str());
    return;
  }
  static const char *const names[] = {"error", "warn", "info", "debug"};
  const char *name = (level >= 0 && level <= 3) ? names[level] : "log";
  std::fprintf(stderr, "ds4tp %s: %s\n", name, msg.c_str());
}

}  // namespace ds4tp
