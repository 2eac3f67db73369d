#include "link/rdma/verbs_loader.hpp"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <dlfcn.h>

#include "os/os.hpp"

namespace ds4tp::rdma {

int Verbs::query_port(abi::Context *context, uint8_t port, abi::PortAttr *attr) const {
  // As ___ibv_query_port in rdma-core's verbs.h: the extended op fills the
  // struct (told the size a rdma-core 44 build passes); the exported compat
  // call fills its older prefix.
  std::memset(attr, 0, sizeof(*attr));
  if (abi::ExtendedContextTail *x = abi::extended_query_port(context))
    return x->query_port(context, port, attr, abi::kPortAttrBytes);
  return query_port_compat(context, port, attr);
}

namespace {

template <typename F>
bool resolve(void *h, const char *name, F &f, std::string &missing) {
  void *p = dlsym(h, name);
  if (p == nullptr) {
    if (!missing.empty()) missing += ", ";
    missing += name;
    return false;
  }
  f = reinterpret_cast<F>(p);
  return true;
}

std::unique_ptr<Verbs> open_library(const std::string &path, std::string &why) {
  // RTLD_LOCAL keeps verbs symbols out of the global namespace.
  void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char *e = dlerror();
    why = e ? e : "dlopen failed";
    return nullptr;
  }
  auto v = std::make_unique<Verbs>();
  v->path = path;
  std::string missing;
  resolve(h, "ibv_get_device_list", v->get_device_list, missing);
  resolve(h, "ibv_free_device_list", v->free_device_list, missing);
  resolve(h, "ibv_get_device_name", v->get_device_name, missing);
  resolve(h, "ibv_open_device", v->open_device, missing);
  resolve(h, "ibv_close_device", v->close_device, missing);
  resolve(h, "ibv_query_device", v->query_device, missing);
  resolve(h, "ibv_query_port", v->query_port_compat, missing);
  resolve(h, "ibv_query_gid", v->query_gid, missing);
  resolve(h, "ibv_alloc_pd", v->alloc_pd, missing);
  resolve(h, "ibv_dealloc_pd", v->dealloc_pd, missing);
  resolve(h, "ibv_reg_mr", v->reg_mr, missing);
  resolve(h, "ibv_dereg_mr", v->dereg_mr, missing);
  resolve(h, "ibv_create_cq", v->create_cq, missing);
  resolve(h, "ibv_destroy_cq", v->destroy_cq, missing);
  resolve(h, "ibv_create_qp", v->create_qp, missing);
  resolve(h, "ibv_modify_qp", v->modify_qp, missing);
  resolve(h, "ibv_destroy_qp", v->destroy_qp, missing);
  resolve(h, "ibv_wc_status_str", v->wc_status_str, missing);
  if (!missing.empty()) {
    why = path + " lacks " + missing;
    dlclose(h);
    return nullptr;
  }
  std::string optional;
  resolve(h, "_ibv_query_gid_ex", v->query_gid_ex, optional);
  // Exported data-path calls (Apple's librdma); rdma-core has none.
  resolve(h, "ibv_post_send", v->post_send, optional);
  resolve(h, "ibv_post_recv", v->post_recv, optional);
  resolve(h, "ibv_poll_cq", v->poll_cq, optional);
  return v;
}

}  // namespace

const Verbs *load_verbs(const char *path, std::string &why) {
  std::vector<std::string> names;
  if (path != nullptr && *path) {
    names.push_back(path);
  } else if (const char *env = std::getenv("DS4TP_VERBS_LIB"); env != nullptr && *env) {
    names.push_back(env);
  } else {
    for (const char *const *n = os::verbs_library_names(); *n != nullptr; n++)
      names.push_back(*n);
  }
  return load_first(names, why);
}

const Verbs *load_first(const std::vector<std::string> &names, std::string &why) {
  // Kept for the life of the process (never destroyed: a gate thread may
  // still use a table while static destructors run).
  static std::mutex mu;
  static auto *loaded = new std::map<std::string, std::unique_ptr<Verbs>>();
  std::lock_guard<std::mutex> lock(mu);
  std::string tried;
  for (const std::string &name : names) {
    auto it = loaded->find(name);
    if (it != loaded->end()) return it->second.get();
    std::string one;
    std::unique_ptr<Verbs> v = open_library(name, one);
    if (v) {
      const Verbs *out = v.get();
      loaded->emplace(name, std::move(v));
      return out;
    }
    // Every name tried is in the report, whatever dlerror() says.
    if (!tried.empty()) tried += "; ";
    tried += one.find(name) == std::string::npos ? name + ": " + one : one;
  }
  why = names.empty() ? std::string("no verbs library to try") : tried;
  return nullptr;
}

}  // namespace ds4tp::rdma
