#include "stats/trace.hpp"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <tuple>

#include "stats/stats.hpp"

namespace ds4tp::stats {

Trace::Trace(std::string path, uint32_t capacity) : path_(std::move(path)) {
  uint64_t n = 1;
  while (n < capacity) n <<= 1;
  mask_ = n - 1;
  gate_.resize(n);
  ctl_.resize(std::max<uint64_t>(n / 16, 256));
}

namespace {

double us(uint64_t ns) { return double(ns) / 1000.0; }

const char *gate_title(int kind) {
  static const char *const k[] = {"row gate", "batch gate", "big gate"};
  return kind >= 0 && kind < kGateKinds ? k[kind] : "gate";
}

}  // namespace

bool Trace::write(const TraceMeta &m, std::string &why) const {
  const std::string tmp = path_ + ".tmp";
  FILE *f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    why = "cannot write " + tmp + ": " + std::strerror(errno);
    return false;
  }
  const uint64_t cap = mask_ + 1;
  const uint64_t first = gate_n_ > cap ? gate_n_ - cap : 0;
  const uint64_t ctl_cap = ctl_.size();
  const uint64_t ctl_first = ctl_n_ > ctl_cap ? ctl_n_ - ctl_cap : 0;
  // Line-per-event layout: `ds4tp trace merge` reads it back line by line.
  std::fprintf(f,
               "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"ds4tp_rank\":%d,\"role\":\"%s\","
               "\"transport\":\"%s\",\"host_id\":\"%s\",\"clock\":\"CLOCK_MONOTONIC\","
               "\"gates_per_token\":%u,\"gate_events\":%" PRIu64 ",\"dropped\":%" PRIu64 "},\n"
               "\"traceEvents\":[\n"
               "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d (%s)\"}}",
               m.rank, m.role.c_str(), m.transport.c_str(), m.host_id.c_str(), m.gates_per_token,
               gate_n_ - first, first + ctl_first, m.rank, m.rank, m.role.c_str());
  for (uint64_t i = first; i < gate_n_; i++) {
    const Event &e = gate_[i & mask_];
    std::fprintf(f,
                 ",\n{\"name\":\"%s\",\"cat\":\"gate\",\"ph\":\"X\",\"pid\":%d,\"tid\":1,"
                 "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"seq\":%" PRIu64 ",\"%s\":%u,\"bytes\":%" PRIu64
                 ",\"wait_us\":%.3f,\"rc\":%d}}",
                 gate_title(e.kind), m.rank, us(e.t0), us(e.t1 - e.t0), e.seq,
                 e.kind == kBatch ? "index" : "layer", e.a, e.bytes,
                 e.seen != 0 ? us(e.seen - e.t0) : -1.0, e.rc);
    if (e.seen != 0 && e.seen > e.t0)  // nested slice: the peer-wait part
      std::fprintf(f,
                   ",\n{\"name\":\"peer wait\",\"cat\":\"wait\",\"ph\":\"X\",\"pid\":%d,\"tid\":1,"
                   "\"ts\":%.3f,\"dur\":%.3f}",
                   m.rank, us(e.t0), us(e.seen - e.t0));
  }
  for (uint64_t i = ctl_first; i < ctl_n_; i++) {
    const Event &e = ctl_[i % ctl_cap];
    std::fprintf(f,
                 ",\n{\"name\":\"%s\",\"cat\":\"control\",\"ph\":\"X\",\"pid\":%d,\"tid\":2,"
                 "\"ts\":%.3f,\"dur\":%.3f}",
                 e.name, m.rank, us(e.t0), us(e.t1 - e.t0));
  }
  std::fprintf(f, "\n]}\n");
  bool ok = std::fflush(f) == 0;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path_.c_str()) != 0) {
    why = "cannot write " + path_ + ": " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

std::string path_with_rank(std::string p, int rank) {
  for (size_t at; (at = p.find("%r")) != std::string::npos;)
    p.replace(at, 2, std::to_string(rank));
  return p;
}

std::string trace_path_from_env(int rank) {
  const char *v = std::getenv("DS4TP_TRACE");
  if (v == nullptr || *v == 0) return {};
  return path_with_rank(v, rank);
}

// ---- merge ------------------------------------------------------------------

namespace {

struct Parsed {
  std::string head;                // the first line (metadata)
  std::vector<std::string> events; // one event per entry, no trailing comma
  std::string host_id;
  // (kind name, seq) -> (begin, end) in µs
  std::map<std::pair<std::string, uint64_t>, std::pair<double, double>> gates;
};

std::string field(const std::string &line, const char *key) {
  size_t at = line.find(key);
  if (at == std::string::npos) return {};
  at += std::strlen(key);
  size_t end = at;
  while (end < line.size() && line[end] != ',' && line[end] != '}' && line[end] != '"') end++;
  return line.substr(at, end - at);
}

bool parse(const std::string &path, Parsed &p, std::string &why) {
  std::ifstream in(path);
  if (!in) return why = "cannot read " + path, false;
  std::string line;
  if (!std::getline(in, p.head) || p.head.find("\"otherData\"") == std::string::npos)
    return why = path + " is not a ds4tp trace (no otherData on its first line)", false;
  p.host_id = field(p.head, "\"host_id\":\"");
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    if (line.back() == ',') line.pop_back();
    if (line.find("\"cat\":\"gate\"") != std::string::npos) {
      std::string name = field(line, "\"name\":\"");
      double ts = std::atof(field(line, "\"ts\":").c_str());
      double dur = std::atof(field(line, "\"dur\":").c_str());
      uint64_t seq = std::strtoull(field(line, "\"seq\":").c_str(), nullptr, 10);
      if (field(line, "\"rc\":") == "0") p.gates[{name, seq}] = {ts, ts + dur};
    }
    p.events.push_back(line);
  }
  return true;
}

// Rewrites "ts":X as X + shift.
std::string shifted(const std::string &ev, double shift) {
  size_t at = ev.find("\"ts\":");
  if (at == std::string::npos) return ev;
  at += 5;
  size_t end = at;
  while (end < ev.size() && ev[end] != ',' && ev[end] != '}') end++;
  char b[48];
  std::snprintf(b, sizeof b, "%.3f", std::atof(ev.substr(at, end - at).c_str()) + shift);
  return ev.substr(0, at) + b + ev.substr(end);
}

}  // namespace

bool merge_traces(const std::string &a, const std::string &b, const std::string &out,
                  MergeResult &res, std::string &why) {
  Parsed pa, pb;
  if (!parse(a, pa, why) || !parse(b, pb, why)) return false;
  res = MergeResult{};
  res.same_host = !pa.host_id.empty() && pa.host_id == pb.host_id;
  double lo = -INFINITY, hi = INFINITY;
  for (const auto &[key, ga] : pa.gates) {
    auto it = pb.gates.find(key);
    if (it == pb.gates.end()) continue;
    const auto &gb = it->second;
    lo = std::max(lo, ga.first - gb.second);
    hi = std::min(hi, ga.second - gb.first);
    res.matched++;
  }
  if (res.same_host) {
    res.offset_us = 0;  // one CLOCK_MONOTONIC
  } else if (res.matched > 0 && lo <= hi) {
    res.offset_us = (lo + hi) / 2;
    res.uncertainty_us = (hi - lo) / 2;
  } else if (res.matched > 0) {
    res.offset_us = (lo + hi) / 2;  // clocks drifted during the run: the best guess
    res.uncertainty_us = (lo - hi) / 2;
  } else {
    why = "no gate appears in both traces: cannot estimate the clock offset";
    return false;
  }
  FILE *f = std::fopen(out.c_str(), "w");
  if (f == nullptr) return why = "cannot write " + out + ": " + std::strerror(errno), false;
  std::fprintf(f,
               "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"merged\":[\"%s\",\"%s\"],"
               "\"offset_us\":%.3f,\"uncertainty_us\":%.3f,\"matched_gates\":%" PRIu64
               ",\"same_host\":%s},\n\"traceEvents\":[\n",
               a.c_str(), b.c_str(), res.offset_us, res.uncertainty_us, res.matched,
               res.same_host ? "true" : "false");
  bool first = true;
  for (const auto &e : pa.events) {
    std::fprintf(f, "%s%s", first ? "" : ",\n", e.c_str());
    first = false;
  }
  for (const auto &e : pb.events) {
    std::fprintf(f, "%s%s", first ? "" : ",\n", shifted(e, res.offset_us).c_str());
    first = false;
  }
  std::fprintf(f, "\n]}\n");
  if (std::fclose(f) != 0) return why = "cannot write " + out, false;
  return true;
}

}  // namespace ds4tp::stats
