#include "util.hpp"

#include <cctype>
#include <cstdlib>
#include <fstream>

#include <unistd.h>

namespace bench {

std::string Msg::get(const std::string &k, const std::string &dflt) const {
  auto it = kv.find(k);
  return it == kv.end() ? dflt : it->second;
}

int64_t Msg::num(const std::string &k, int64_t dflt) const {
  auto it = kv.find(k);
  if (it == kv.end() || it->second.empty()) return dflt;
  return std::strtoll(it->second.c_str(), nullptr, 10);
}

Msg &Msg::set(const std::string &k, const std::string &v) {
  kv[k] = v;
  return *this;
}

Msg &Msg::set(const std::string &k, int64_t v) { return set(k, std::to_string(v)); }

std::string Msg::encode() const {
  std::string s = verb;
  for (auto &[k, v] : kv) {
    if (k == "why") continue;
    s += ' ';
    s += k;
    s += '=';
    s += v;
  }
  auto w = kv.find("why");
  if (w != kv.end()) {
    s += " why=";
    for (char c : w->second) s += (c == '\n' || c == '\r') ? ' ' : c;
  }
  return s;
}

Msg Msg::decode(const std::string &line) {
  Msg m;
  size_t i = 0;
  auto word = [&]() {
    while (i < line.size() && line[i] == ' ') i++;
    size_t b = i;
    while (i < line.size() && line[i] != ' ') i++;
    return line.substr(b, i - b);
  };
  m.verb = word();
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') i++;
    if (line.compare(i, 4, "why=") == 0) {
      m.kv["why"] = line.substr(i + 4);
      break;
    }
    std::string w = word();
    if (w.empty()) break;
    size_t eq = w.find('=');
    if (eq == std::string::npos)
      m.kv[w] = "";
    else
      m.kv[w.substr(0, eq)] = w.substr(eq + 1);
  }
  return m;
}

uint64_t parse_bytes(const std::string &s) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return 0;
  char *end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  std::string unit(end);
  for (auto &c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (unit.empty() || unit == "b") return v;
  if (unit == "k" || unit == "kib" || unit == "kb") return v << 10;
  if (unit == "m" || unit == "mib" || unit == "mb") return v << 20;
  if (unit == "g" || unit == "gib" || unit == "gb") return v << 30;
  return 0;
}

std::string bytes_label(uint64_t b) {
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= (1ull << 10) && b % (1ull << 10) == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(sep, b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

std::string host_tag() {
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return boot + "/" + host;
}

}  // namespace bench
