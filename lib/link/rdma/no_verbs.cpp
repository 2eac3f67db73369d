// Built without the verbs binding (DS4TP_WITH_RDMA=OFF): RDMA is never
// offered, and says why.
#include "link/rdma/probe.hpp"

#if defined(__APPLE__)
#include <dlfcn.h>
#endif

namespace ds4tp::rdma {

namespace {
constexpr const char *kWhy =
    "this libds4tp was built without RDMA support (DS4TP_WITH_RDMA=OFF: rebuild with "
    "DS4TP_WITH_RDMA=AUTO)";
}

bool built_with_verbs() { return false; }

ProbeResult probe(const ProbeRequest &) {
  ProbeResult r;
  r.reason = kWhy;
#if defined(__APPLE__)
  // Say whether the library is even here.
  void *h = dlopen("/usr/lib/librdma.dylib", RTLD_LAZY | RTLD_LOCAL);
  r.reason += h != nullptr ? "; /usr/lib/librdma.dylib is present"
                           : "; /usr/lib/librdma.dylib is missing too (RDMA over Thunderbolt "
                             "needs macOS 26.2 or later)";
  if (h != nullptr) dlclose(h);
#endif
  return r;
}

int open_device(const ProbeRequest &, const ProbeResult &, std::unique_ptr<Device> &,
                Error &err) {
  return err.set(DS4TP_EUNSUPPORTED, "{}", kWhy);
}

}  // namespace ds4tp::rdma
