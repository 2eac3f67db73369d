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

}  // namespace ds4tp
