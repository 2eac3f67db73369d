#include "link/probe.hpp"

#include "link/descriptor.hpp"

namespace ds4tp {

bool transport_available(int transport, std::string &why) {
  const link::Descriptor *d = link::find(transport);
  if (d == nullptr) {
    why = "unknown transport";
    return false;
  }
  link::Availability a;
  d->available(link::Query{}, a);
  why = a.why;
  return a.usable;
}

uint32_t offered_caps() {
  uint32_t caps = 0;
  for (const link::Descriptor *d : link::all()) {
    link::Availability a;
    d->available(link::Query{}, a);
    if (a.usable) caps |= d->cap;
  }
  return caps;
}

}  // namespace ds4tp
