// libibverbs loaded at run time (dlopen), so libds4tp has no link-time
// dependency on rdma-core: a machine without it runs over TCP/shm, and the
// probe says "libibverbs is not installed" instead of the loader refusing
// to start the program.
//
// Which calls need a symbol: the set-up calls below are exported functions
// and are resolved with dlsym. The data-path calls (ibv_post_send,
// ibv_post_recv, ibv_poll_cq) are inline functions in <infiniband/verbs.h>
// that jump through the context's ops table, so they need no symbol and
// are called directly. ibv_query_port is a header macro whose inline
// prefers the extended context op and falls back to the exported (compat)
// function; query_port() below does the same with the resolved pointer.
//
// Only verbs_*.cpp include this header (it pulls in verbs.h).
#pragma once

#include <string>

#include <infiniband/verbs.h>

namespace ds4tp::rdma {

struct Verbs {
  std::string path;  // what was loaded
  // Resolved exported functions (never null once loaded, except where
  // noted).
  ibv_device **(*get_device_list)(int *num_devices) = nullptr;
  void (*free_device_list)(ibv_device **list) = nullptr;
  const char *(*get_device_name)(ibv_device *device) = nullptr;
  ibv_context *(*open_device)(ibv_device *device) = nullptr;
  int (*close_device)(ibv_context *context) = nullptr;
  int (*query_device)(ibv_context *context, ibv_device_attr *attr) = nullptr;
  int (*query_port_compat)(ibv_context *context, uint8_t port, _compat_ibv_port_attr *attr) =
      nullptr;
  int (*query_gid)(ibv_context *context, uint8_t port, int index, ibv_gid *gid) = nullptr;
  // rdma-core >= 32; null on older libraries (then sysfs names the type).
  int (*query_gid_ex)(ibv_context *context, uint32_t port, uint32_t index, ibv_gid_entry *entry,
                      uint32_t flags, size_t entry_size) = nullptr;
  ibv_pd *(*alloc_pd)(ibv_context *context) = nullptr;
  int (*dealloc_pd)(ibv_pd *pd) = nullptr;
  ibv_mr *(*reg_mr)(ibv_pd *pd, void *addr, size_t length, int access) = nullptr;
  int (*dereg_mr)(ibv_mr *mr) = nullptr;
  ibv_cq *(*create_cq)(ibv_context *context, int cqe, void *cq_context,
                       ibv_comp_channel *channel, int comp_vector) = nullptr;
  int (*destroy_cq)(ibv_cq *cq) = nullptr;
  ibv_qp *(*create_qp)(ibv_pd *pd, ibv_qp_init_attr *attr) = nullptr;
  int (*modify_qp)(ibv_qp *qp, ibv_qp_attr *attr, int mask) = nullptr;
  int (*destroy_qp)(ibv_qp *qp) = nullptr;
  const char *(*wc_status_str)(ibv_wc_status status) = nullptr;

  // ibv_query_port as the header inline does it, without a link-time symbol.
  int query_port(ibv_context *context, uint8_t port, ibv_port_attr *attr) const;
};

// Loads `path` (nullptr: $DS4TP_VERBS_LIB if set, else the first of
// os::verbs_library_names() that loads) once per process and path; later calls return the same table. Libraries
// are never unloaded (providers may keep state). nullptr with `why` set
// (dlerror text, or the missing symbol) when it cannot be used. Thread-safe.
const Verbs *load_verbs(const char *path, std::string &why);

}  // namespace ds4tp::rdma
