// Small helpers shared by the bench files: a clock, a result type that
// carries a message, and "key=value" lines for the coordination channel.
#pragma once

#include <cstdint>
#include <ctime>
#include <map>
#include <string>
#include <vector>

namespace bench {

inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Outcome of a set-up or an operation: ok, or a message saying why not.
struct Status {
  bool ok = true;
  std::string why;
  static Status fail(std::string w) { return Status{false, std::move(w)}; }
};

// One coordination message: a verb and key=value fields, no spaces in
// values ("CASE kind=row bytes=16384"). Free-text reasons go last, in
// the field "why", which takes the rest of the line.
struct Msg {
  std::string verb;
  std::map<std::string, std::string> kv;

  std::string get(const std::string &k, const std::string &dflt = "") const;
  int64_t num(const std::string &k, int64_t dflt = 0) const;
  Msg &set(const std::string &k, const std::string &v);
  Msg &set(const std::string &k, int64_t v);
  std::string encode() const;
  static Msg decode(const std::string &line);
};

// "1k" -> 1024, "16KiB" -> 16384, "8m" -> 8 MiB, "300" -> 300; 0 on error.
uint64_t parse_bytes(const std::string &s);
// "1 KiB", "16 KiB", "8 MiB".
std::string bytes_label(uint64_t b);
std::vector<std::string> split(const std::string &s, char sep);

// Names this machine: boot id plus host name (equal on both ranks only
// when they share a kernel, i.e. shared memory can work).
std::string host_tag();

}  // namespace bench
