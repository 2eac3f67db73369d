#include "common/status.hpp"

#include "ds4tp/ds4tp.h"
#include "link/descriptor.hpp"

namespace ds4tp {

const char *status_message(int status) {
#define DS4TP_MESSAGE_(name, value, msg) \
  case value:                            \
    return msg;
  switch (status) {
    DS4TP_STATUS_MAP(DS4TP_MESSAGE_)
    default: return "unknown status";
  }
#undef DS4TP_MESSAGE_
}

const char *status_name(int status) {
#define DS4TP_NAME_(name, value, msg) \
  case value:                         \
    return "DS4TP_" #name;
  switch (status) {
    DS4TP_STATUS_MAP(DS4TP_NAME_)
    default: return "DS4TP_UNKNOWN";
  }
#undef DS4TP_NAME_
}

const char *transport_name(int transport) {
  if (transport == DS4TP_TRANSPORT_AUTO) return "auto";
  const link::Descriptor *d = link::find(transport);
  return d != nullptr ? d->name : "?";
}

}  // namespace ds4tp
