// A call's accounting: its entry (the mark its steps carry), its end in
// the stats, and its entry in the flight recorder (flight.hpp), which a
// failed call writes out.
#include <algorithm>

#include "common/clock.hpp"
#include "common/status.hpp"
#include "group/call.hpp"
#include "group/group.hpp"
#include "stats/dump_files.hpp"
#include "stats/trace.hpp"

namespace ds4tp::group {

int Group::begin(Error &err, uint32_t call) {
  if (int f = failed(); f != 0)
    return err.set(DS4TP_EFAILED, "group failed earlier: {}", message());
  if (!connected()) return err.set(DS4TP_ESTATE, "group not connected (call ds4tp_group_connect)");
  local_.call = cross_.call = call;
  local_.first = cross_.first = true;
  local_.call_index = cross_.call_index =
      calls_entered_.fetch_add(1, std::memory_order_relaxed) + 1;
  call_kind_ = int(call & 31) - 1;  // call.hpp: the kind in bits 0..4, from 1
  call_entry_ns_ = now_ns();
  call_t0_ = stats_.timed() ? call_entry_ns_ : 0;
  call_algorithm_ = "";
  // Microseconds of the group clock: 32 bits wrap after 71 minutes,
  // far beyond any arrival bound a call waits out. Off rank 0's host the
  // heartbeats keep the offset current.
  call_offset_ns_ = clock_.offset_ns;
  ClockOffset beat;
  if (clock_.measured && heartbeat_ && heartbeat_->clock(beat)) call_offset_ns_ = beat.offset_ns;
  const uint32_t mark = uint32_t(uint64_t(int64_t(call_entry_ns_) + call_offset_ns_) / 1000);
  local_.mark = cross_.mark = mark;
  local_.marks = cross_.marks = link::Marks{};
  host_marked_ = false;
  return DS4TP_OK;
}

int Group::ended(int rc, uint64_t sent, uint64_t received) {
  const uint64_t end = now_ns();  // the one clock read at the end (stats and recorder)
  stats_.collective_done(call_kind_, sent, received, call_t0_, end, rc);
  int32_t arrival[kFlightRanks];
  const link::Marks *heard[2] = {local_ ? &local_.marks : nullptr, cross_ ? &cross_.marks : nullptr};
  arrivals_of(opt_.rank, local_.mark, heard, 2, opt_.size, arrival);
  const int last = last_arrival(arrival, opt_.size);
  if (rc == DS4TP_OK) stats_.arrivals_done(arrival, opt_.size, last);
  flight_.record([&](FlightCall &c) {
    c.index = local_.call_index;
    c.call = local_.call;
    c.bytes = sent + received;
    c.start_ns = uint64_t(int64_t(call_entry_ns_) + call_offset_ns_);
    c.duration_ns = end - call_entry_ns_;
    c.rc = rc;
    c.algorithm = call_algorithm_;
    c.ranks = opt_.size;
    std::copy_n(arrival, opt_.size, c.arrival_us);
    c.last = last;
    if (rc != DS4TP_OK) {  // error is read only where rc says so
      const std::string m = message();
      const size_t n = std::min(m.size(), sizeof c.error - 1);
      std::copy_n(m.data(), n, c.error);
      c.error[n] = 0;
    }
  });
  if (rc != DS4TP_OK)  // the calls before a failure show who the group waited on
    stats::dump_on_failure(
        dump_path_, opt_.rank, [this](const std::string &p, Error &e) { return dump(p, e); },
        [this] { return flight_.text(flight_header(), 8); }, opt_.log,
        fmt::format("group: {} failed", call_name(local_.call)), "calls");
  return rc;
}

FlightHeader Group::flight_header() const {
  FlightHeader h;
  h.rank = opt_.rank;
  h.size = opt_.size;
  h.plan = plan();
  ClockOffset c = clock_;
  if (c.measured && heartbeat_) heartbeat_->clock(c);
  h.clock_offset_ns = c.offset_ns;
  h.clock_uncertainty_ns = c.uncertainty_ns;
  h.clock_measured = c.measured;
  return h;
}

int Group::dump(const std::string &path, Error &err) const {
  if (path.empty()) return err.set(DS4TP_EINVAL, "group_dump: no path (and DS4TP_GROUP_DUMP unset)");
  const std::string at = stats::path_with_rank(path, opt_.rank);
  std::string why;
  if (!flight_.write(at, flight_header(), why))
    return err.set(DS4TP_EIO, "group_dump: {}", why);
  return DS4TP_OK;
}

int Group::dump_on_signal(int signo, const std::string &path, Error &err) {
  return stats::dump_on_signal(
      this, signo, path, [this](const std::string &p, Error &e) { return dump(p, e); }, opt_.log,
      "group_dump_on_signal", err);
}

}  // namespace ds4tp::group
