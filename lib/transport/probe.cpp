#include "transport/probe.hpp"

#include "transport/descriptor.hpp"

namespace ds4tp {

bool transport_available(int transport, std::string &why) {
  const transport::Descriptor *d = transport::find(transport);
  if (d == nullptr) {
    why = "unknown transport";
    return false;
  }
  transport::Availability a;
  d->available(transport::Query{}, a);
  why = a.why;
  return a.usable;
}

uint32_t offered_caps() {
  uint32_t caps = 0;
  for (const transport::Descriptor *d : transport::all()) {
    transport::Availability a;
    d->available(transport::Query{}, a);
    if (a.usable) caps |= d->cap;
  }
  return caps;
}

}  // namespace ds4tp
