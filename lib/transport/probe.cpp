#include "transport/probe.hpp"

#include "ds4tp/ds4tp.h"
#include "transport/rdma/probe.hpp"
#include "transport/shm/shm_transport.hpp"

namespace ds4tp {

bool transport_available(int transport, std::string &why) {
  switch (transport) {
    case DS4TP_TRANSPORT_TCP:
      why = "always available";
      return true;
    case DS4TP_TRANSPORT_SHM:
      return shm_available(nullptr, why);
    case DS4TP_TRANSPORT_RDMA: {
      rdma::ProbeResult r = rdma::probe(rdma::ProbeRequest{});
      why = r.reason;
      return r.usable;
    }
    default:
      why = "unknown transport";
      return false;
  }
}

}  // namespace ds4tp
