// The pair's flight recorder (gate_flight.hpp): a seqlock per slot, and
// its two written forms.
#include "stats/gate_flight.hpp"

#include <fmt/format.h>

#include "common/status.hpp"
#include "stats/dump_files.hpp"
#include "stats/stats.hpp"

namespace ds4tp::stats {

void GateFlight::record(const FlightGate &g) {
  const uint64_t n = n_.load(std::memory_order_relaxed);
  Slot &s = slots_[n % kGates];
  s.version.store(2 * n + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.seq.store(g.seq, std::memory_order_relaxed);
  s.bytes.store(g.bytes, std::memory_order_relaxed);
  s.t0.store(g.t0, std::memory_order_relaxed);
  s.t1.store(g.t1, std::memory_order_relaxed);
  s.seen.store(g.seen == UINT64_MAX ? g.t1 : g.seen, std::memory_order_relaxed);
  s.a.store(g.a, std::memory_order_relaxed);
  s.rc.store(g.rc, std::memory_order_relaxed);
  s.kind.store(g.kind, std::memory_order_relaxed);
  s.version.store(2 * n + 2, std::memory_order_release);
  n_.store(n + 1, std::memory_order_release);
}

std::vector<FlightGate> GateFlight::gates() const {
  const uint64_t n = recorded();
  const uint64_t kept = n < kGates ? n : kGates;
  std::vector<FlightGate> out;
  out.reserve(size_t(kept));
  for (uint64_t i = n - kept; i < n; i++) {
    const Slot &s = slots_[i % kGates];
    const uint64_t v = s.version.load(std::memory_order_acquire);
    FlightGate g;
    g.seq = s.seq.load(std::memory_order_relaxed);
    g.bytes = s.bytes.load(std::memory_order_relaxed);
    g.t0 = s.t0.load(std::memory_order_relaxed);
    g.t1 = s.t1.load(std::memory_order_relaxed);
    g.seen = s.seen.load(std::memory_order_relaxed);
    g.a = s.a.load(std::memory_order_relaxed);
    g.rc = s.rc.load(std::memory_order_relaxed);
    g.kind = s.kind.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (v == 2 * i + 2 && s.version.load(std::memory_order_relaxed) == v) out.push_back(g);
  }
  return out;
}

static std::string wait_words(const FlightGate &g) {
  if (g.seen < g.t0 || g.seen == 0 || g.t1 == 0) return "-";
  return fmt::format("{:.1f}", double(g.seen - g.t0) / 1e3);
}

std::string GateFlight::text(const GateFlightHeader &h, size_t last) const {
  std::vector<FlightGate> gs = gates();
  if (last != 0 && gs.size() > last) gs.erase(gs.begin(), gs.end() - ptrdiff_t(last));
  std::string s = fmt::format(
      "ds4tp pair flight recorder: rank {} ({}) over {}, the last {} of {} gates\n{}"
      "peer_wait: how long this rank waited for the peer's first data, us (-: the link cannot "
      "tell, or timing is off)\n",
      h.rank, h.role, h.transport, gs.size(), recorded(),
      h.failure.empty() ? "" : "the pair failed: " + h.failure + "\n");
  s += fmt::format("{:>18} {:>12} {:>12} {:<5} {:>6} {:>10} {:>12}  {}\n", "start_us",
                   "duration_us", "peer_wait_us", "kind", "index", "seq", "bytes", "status");
  for (const FlightGate &g : gs)
    s += fmt::format("{:>18.1f} {:>12} {:>12} {:<5} {:>6} {:>10} {:>12}  {}\n",
                     double(g.t0) / 1e3,
                     g.t1 != 0 ? fmt::format("{:.1f}", double(g.t1 - g.t0) / 1e3) : "-",
                     wait_words(g), kind_name(g.kind), g.a, g.seq, g.bytes,
                     g.rc != 0 ? status_name(g.rc) : "ok");
  return s;
}

std::string GateFlight::trace(const GateFlightHeader &h) const {
  std::string s = "{\"traceEvents\":[\n";
  s += fmt::format("{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":"
                   "\"rank {} ({})\"}}}}",
                   h.rank, h.rank, h.role);
  for (const FlightGate &g : gates())
    s += fmt::format(
        ",\n{{\"name\":\"{} gate\",\"cat\":\"gate\",\"ph\":\"X\",\"pid\":{},\"tid\":0,"
        "\"ts\":{:.3f},\"dur\":{:.3f},\"args\":{{\"index\":{},\"seq\":{},\"bytes\":{},"
        "\"peer_wait_us\":{},\"status\":\"{}\"}}}}",
        kind_name(g.kind), h.rank, double(g.t0) / 1e3,
        g.t1 != 0 ? double(g.t1 - g.t0) / 1e3 : 0.0, g.a, g.seq, g.bytes,
        wait_words(g) == "-" ? std::string("null") : wait_words(g),
        g.rc != 0 ? status_name(g.rc) : "DS4TP_OK");
  s += "\n]}\n";
  return s;
}

bool GateFlight::write(const std::string &path, const GateFlightHeader &h,
                       std::string &why) const {
  return write_dump(path, text(h), trace(h), why);
}

}  // namespace ds4tp::stats
