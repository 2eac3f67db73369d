// Built without the verbs binding (DS4TP_WITH_RDMA=OFF, or AUTO without
// the libibverbs headers): RDMA is never offered, and says why.
#include "transport/rdma/probe.hpp"

namespace ds4tp::rdma {

namespace {
constexpr const char *kWhy =
    "this libds4tp was built without RDMA support (DS4TP_WITH_RDMA=OFF, or the libibverbs "
    "headers were missing at build time: install libibverbs-dev and rebuild)";
}

bool built_with_verbs() { return false; }

ProbeResult probe(const ProbeRequest &) {
  ProbeResult r;
  r.reason = kWhy;
  return r;
}

int open_device(const ProbeRequest &, const ProbeResult &, std::unique_ptr<Device> &,
                Error &err) {
  return err.set(DS4TP_EUNSUPPORTED, "{}", kWhy);
}

}  // namespace ds4tp::rdma
