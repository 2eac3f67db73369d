#include "support/expect.hpp"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>

#include <fcntl.h>
#include <unistd.h>

namespace ds4tp::test {

namespace {

// Rank threads of one process may fail at once.
std::mutex g_mu;
std::string g_label;
std::string g_recorded;
int g_sink = -1;

}  // namespace

int expect_failed(const char *file, int line, const char *cond, const ds4tp_pair *pair,
                  bool have_rc, int rc, bool have_want, int want, const char *note_fmt, ...) {
  // The library's message first: any later ds4tp call may replace it.
  std::string msg = pair ? ds4tp_errmsg(pair) : ds4tp_last_error();
  int rank = pair ? ds4tp_rank(pair) : -1;
  int failed = pair ? ds4tp_failed(pair) : 0;

  char note[512] = "";
  if (note_fmt) {
    va_list ap;
    va_start(ap, note_fmt);
    std::vsnprintf(note, sizeof note, note_fmt, ap);
    va_end(ap);
  }

  std::lock_guard<std::mutex> lock(g_mu);
  std::string who = g_label;
  if (rank >= 0) who += (who.empty() ? "" : " ") + std::string("rank ") + std::to_string(rank);
  who += (who.empty() ? "" : " ") + std::string("pid ") + std::to_string(getpid());

  // __FILE__ is relative to the build folder; "../tests/x.cpp" reads better as "tests/x.cpp".
  while (std::strncmp(file, "../", 3) == 0) file += 3;
  std::string text = std::string(file) + ":" + std::to_string(line) + ": [" + who +
                     "] check failed: " + cond + "\n";
  if (note[0]) text += std::string("  note: ") + note + "\n";
  if (have_rc) {
    text += std::string("  status: ") + ds4tp_err_name(rc) + " (" + std::to_string(rc) + ")";
    if (have_want)
      text += std::string(", wanted ") + ds4tp_err_name(want) + " (" + std::to_string(want) + ")";
    text += "\n";
  }
  if (pair) text += std::string("  pair failed: ") + (failed ? "yes" : "no") + "\n";
  text += "  library: \"" + msg + "\"\n";

  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
  g_recorded += text;
  if (g_sink >= 0) (void)!write(g_sink, text.data(), text.size());
  return kChildFailed;
}

void set_failure_label(const char *label) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_label = label ? label : "";
}

void set_failure_sink(int fd) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_sink = fd;
  g_recorded.clear();  // a forked child starts with its own record
}

std::string take_failures() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::string out;
  out.swap(g_recorded);
  return out;
}

std::string drain_failures(int fd) {
  std::string out;
  if (fd < 0) return out;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  return out;
}

}  // namespace ds4tp::test
