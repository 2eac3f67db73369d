// Writing a flight recorder out, for a pair's gates (gate_flight.hpp) and
// a group's calls (group/flight.hpp) alike: its text and its trace side by
// side, and the same on a signal the engine picks.
#pragma once

#include <functional>
#include <string>

#include "common/error.hpp"
#include "common/log.hpp"

namespace ds4tp::stats {

// `body` to `path` through a temporary file renamed over it; false with `why`.
bool write_text_file(const std::string &path, const std::string &body, std::string &why);
// `text` to `path` and `trace` to `path`.json; false with `why`.
bool write_dump(const std::string &path, const std::string &text, const std::string &trace,
                std::string &why);

// Calls `dump(path, err)` on the signal thread each time the process gets
// `signo`, under `key` (one per key; os/signal_calls.hpp), logging its
// failure; signo 0: no longer. EINVAL, `what` first, for a missing path
// or a signal that cannot be caught.
int dump_on_signal(const void *key, int signo, const std::string &path,
                   std::function<int(const std::string &, Error &)> dump, const Logger &log,
                   const char *what, Error &err);

// After a failure: `dump(path, err)` to `path` ("%r": `rank`) where one
// is set, logging where it went; else (or when it cannot be written) the
// newest entries, `last()`, through the log, each line beginning `what`
// ("pair failed (DS4TP_ETIMEDOUT)"); `items` names them ("gates").
void dump_on_failure(const std::string &path, int rank,
                     const std::function<int(const std::string &, Error &)> &dump,
                     const std::function<std::string()> &last, const Logger &log,
                     const std::string &what, const char *items);

}  // namespace ds4tp::stats
