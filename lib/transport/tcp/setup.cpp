// The tcp descriptor: always available, nothing to set up; the data
// connection bring-up opened is the transport.
#include "transport/descriptor.hpp"
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
  return make_tcp_transport(std::move(c.data), c.data_config);
}

}  // namespace

const Descriptor kTcp{"tcp",     "TCP",         DS4TP_TRANSPORT_TCP, wire::kCapTcp, false,
                      nullptr,   tcp_available, tcp_setup,           tcp_make};

}  // namespace ds4tp::transport
