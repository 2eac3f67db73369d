// The pair's flight recorder written out (stats/gate_flight.hpp): on
// demand, on a signal, and when a gate fails the pair.
#include "common/status.hpp"
#include "stats/dump_files.hpp"
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
  return stats::dump_on_signal(
      this, signo, path, [this](const std::string &p, Error &e) { return dump(p, e); }, log_,
      "dump_on_signal", err);
}

void Pair::dump_on_failure(int rc) const {
  stats::dump_on_failure(
      dump_path_, rank(), [this](const std::string &p, Error &e) { return dump(p, e); },
      [this] { return flight_.text(header_of(*this, failure()), 8); }, log_,
      fmt::format("pair failed ({})", status_name(rc)), "gates");
}

}  // namespace ds4tp
