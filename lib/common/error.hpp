// Internal error reporting: a status code plus a message built with fmt.
// Formatting (and so allocation) happens only on the failure path.
#pragma once

#include <string>
#include <utility>

#include <fmt/format.h>

#include "ds4tp/ds4tp.h"

namespace ds4tp {

struct Error {
  int code = DS4TP_OK;
  std::string message;

  bool ok() const { return code == DS4TP_OK; }

  // Records a failure and returns its code, so callers can write
  // `return err.set(DS4TP_EIO, "...", ...);`.
  template <typename... Args>
  int set(int c, fmt::format_string<Args...> f, Args &&...args) {
    code = c;
    message = fmt::format(f, std::forward<Args>(args)...);
    return c;
  }

  void clear() {
    code = DS4TP_OK;
    message.clear();
  }
};

}  // namespace ds4tp
