// Flight recorder files and signal dumps (dump_files.hpp).
#include "stats/dump_files.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "os/signal_calls.hpp"
#include "stats/trace.hpp"

namespace ds4tp::stats {

bool write_text_file(const std::string &path, const std::string &body, std::string &why) {
  const std::string tmp = path + ".tmp";
  FILE *f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return why = "cannot write " + tmp + ": " + std::strerror(errno), false;
  const bool ok = std::fwrite(body.data(), 1, body.size(), f) == body.size();
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    why = "cannot write " + path + ": " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

bool write_dump(const std::string &path, const std::string &text, const std::string &trace,
                std::string &why) {
  return write_text_file(path, text, why) && write_text_file(path + ".json", trace, why);
}

int dump_on_signal(const void *key, int signo, const std::string &path,
                   std::function<int(const std::string &, Error &)> dump, const Logger &log,
                   const char *what, Error &err) {
  if (signo == 0) {
    os::forget_signal_calls(key);
    return DS4TP_OK;
  }
  if (path.empty()) return err.set(DS4TP_EINVAL, "{}: no path", what);
  std::string why;
  const bool ok = os::call_on_signal(key, signo, [dump = std::move(dump), path, signo, &log, what] {
    Error e;
    if (dump(path, e) != DS4TP_OK)
      log.warn("{}: flight recorder dump on signal {}: {}", what, signo, e.message);
  }, why);
  return ok ? DS4TP_OK : err.set(DS4TP_EINVAL, "{}: {}", what, why);
}

void dump_on_failure(const std::string &path, int rank,
                     const std::function<int(const std::string &, Error &)> &dump,
                     const std::function<std::string()> &last, const Logger &log,
                     const std::string &what, const char *items) {
  Error why;
  if (!path.empty() && dump(path, why) == DS4TP_OK) {
    log.warn("{}; flight recorder written to {}", what, path_with_rank(path, rank));
    return;
  }
  log.warn("{}{}{}; its last {}:\n{}", what, why.ok() ? "" : "; ", why.message, items, last());
}

}  // namespace ds4tp::stats
