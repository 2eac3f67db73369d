// What this host can offer: one answer per transport, with the reason in
// words when it cannot, asked of the transport's descriptor
// (descriptor.hpp) with default settings. Used by ds4tp_transport_available
// (operators, `ds4tp probe`); the pair asks the same descriptors, with its
// layout and RDMA settings, for the hello's capability bits.
#pragma once

#include <cstdint>
#include <string>

namespace ds4tp {

// True when `transport` (ds4tp_transport) can run on this host; `why`
// says what was found (or what is missing). Does no network I/O.
bool transport_available(int transport, std::string &why);

// The capability bits (wire::kCap*) of every transport this host can run,
// asked as transport_available asks: what this host would offer a peer.
uint32_t offered_caps();

}  // namespace ds4tp
