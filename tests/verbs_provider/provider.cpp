// A test-only verbs provider (never installed): the rdma-core entry points
// lib/link/rdma/verbs_loader.cpp resolves, over shared-memory rings
// between processes (ring.hpp), so the verbs binding runs end to end
// without RDMA hardware. Load it with DS4TP_VERBS_LIB=<this library>.
//
// Three devices "fv0".."fv2" (uc-apple: "rdma_en5".."rdma_en7"), each
// with one Ethernet port; device d has GIDs fe80::<d+1> (RoCE v1) and
// ::ffff:127.0.0.<d+1> (RoCE v2). Device d of one process is cabled to
// device d of the other only, as point-to-point links are: a message
// sent to another device's GID is lost (UC) or fails its completion with
// "transport retry counter exceeded" (RC), so crossed rails show. The context is an
// extended verbs_context (query_port op), the data path is its ops table
// (header inlines); built with FV_APPLE_EXPORTS the library also exports
// ibv_post_send/ibv_post_recv/ibv_poll_cq and lacks _ibv_query_gid_ex,
// as Apple's librdma does.
//
// DS4TP_VERBS_PROVIDER_PROFILE:
//   rc (default)  RC and UC; RC waits for a receive (RNR), in order.
//   uc-apple      UC only (RC creation fails ENOTSUP); messages over 16 KiB
//                 are dropped after a good completion; RDMA WRITE completes
//                 and places nothing; a send reaching a QP with no receive
//                 posted kills that direction for good; every send
//                 completes, signaled or not. Ports report 16 KiB messages
//                 (DS4TP_VERBS_PROVIDER_MAX_MSG overrides).
// DS4TP_VERBS_PROVIDER_FAULT (comma-separated, read when a QP is created
// or a port queried):
//   drop=N        the N-th message this process sends is lost (good CQE)
//   cut=N         from the N-th on, every message it sends is lost (good
//                 CQEs): a link that dies silently, as UC reports it
//   cut=N@D       from device D's (0..2) N-th send on, what it sends is lost
//   wc=S@N        the N-th send completes with ibv_wc_status S, not sent
//   dead=K        the first K QPs of this process never receive
//   dead=K@D      the first K QPs it creates on device D never receive
//   dead_after=K@D  every QP it creates on device D (default 0) after its
//                 first K (K >= 1) never receives: a port that dies between
//                 two bring-ups
//   delay=US@D    what device D (default 0) sends leaves US microseconds
//                 after its post: a link with a longer round trip
//   port_down     port 1 is DOWN
//   no_ipv4_gid   GID 1 is empty (only the link-local fe80::1)
//   no_gid        every GID is empty
//   fail=CALL     CALL fails: devices (ENOSYS, as without kernel support),
//                 open, query_device, pd, mr (ENOMEM), cq, qp, init, rtr, rts
// Every queue-pair step is checked (states, masks, PSNs, lkeys, GIDs):
// a binding mistake shows as EINVAL, a lost message or a bad completion.
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstdio>
#include <cstring>

#include <sys/random.h>

#include "state.hpp"

// The header turns these into macros over inlines; the library exports the
// plain symbols, which the binding resolves.
#undef ibv_query_port
#undef ibv_reg_mr

#define FV_API extern "C" __attribute__((visibility("default")))

namespace fv {

// A fault "name=A[@B]": sets a, and b where given; nothing for another one.
template <typename A, typename B>
static void number_at(const std::string &t, const char *name, A &a, B &b) {
  const size_t n = std::strlen(name);
  if (t.compare(0, n, name) != 0) return;
  char *e = nullptr;
  a = A(std::strtoull(t.c_str() + n, &e, 0));
  if (e && *e == '@') b = B(std::strtoll(e + 1, nullptr, 0));
}

Config read_config() {
  Config c;
  const char *p = std::getenv("DS4TP_VERBS_PROVIDER_PROFILE");
  c.apple = p != nullptr && std::strcmp(p, "uc-apple") == 0;
  if (c.apple) c.max_msg = 16384;
  if (const char *m = std::getenv("DS4TP_VERBS_PROVIDER_MAX_MSG"); m != nullptr && *m)
    c.max_msg = uint32_t(std::strtoul(m, nullptr, 0));
  const char *f = std::getenv("DS4TP_VERBS_PROVIDER_FAULT");
  std::string s = f ? f : "";
  for (size_t at = 0; at < s.size();) {
    size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    std::string t = s.substr(at, end - at);
    at = end + 1;
    if (t.rfind("drop=", 0) == 0) c.drop_at = std::strtoull(t.c_str() + 5, nullptr, 0);
    number_at(t, "cut=", c.cut_at, c.cut_device);
    number_at(t, "dead=", c.dead_qps, c.dead_device);
    number_at(t, "dead_after=", c.dead_after, c.dead_after_device);
    number_at(t, "wc=", c.wc_status, c.wc_at);
    number_at(t, "delay=", c.delay_us, c.delay_device);
    if (t.rfind("fail=", 0) == 0) c.fail = t.substr(5);
    if (t == "port_down") c.port_down = true;
    if (t == "no_ipv4_gid") c.no_ipv4 = true;
    if (t == "no_gid") c.no_gid = true;
  }
  return c;
}

bool gid_of(const Config &c, int device, int index, ibv_gid &g) {
  std::memset(&g, 0, sizeof g);
  if (c.no_gid || index < 0 || index >= kGids) return false;
  if (index == 0) {
    g.raw[0] = 0xfe;
    g.raw[1] = 0x80;
    g.raw[15] = uint8_t(device + 1);
    return true;
  }
  if (c.no_ipv4) return false;
  g.raw[10] = g.raw[11] = 0xff;
  g.raw[12] = 127;
  g.raw[15] = uint8_t(device + 1);
  return true;
}

ibv_device g_devices[kDevices]{};

int device_of(const ibv_context *ctx) { return int(ctx->device - g_devices); }

void fill_port(const Config &c, ibv_port_attr &a) {
  a.state = c.port_down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
  a.max_mtu = IBV_MTU_4096;
  a.active_mtu = c.apple ? IBV_MTU_1024 : IBV_MTU_4096;
  a.gid_tbl_len = kGids;
  a.max_msg_sz = c.max_msg;
  a.pkey_tbl_len = 1;
  a.lid = 0;
  a.phys_state = c.port_down ? 3 : 5;  // disabled / link up
  a.link_layer = IBV_LINK_LAYER_ETHERNET;
}
namespace {

int op_query_port(ibv_context *, uint8_t port, ibv_port_attr *attr, size_t size) {
  if (port != 1) return EINVAL;
  ibv_port_attr a{};
  fill_port(read_config(), a);
  std::memcpy(attr, &a, std::min(size, sizeof a));
  return 0;
}
}  // namespace
}  // namespace fv

using namespace fv;

// ---- exported set-up calls -----------------------------------------------

// True (errno set) when the fault names `call`.
static bool failing(const char *call, int e = EINVAL) {
  if (read_config().fail != call) return false;
  errno = e;
  return true;
}

FV_API ibv_device **ibv_get_device_list(int *num) {
  if (failing("devices", ENOSYS)) return nullptr;
  auto **l = static_cast<ibv_device **>(std::calloc(kDevices + 1, sizeof(ibv_device *)));
  const bool apple = read_config().apple;
  for (int d = 0; d < kDevices; d++) {
    l[d] = &g_devices[d];
    std::snprintf(g_devices[d].name, sizeof g_devices[d].name, apple ? "rdma_en%d" : "fv%d",
                  apple ? 5 + d : d);
    g_devices[d].transport_type = IBV_TRANSPORT_IB;
    g_devices[d].node_type = IBV_NODE_CA;
  }
  if (num) *num = kDevices;
  return l;
}
FV_API void ibv_free_device_list(ibv_device **list) { std::free(list); }
FV_API const char *ibv_get_device_name(ibv_device *d) { return d->name; }

FV_API ibv_context *ibv_open_device(ibv_device *d) {
  if (failing("open", ENODEV)) return nullptr;
  std::lock_guard<std::mutex> l(g_mu);
  if (g_open++ == 0) {  // a new pair (or a forked rank)
    g_sends = g_created = 0;
    for (uint64_t &n : g_device_sends) n = 0;
    for (uint32_t &n : g_device_created) n = 0;
  }
  auto *c = new Ctx{};
  c->v.sz = sizeof(verbs_context);
  c->v.query_port = op_query_port;
  ibv_context &x = c->v.context;
  x.device = d;
  x.abi_compat = __VERBS_ABI_IS_EXTENDED;
  x.ops.post_send = op_post_send;
  x.ops.post_recv = op_post_recv;
  x.ops.poll_cq = op_poll_cq;
  x.num_comp_vectors = 1;
  return &x;
}
FV_API int ibv_close_device(ibv_context *ctx) {
  std::lock_guard<std::mutex> l(g_mu);
  g_open--;
  delete reinterpret_cast<Ctx *>(verbs_get_ctx(ctx));
  return 0;
}

FV_API int ibv_query_device(ibv_context *, ibv_device_attr *a) {
  if (failing("query_device", EIO)) return EIO;
  *a = ibv_device_attr{};
  std::strcpy(a->fw_ver, "ds4tp-test-provider");
  a->max_mr_size = ~0ull;
  a->max_qp = 1024;
  a->max_qp_wr = kMaxWr;
  a->max_sge = 1;
  a->max_cq = 1024;
  a->max_cqe = kMaxCqe;
  a->max_mr = 1024;
  a->max_pd = 64;
  a->phys_port_cnt = 1;
  return 0;
}

// The exported compat query fills the older prefix of ibv_port_attr.
FV_API int ibv_query_port(ibv_context *, uint8_t port, _compat_ibv_port_attr *attr) {
  if (port != 1) return EINVAL;
  ibv_port_attr a{};
  fill_port(read_config(), a);
  std::memcpy(static_cast<void *>(attr), &a, offsetof(ibv_port_attr, port_cap_flags2));
  return 0;
}

FV_API int ibv_query_gid(ibv_context *ctx, uint8_t port, int index, ibv_gid *gid) {
  if (port != 1 || index < 0 || index >= kGids) return EINVAL;
  gid_of(read_config(), device_of(ctx), index, *gid);
  return 0;
}

#if !defined(FV_APPLE_EXPORTS)
FV_API int _ibv_query_gid_ex(ibv_context *ctx, uint32_t port, uint32_t index, ibv_gid_entry *e,
                             uint32_t flags, size_t size) {
  if (port != 1 || index >= uint32_t(kGids) || flags != 0 || size < sizeof *e) return EINVAL;
  *e = ibv_gid_entry{};
  if (!gid_of(read_config(), device_of(ctx), int(index), e->gid)) return ENODATA;
  e->gid_index = index;
  e->port_num = port;
  e->gid_type = index == 0 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
  return 0;
}
#endif

FV_API ibv_pd *ibv_alloc_pd(ibv_context *ctx) {
  if (failing("pd", ENOMEM)) return nullptr;
  auto *p = new Pd{};
  p->pd.context = ctx;
  return &p->pd;
}
FV_API int ibv_dealloc_pd(ibv_pd *pd) {
  delete reinterpret_cast<Pd *>(pd);
  return 0;
}

FV_API ibv_mr *ibv_reg_mr(ibv_pd *pd, void *addr, size_t len, int access) {
  if (addr == nullptr || len == 0 || !(access & IBV_ACCESS_LOCAL_WRITE)) {
    errno = EINVAL;
    return nullptr;
  }
  if (failing("mr", ENOMEM)) return nullptr;
  std::lock_guard<std::mutex> l(g_mu);
  auto *m = new Mr{};
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = len;
  uint32_t key = 0;
  while (key == 0) (void)getrandom(&key, sizeof key, 0);
  m->mr.lkey = key;
  m->mr.rkey = key ^ 0x5a5a5a5au;
  g_mrs.push_back(m);
  return &m->mr;
}
FV_API int ibv_dereg_mr(ibv_mr *mr) {
  std::lock_guard<std::mutex> l(g_mu);
  for (size_t i = 0; i < g_mrs.size(); i++)
    if (&g_mrs[i]->mr == mr) {
      delete g_mrs[i];
      g_mrs.erase(g_mrs.begin() + long(i));
      return 0;
    }
  return EINVAL;
}

FV_API ibv_cq *ibv_create_cq(ibv_context *ctx, int cqe, void *cq_context, ibv_comp_channel *ch,
                             int) {
  if (cqe < 1 || cqe > kMaxCqe || ch != nullptr || failing("cq", ENOMEM)) {
    if (ch != nullptr || cqe < 1 || cqe > kMaxCqe) errno = EINVAL;
    return nullptr;
  }
  auto *c = new Cq{};
  c->cq.context = ctx;
  c->cq.cqe = cqe;
  c->cq.cq_context = cq_context;
  return &c->cq;
}
FV_API int ibv_destroy_cq(ibv_cq *cq) {
  Cq *c = reinterpret_cast<Cq *>(cq);
  if (!c->qps.empty()) return EBUSY;
  delete c;
  return 0;
}

FV_API ibv_qp *ibv_create_qp(ibv_pd *pd, ibv_qp_init_attr *a) {
  Config cfg = read_config();
  if (a->qp_type != IBV_QPT_UC && (a->qp_type != IBV_QPT_RC || cfg.apple)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (failing("qp", ENOMEM)) return nullptr;
  if (a->send_cq == nullptr || a->recv_cq == nullptr || a->cap.max_send_wr < 1 ||
      a->cap.max_recv_wr < 1 || a->cap.max_send_sge > 1 || a->cap.max_recv_sge > 1 ||
      a->srq != nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  std::lock_guard<std::mutex> l(g_mu);
  auto *q = new Qp{};
  q->cfg = cfg;
  const int dev = device_of(pd->context);
  const uint32_t nth = cfg.dead_device < 0 ? g_created : g_device_created[dev];
  q->dead_in = ((cfg.dead_device < 0 || cfg.dead_device == dev) && nth < cfg.dead_qps) ||
               (cfg.dead_after != 0 && cfg.dead_after_device == dev &&
                g_device_created[dev] >= cfg.dead_after);
  g_created++;
  g_device_created[dev]++;
  a->cap.max_send_wr = q->max_send = std::min<uint32_t>(a->cap.max_send_wr, kMaxWr);
  a->cap.max_recv_wr = q->max_recv = std::min<uint32_t>(a->cap.max_recv_wr, kMaxWr);
  q->sig_all = a->sq_sig_all != 0;
  uint32_t n = 0;
  while ((n & 0xFFFFFF) < 2) (void)getrandom(&n, sizeof n, 0);
  ibv_qp &x = q->qp;
  x.context = pd->context;
  x.pd = pd;
  x.qp_context = a->qp_context;
  x.send_cq = a->send_cq;
  x.recv_cq = a->recv_cq;
  x.qp_num = n & 0xFFFFFF;
  x.state = IBV_QPS_RESET;
  x.qp_type = a->qp_type;
  reinterpret_cast<Cq *>(a->send_cq)->qps.push_back(q);
  if (a->recv_cq != a->send_cq) reinterpret_cast<Cq *>(a->recv_cq)->qps.push_back(q);
  return &x;
}

FV_API int ibv_modify_qp(ibv_qp *qp, ibv_qp_attr *a, int mask) {
  std::lock_guard<std::mutex> l(g_mu);
  Qp *q = reinterpret_cast<Qp *>(qp);
  const bool rc = qp->qp_type == IBV_QPT_RC;
  auto has = [mask](int m) { return (mask & m) == m; };
  if (!has(IBV_QP_STATE)) return EINVAL;
  const std::string &f = q->cfg.fail;
  if ((f == "init" && a->qp_state == IBV_QPS_INIT) || (f == "rtr" && a->qp_state == IBV_QPS_RTR) ||
      (f == "rts" && a->qp_state == IBV_QPS_RTS))
    return EINVAL;
  switch (a->qp_state) {
    case IBV_QPS_INIT:
      if (qp->state != IBV_QPS_RESET ||
          !has(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) || a->port_num != 1 ||
          a->pkey_index != 0)
        return EINVAL;
      break;
    case IBV_QPS_RTR: {
      if (qp->state != IBV_QPS_INIT ||
          !has(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN) ||
          (rc && !has(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
        return EINVAL;
      // Ethernet: the address must be global and name one of our GIDs.
      ibv_gid sgid{};
      if (!a->ah_attr.is_global || a->ah_attr.port_num != 1 ||
          !gid_of(q->cfg, device_of(qp->context), a->ah_attr.grh.sgid_index, sgid) ||
          a->path_mtu < IBV_MTU_256 ||
          a->path_mtu > IBV_MTU_4096 || a->dest_qp_num == 0 || a->dest_qp_num > 0xFFFFFF)
        return EINVAL;
      q->dest_qp = a->dest_qp_num;
      q->rq_psn = a->rq_psn & 0xFFFFFF;
      std::memcpy(q->dgid, a->ah_attr.grh.dgid.raw, 16);
      sweep_rings();
      if (!q->in.create(ring_path(sgid.raw, qp->qp_num))) return errno ? errno : EIO;
      break;
    }
    case IBV_QPS_RTS:
      if (qp->state != IBV_QPS_RTR || !has(IBV_QP_SQ_PSN) ||
          (rc && !has(IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                      IBV_QP_MAX_QP_RD_ATOMIC)))
        return EINVAL;
      q->sq_psn = a->sq_psn & 0xFFFFFF;
      break;
    case IBV_QPS_ERR:
    case IBV_QPS_RESET:
      break;
    default:
      return EINVAL;
  }
  qp->state = a->qp_state;
  return 0;
}

FV_API int ibv_query_qp(ibv_qp *qp, ibv_qp_attr *a, int, ibv_qp_init_attr *init) {
  std::lock_guard<std::mutex> l(g_mu);
  Qp *q = reinterpret_cast<Qp *>(qp);
  *a = ibv_qp_attr{};
  a->qp_state = a->cur_qp_state = qp->state;
  a->dest_qp_num = q->dest_qp;
  a->rq_psn = q->rq_psn;
  a->sq_psn = q->sq_psn;
  a->cap.max_send_wr = q->max_send;
  a->cap.max_recv_wr = q->max_recv;
  a->cap.max_send_sge = a->cap.max_recv_sge = 1;
  if (init != nullptr) {
    *init = ibv_qp_init_attr{};
    init->send_cq = qp->send_cq;
    init->recv_cq = qp->recv_cq;
    init->cap = a->cap;
    init->qp_type = qp->qp_type;
    init->sq_sig_all = q->sig_all;
  }
  return 0;
}

FV_API int ibv_destroy_qp(ibv_qp *qp) {
  std::lock_guard<std::mutex> l(g_mu);
  Qp *q = reinterpret_cast<Qp *>(qp);
  for (ibv_cq *c : {qp->send_cq, qp->recv_cq}) {
    auto &v = reinterpret_cast<Cq *>(c)->qps;
    for (size_t i = 0; i < v.size(); i++)
      if (v[i] == q) v.erase(v.begin() + long(i--));
  }
  delete q;
  return 0;
}

FV_API const char *ibv_wc_status_str(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_LEN_ERR: return "local length error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
    default: return "unknown";
  }
}

#if defined(FV_APPLE_EXPORTS)
// Apple's librdma exports the data path as functions (no header inlines).
extern "C" {
__attribute__((visibility("default"))) int fv_export_post_send(ibv_qp *qp, ibv_send_wr *wr,
                                                               ibv_send_wr **bad)
    __asm__("ibv_post_send");
__attribute__((visibility("default"))) int fv_export_post_recv(ibv_qp *qp, ibv_recv_wr *wr,
                                                               ibv_recv_wr **bad)
    __asm__("ibv_post_recv");
__attribute__((visibility("default"))) int fv_export_poll_cq(ibv_cq *cq, int n, ibv_wc *wc)
    __asm__("ibv_poll_cq");
int fv_export_post_send(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **bad) {
  return op_post_send(qp, wr, bad);
}
int fv_export_post_recv(ibv_qp *qp, ibv_recv_wr *wr, ibv_recv_wr **bad) {
  return op_post_recv(qp, wr, bad);
}
int fv_export_poll_cq(ibv_cq *cq, int n, ibv_wc *wc) { return op_poll_cq(cq, n, wc); }
}
#endif
