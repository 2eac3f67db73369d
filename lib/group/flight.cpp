// The flight recorder's arithmetic and its two written forms (flight.hpp).
#include "group/flight.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "common/status.hpp"
#include "group/call.hpp"
#include "stats/dump_files.hpp"

namespace ds4tp::group {

void arrivals_of(int me, uint32_t my_mark, const link::Marks *const *lanes, int lane_count,
                 int ranks, int32_t *arrival_us) {
  int64_t rel[kFlightRanks];
  bool known[kFlightRanks] = {};
  for (int r = 0; r < ranks; r++) rel[r] = 0;
  for (int i = 0; i < lane_count; i++) {
    const link::Marks *m = lanes[i];
    if (m == nullptr) continue;
    for (int r = 0; r < ranks; r++)
      if (m->heard & (1u << r)) {
        rel[r] = int32_t(m->at[r] - my_mark);  // wraps: a signed difference
        known[r] = true;
      }
  }
  if (me >= 0 && me < ranks) rel[me] = 0, known[me] = true;
  int64_t first = INT64_MAX;
  for (int r = 0; r < ranks; r++)
    if (known[r] && rel[r] < first) first = rel[r];
  for (int r = 0; r < ranks; r++)
    arrival_us[r] = known[r] ? int32_t(rel[r] - first) : kUnknownArrival;
}

uint32_t latest_mark(uint32_t mine, const link::Marks &heard) {
  int32_t most = 0;
  for (int r = 0; r < kFlightRanks; r++)
    if (heard.heard & (1u << r)) most = std::max(most, int32_t(heard.at[r] - mine));
  return mine + uint32_t(most);
}

int last_arrival(const int32_t *arrival_us, int ranks) {
  int last = -1;
  int32_t most = INT32_MIN;
  bool tie = false;
  for (int r = 0; r < ranks; r++) {
    if (arrival_us[r] == kUnknownArrival) return -1;
    if (arrival_us[r] > most) {
      most = arrival_us[r];
      last = r;
      tie = false;
    } else if (arrival_us[r] == most) {
      tie = true;
    }
  }
  return tie ? -1 : last;
}

std::vector<FlightCall> FlightRecorder::calls() const {
  Hold h(busy_);
  std::vector<FlightCall> out;
  const uint64_t kept = n_ < kFlightCalls ? n_ : kFlightCalls;
  out.reserve(size_t(kept));
  for (uint64_t i = n_ - kept; i < n_; i++) out.push_back(ring_[size_t(i % kFlightCalls)]);
  return out;
}

static std::string clock_words(const FlightHeader &h) {
  if (h.rank == 0) return "clock: rank 0's (the group clock)";
  if (!h.clock_measured) return "clock: rank 0's host's, the same as rank 0's";
  return fmt::format("clock: rank 0's = this rank's {:+.1f} us (measured at bring-up and by the "
                     "heartbeats since, +-{:.1f} us)",
                     double(h.clock_offset_ns) / 1e3, double(h.clock_uncertainty_ns) / 1e3);
}

static std::string arrival_words(const FlightCall &c) {
  std::string s;
  for (int r = 0; r < c.ranks; r++) {
    if (!s.empty()) s += ' ';
    if (c.arrival_us[r] == kUnknownArrival)
      s += fmt::format("{}:?", r);
    else
      s += fmt::format("{}:+{}", r, c.arrival_us[r]);
  }
  return s;
}

std::string FlightRecorder::text(const FlightHeader &h, size_t last) const {
  std::vector<FlightCall> cs = calls();
  if (last != 0 && cs.size() > last) cs.erase(cs.begin(), cs.end() - ptrdiff_t(last));
  std::string s = fmt::format(
      "ds4tp group flight recorder: rank {} of {}, the last {} of {} calls\n{}\n{}\n"
      "arrivals: each rank's entry into the call after the first rank's, us (?: not heard "
      "here); last: the rank that entered after every other\n",
      h.rank, h.size, cs.size(), recorded(), h.plan, clock_words(h));
  s += fmt::format("{:>8} {:>18} {:>12} {:>12}  {:<28} {:<9} {:>4}  {}\n", "call", "start_us",
                   "duration_us", "bytes", "op", "algorithm", "last", "arrivals");
  for (const FlightCall &c : cs) {
    s += fmt::format("{:>8} {:>18.1f} {:>12.1f} {:>12}  {:<28} {:<9} {:>4}  {}\n", c.index,
                     double(c.start_ns) / 1e3, double(c.duration_ns) / 1e3, c.bytes,
                     call_name(c.call), *c.algorithm ? c.algorithm : "-",
                     c.last >= 0 ? std::to_string(c.last) : std::string("-"), arrival_words(c));
    if (c.rc != 0)
      s += fmt::format("{:>8} failed: {}: {}\n", "", status_name(c.rc), c.error);
  }
  return s;
}

// JSON string body: quotes, backslashes and control bytes escaped.
static std::string json_text(const char *p) {
  std::string o;
  for (; *p; p++) {
    const unsigned char ch = static_cast<unsigned char>(*p);
    if (ch == '"' || ch == '\\') o += '\\', o += char(ch);
    else if (ch < 0x20) o += fmt::format("\\u{:04x}", ch);
    else o += char(ch);
  }
  return o;
}

std::string FlightRecorder::trace(const FlightHeader &h) const {
  const std::vector<FlightCall> cs = calls();
  std::string s = "{\"traceEvents\":[\n";
  s += fmt::format("{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":"
                   "\"rank {} (group of {})\"}}}}",
                   h.rank, h.rank, h.size);
  for (const FlightCall &c : cs) {
    std::string arr;
    for (int r = 0; r < c.ranks; r++)
      if (c.arrival_us[r] != kUnknownArrival)
        arr += fmt::format("{}\"{}\":{}", arr.empty() ? "" : ",", r, c.arrival_us[r]);
    s += fmt::format(
        ",\n{{\"name\":\"{}\",\"cat\":\"group\",\"ph\":\"X\",\"pid\":{},\"tid\":0,\"ts\":{:.3f},"
        "\"dur\":{:.3f},\"args\":{{\"call\":{},\"bytes\":{},\"algorithm\":\"{}\",\"last\":{},"
        "\"arrival_us\":{{{}}},\"status\":\"{}\",\"error\":\"{}\"}}}}",
        json_text(call_name(c.call).c_str()), h.rank, double(c.start_ns) / 1e3,
        double(c.duration_ns) / 1e3, c.index, c.bytes, c.algorithm, c.last, arr,
        c.rc != 0 ? status_name(c.rc) : "DS4TP_OK", c.rc != 0 ? json_text(c.error) : "");
  }
  s += "\n]}\n";
  return s;
}

bool FlightRecorder::write(const std::string &path, const FlightHeader &h,
                           std::string &why) const {
  return stats::write_dump(path, text(h), trace(h), why);
}

}  // namespace ds4tp::group
