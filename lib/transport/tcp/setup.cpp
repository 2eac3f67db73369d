// The tcp descriptor: always available, nothing to set up; the data
// connection bring-up opened is the transport, and a group's links are
// its mesh.
#include "transport/descriptor.hpp"
#include "transport/tcp/mesh.hpp"
#include "transport/tcp/transport.hpp"
#include "wire/hello.hpp"

namespace ds4tp::transport {

namespace {

void tcp_available(const Query &, Availability &out) {
  out.usable = true;
  out.why = "always available";
}

int tcp_setup(Connection &, const Availability &, std::unique_ptr<State> &, std::string &,
              Error &) {
  return DS4TP_OK;
}

std::unique_ptr<Transport> tcp_make(Connection &c, std::unique_ptr<State>) {
  const char *bad = nullptr;
  tcp::BigPlan big = tcp::choose_big_plan(c.data.get(), c.rank, bad);
  if (bad != nullptr)
    c.log.warn("DS4TP_BIG_GATE={} is not duplex, alternate or auto: using auto", bad);
  c.log.debug("tcp big gates: {} ({})",
              big.mode == tcp::BigMode::Alternate ? "alternating rounds" : "full duplex", big.why);
  return make_tcp_transport(std::move(c.data), c.data_config, big);
}

int tcp_mesh_setup(const MeshConnection &, const Availability &, std::unique_ptr<State> &,
                   std::string &, Error &) {
  return DS4TP_OK;
}

std::unique_ptr<MeshLink> tcp_mesh_make(const MeshConnection &c, std::vector<net::Fd> fds,
                                        std::unique_ptr<State>) {
  return std::make_unique<tcp::Mesh>(std::move(fds), c.rank, c.chunk, c.timeout_ns, c.policy,
                                     c.adaptive, c.names);
}

}  // namespace

const Descriptor kTcp{"tcp",          "TCP",         DS4TP_TRANSPORT_TCP, wire::kCapTcp, false,
                      tcp_available,  tcp_setup,     tcp_make,
                      tcp_mesh_setup, tcp_mesh_make};

}  // namespace ds4tp::transport
