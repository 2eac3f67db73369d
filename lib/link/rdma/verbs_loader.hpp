// The verbs library (libibverbs, Apple's librdma) loaded at run time
// (dlopen), so libds4tp has no link-time dependency on it: a machine
// without it runs over TCP/shm, and the probe says why instead of the
// loader refusing to start the program.
//
// Which calls need a symbol: the set-up calls below are exported functions
// and are resolved with dlsym. The data-path calls (ibv_post_send,
// ibv_post_recv, ibv_poll_cq) are header inlines in rdma-core that jump
// through the context's ops table, so they need no symbol: do_post_send()
// and friends do the same jump. Where the library exports them as
// functions instead, the table holds those and the data path calls them.
// ibv_query_port is a header inline too: it prefers the extended context
// op and falls back to the exported (compat) function; query_port() below
// does the same with the resolved pointer.
//
// The types are our own declarations of the verbs ABI (verbs_abi.hpp),
// not rdma-core's header, so this builds where no verbs header exists
// (macOS). Only verbs_*.cpp and tests include this header.
#pragma once

#include <string>
#include <vector>

#include "link/rdma/verbs_abi.hpp"

namespace ds4tp::rdma {

struct Verbs {
  std::string path;  // what was loaded
  // Resolved exported functions (never null once loaded, except where
  // noted).
  abi::Device **(*get_device_list)(int *num_devices) = nullptr;
  void (*free_device_list)(abi::Device **list) = nullptr;
  const char *(*get_device_name)(abi::Device *device) = nullptr;
  abi::Context *(*open_device)(abi::Device *device) = nullptr;
  int (*close_device)(abi::Context *context) = nullptr;
  int (*query_device)(abi::Context *context, abi::DeviceAttr *attr) = nullptr;
  // Fills the older prefix of PortAttr (rdma-core's _compat_ibv_port_attr).
  int (*query_port_compat)(abi::Context *context, uint8_t port, abi::PortAttr *attr) = nullptr;
  int (*query_gid)(abi::Context *context, uint8_t port, int index, abi::Gid *gid) = nullptr;
  // rdma-core >= 32; null on older libraries (then sysfs names the type).
  int (*query_gid_ex)(abi::Context *context, uint32_t port, uint32_t index,
                      abi::GidEntry *entry, uint32_t flags, size_t entry_size) = nullptr;
  abi::Pd *(*alloc_pd)(abi::Context *context) = nullptr;
  int (*dealloc_pd)(abi::Pd *pd) = nullptr;
  abi::Mr *(*reg_mr)(abi::Pd *pd, void *addr, size_t length, int access) = nullptr;
  int (*dereg_mr)(abi::Mr *mr) = nullptr;
  abi::Cq *(*create_cq)(abi::Context *context, int cqe, void *cq_context,
                        abi::CompChannel *channel, int comp_vector) = nullptr;
  int (*destroy_cq)(abi::Cq *cq) = nullptr;
  abi::Qp *(*create_qp)(abi::Pd *pd, abi::QpInitAttr *attr) = nullptr;
  int (*modify_qp)(abi::Qp *qp, abi::QpAttr *attr, int mask) = nullptr;
  int (*destroy_qp)(abi::Qp *qp) = nullptr;
  const char *(*wc_status_str)(int status) = nullptr;

  // Exported data-path functions, null where the library has none (then
  // the calls dispatch through the context's ops table).
  int (*post_send)(abi::Qp *qp, abi::SendWr *wr, abi::SendWr **bad) = nullptr;
  int (*post_recv)(abi::Qp *qp, abi::RecvWr *wr, abi::RecvWr **bad) = nullptr;
  int (*poll_cq)(abi::Cq *cq, int num_entries, abi::Wc *wc) = nullptr;

  int do_post_send(abi::Qp *qp, abi::SendWr *wr, abi::SendWr **bad) const {
    return post_send != nullptr ? post_send(qp, wr, bad) : qp->context->ops.post_send(qp, wr, bad);
  }
  int do_post_recv(abi::Qp *qp, abi::RecvWr *wr, abi::RecvWr **bad) const {
    return post_recv != nullptr ? post_recv(qp, wr, bad) : qp->context->ops.post_recv(qp, wr, bad);
  }
  int do_poll_cq(abi::Cq *cq, int n, abi::Wc *wc) const {
    return poll_cq != nullptr ? poll_cq(cq, n, wc) : cq->context->ops.poll_cq(cq, n, wc);
  }

  // ibv_query_port as the header inline does it, without a link-time symbol.
  int query_port(abi::Context *context, uint8_t port, abi::PortAttr *attr) const;
};

// Loads `path` (nullptr: $DS4TP_VERBS_LIB if set, else the first of
// os::verbs_library_names() that loads) once per process and path; later
// calls return the same table. Libraries are never unloaded (providers
// may keep state). nullptr with `why` set (dlerror text, or the missing
// symbol) when it cannot be used. Thread-safe.
const Verbs *load_verbs(const char *path, std::string &why);
// The same for an explicit search list: the first of `names` that loads.
// `why` names every library tried, with its error.
const Verbs *load_first(const std::vector<std::string> &names, std::string &why);

}  // namespace ds4tp::rdma
