// The pair's flight recorder written out (stats/gate_flight.hpp): on
// demand, on a signal, and when a gate fails the pair.
#include "common/status.hpp"
#include "os/signal_calls.hpp"
#include "pair/pair.hpp"

namespace ds4tp {

namespace {
stats::GateFlightHeader header_of(const Pair &p, const std::string &failure) {
  stats::GateFlightHeader h;
  h.rank = p.rank();
  h.role = p.options().role == DS4TP_ROLE_LEADER ? "leader" : "worker";
  h.transport = p.connected() ? transport_name(p.transport()) : "none yet";
  h.failure = failure;
  return h;
}
}  // namespace

int Pair::dump(const std::string &path, Error &err) const {
  if (path.empty()) return err.set(DS4TP_EINVAL, "dump: no path (and DS4TP_PAIR_DUMP unset)");
  const std::string at = stats::path_with_rank(path, rank());
  std::string why;
  if (!flight_.write(at, header_of(*this, failed() ? failure() : ""), why))
    return err.set(DS4TP_EIO, "dump: {}", why);
  return DS4TP_OK;
}

int Pair::dump_on_signal(int signo, const std::string &path, Error &err) {
  if (signo == 0) {
    os::forget_signal_calls(this);
    return DS4TP_OK;
  }
  if (path.empty()) return err.set(DS4TP_EINVAL, "dump_on_signal: no path");
  std::string why;
  const bool ok = os::call_on_signal(this, signo, [this, path, signo] {
    Error e;
    if (dump(path, e) != DS4TP_OK) log_.warn("flight recorder dump on signal {}: {}", signo, e.message);
  }, why);
  return ok ? DS4TP_OK : err.set(DS4TP_EINVAL, "dump_on_signal: {}", why);
}

void Pair::dump_on_failure(int rc) const {
  Error why;
  if (!dump_path_.empty() && dump(dump_path_, why) == DS4TP_OK) {
    log_.warn("pair failed ({}); flight recorder written to {}", status_name(rc),
              stats::path_with_rank(dump_path_, rank()));
    return;
  }
  log_.warn("pair failed ({}){}{}; its last gates:\n{}", status_name(rc), why.ok() ? "" : "; ",
            why.message, flight_.text(header_of(*this, failure()), 8));
}

}  // namespace ds4tp
