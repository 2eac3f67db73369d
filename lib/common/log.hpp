// Leveled logging through the engine's callback (or stderr by default).
// Never called from inside a gate exchange.
#pragma once

#include <string>
#include <utility>

#include <fmt/format.h>

#include "ds4tp/ds4tp.h"

namespace ds4tp {

class Logger {
 public:
  Logger() = default;
  Logger(ds4tp_log_fn fn, void *ud, int level) : fn_(fn), ud_(ud), level_(level) {}

  bool enabled(int level) const { return level <= level_; }

  template <typename... Args>
  void log(int level, fmt::format_string<Args...> f, Args &&...args) const {
    if (!enabled(level)) return;
    emit(level, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  void info(fmt::format_string<Args...> f, Args &&...args) const {
    log(DS4TP_LOG_INFO, f, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void warn(fmt::format_string<Args...> f, Args &&...args) const {
    log(DS4TP_LOG_WARN, f, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void debug(fmt::format_string<Args...> f, Args &&...args) const {
    log(DS4TP_LOG_DEBUG, f, std::forward<Args>(args)...);
  }

  void emit(int level, const std::string &msg) const;

 private:
  ds4tp_log_fn fn_ = nullptr;
  void *ud_ = nullptr;
  int level_ = DS4TP_LOG_INFO;
};

}  // namespace ds4tp
