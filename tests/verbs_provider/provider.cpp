// A test-only verbs provider (never installed): the rdma-core entry points
// lib/transport/rdma/verbs_loader.cpp resolves, over shared-memory rings
// between processes (ring.hpp), so the verbs binding runs end to end
// without RDMA hardware. Load it with DS4TP_VERBS_LIB=<this library>.
//
// One device "fv0" (uc-apple: "rdma_en5"), one Ethernet port, GIDs
// fe80::1 (RoCE v1) and ::ffff:127.0.0.1 (RoCE v2). The context is an
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
//   wc=S@N        the N-th send completes with ibv_wc_status S, not sent
//   dead=K        the first K QPs of this process never receive
//   port_down     port 1 is DOWN
//   no_ipv4_gid   GID 1 is empty (only the link-local fe80::1)
//   no_gid        every GID is empty
//   fail=CALL     CALL fails: devices (ENOSYS, as without kernel support),
//                 open, query_device, pd, mr (ENOMEM), cq, qp, init, rtr, rts
// Every queue-pair step is checked (states, masks, PSNs, lkeys, GIDs):
// a binding mistake shows as EINVAL, a lost message or a bad completion.
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include <sys/random.h>

#include "ring.hpp"

// The header turns these into macros over inlines; the library exports the
// plain symbols, which the binding resolves.
#undef ibv_query_port
#undef ibv_reg_mr

#define FV_API extern "C" __attribute__((visibility("default")))

namespace fv {
namespace {

struct Config {
  bool apple = false;
  uint32_t max_msg = 1u << 20;
  uint64_t drop_at = 0, wc_at = 0;
  int wc_status = 0;
  uint32_t dead_qps = 0;
  bool port_down = false, no_ipv4 = false, no_gid = false;
  std::string fail;  // the call made to fail
};

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
    if (t.rfind("dead=", 0) == 0) c.dead_qps = uint32_t(std::strtoul(t.c_str() + 5, nullptr, 0));
    if (t.rfind("wc=", 0) == 0) {
      char *e = nullptr;
      c.wc_status = int(std::strtol(t.c_str() + 3, &e, 0));
      if (e && *e == '@') c.wc_at = std::strtoull(e + 1, nullptr, 0);
    }
    if (t.rfind("fail=", 0) == 0) c.fail = t.substr(5);
    if (t == "port_down") c.port_down = true;
    if (t == "no_ipv4_gid") c.no_ipv4 = true;
    if (t == "no_gid") c.no_gid = true;
  }
  return c;
}

constexpr int kMaxWr = 4096, kMaxCqe = 65536, kGids = 2;

// Everything is guarded by one lock: simple, and the binding's posting and
// polling may come from different threads.
std::mutex g_mu;
uint64_t g_sends = 0;    // messages posted by this process (fault counters)
uint32_t g_created = 0;  // QPs created by this process
int g_open = 0;          // open contexts; counters restart when none are

struct Ctx {
  verbs_context v;  // ends with the ibv_context
};
struct Pd {
  ibv_pd pd;
};
struct Mr {
  ibv_mr mr;
};
struct Qp;
struct Cq {
  ibv_cq cq;
  std::deque<ibv_wc> done;
  std::vector<Qp *> qps;
  bool overrun = false;
};
struct SendWr {
  uint64_t wr_id;
  uint64_t addr;
  uint32_t len, lkey, imm;
  ibv_wr_opcode op;
  bool signaled;
};
struct RecvWr {
  uint64_t wr_id, addr;
  uint32_t len, lkey;
};
struct Qp {
  ibv_qp qp;
  Config cfg;
  bool sig_all = false, dead_in = false;
  uint32_t max_send = 0, max_recv = 0;
  uint32_t rq_psn = 0, sq_psn = 0, dest_qp = 0;
  uint8_t dgid[16]{};
  std::deque<SendWr> sq;
  std::deque<RecvWr> rq;
  Ring in, out;
};

std::vector<Mr *> g_mrs;

bool gid_of(const Config &c, int index, ibv_gid &g) {
  std::memset(&g, 0, sizeof g);
  if (c.no_gid || index < 0 || index >= kGids) return false;
  if (index == 0) {
    g.raw[0] = 0xfe;
    g.raw[1] = 0x80;
    g.raw[15] = 1;
    return true;
  }
  if (c.no_ipv4) return false;
  g.raw[10] = g.raw[11] = 0xff;
  g.raw[12] = 127;
  g.raw[15] = 1;
  return true;
}

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

bool lkey_ok(uint64_t addr, uint32_t len, uint32_t lkey) {
  for (Mr *m : g_mrs)
    if (m->mr.lkey == lkey && addr >= uintptr_t(m->mr.addr) &&
        addr + len <= uintptr_t(m->mr.addr) + m->mr.length)
      return true;
  return len == 0;
}

void complete(Cq *cq, const ibv_wc &wc) {
  if (int(cq->done.size()) >= cq->cq.cqe) cq->overrun = true;
  cq->done.push_back(wc);
}

ibv_wc make_wc(Qp *q, uint64_t wr_id, ibv_wc_status st, ibv_wc_opcode op) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = st;
  wc.opcode = op;
  wc.qp_num = q->qp.qp_num;
  return wc;
}

// Moves posted sends into the peer's ring while it has room.
void push_sends(Qp *q) {
  Cq *cq = reinterpret_cast<Cq *>(q->qp.send_cq);
  while (!q->sq.empty() && q->qp.state == IBV_QPS_RTS) {
    SendWr &s = q->sq.front();
    ibv_wc_status st = IBV_WC_SUCCESS;
    bool deliver = true;
    if (!lkey_ok(s.addr, s.len, s.lkey)) {
      st = IBV_WC_LOC_PROT_ERR;
      deliver = false;
    } else if (s.op == IBV_WR_RDMA_WRITE || s.op == IBV_WR_RDMA_WRITE_WITH_IMM) {
      deliver = false;  // uc-apple: completes, places nothing
    } else if (q->cfg.apple && s.len > 16384) {
      deliver = false;  // uc-apple: lost without an error
    } else {
      uint64_t n = ++g_sends;
      if (n == q->cfg.drop_at) deliver = false;
      if (n == q->cfg.wc_at) {
        st = ibv_wc_status(q->cfg.wc_status);
        deliver = false;
      }
    }
    if (deliver) {
      if (!q->out.mapped() && !q->out.open(ring_path(q->dgid, q->dest_qp))) return;
      Record r{};
      r.len = s.len;
      r.imm = s.imm;
      r.flags = s.op == IBV_WR_SEND_WITH_IMM ? kRecImm : 0;
      r.psn = q->sq_psn;
      r.src_qp = q->qp.qp_num;
      if (!q->out.push(r, reinterpret_cast<const void *>(s.addr))) return;
    }
    q->sq_psn = (q->sq_psn + 1) & 0xFFFFFF;
    if (s.signaled || q->sig_all || q->cfg.apple || st != IBV_WC_SUCCESS)
      complete(cq, make_wc(q, s.wr_id, st,
                           s.op == IBV_WR_RDMA_WRITE || s.op == IBV_WR_RDMA_WRITE_WITH_IMM
                               ? IBV_WC_RDMA_WRITE
                               : IBV_WC_SEND));
    q->sq.pop_front();
  }
}

// Matches arrived messages with posted receives, in order.
void take_arrivals(Qp *q) {
  if (!q->in.mapped()) return;
  Cq *cq = reinterpret_cast<Cq *>(q->qp.recv_cq);
  const bool uc = q->qp.qp_type == IBV_QPT_UC;
  while (const Record *r = q->in.front()) {
    const bool stray = r->src_qp != q->dest_qp || r->psn != q->rq_psn;
    if (!stray) q->rq_psn = (q->rq_psn + 1) & 0xFFFFFF;
    if (stray || q->dead_in) {
      q->in.pop();
      continue;
    }
    if (q->rq.empty()) {
      if (!uc) return;  // RC: the sender waits (RNR retry)
      if (q->cfg.apple) q->dead_in = true;  // Apple UC: this direction is gone
      q->in.pop();
      continue;
    }
    RecvWr w = q->rq.front();
    q->rq.pop_front();
    ibv_wc wc = make_wc(q, w.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV);
    if (r->len > w.len) {
      wc.status = IBV_WC_LOC_LEN_ERR;
    } else if (!lkey_ok(w.addr, r->len, w.lkey)) {
      wc.status = IBV_WC_LOC_PROT_ERR;
    } else {
      if (r->len) std::memcpy(reinterpret_cast<void *>(w.addr), r + 1, r->len);
      wc.byte_len = r->len;
      wc.src_qp = r->src_qp;
      if (r->flags & kRecImm) {
        wc.imm_data = r->imm;
        wc.wc_flags = IBV_WC_WITH_IMM;
      }
    }
    complete(cq, wc);
    q->in.pop();
  }
}

void progress(Qp *q) {
  push_sends(q);
  take_arrivals(q);
}

// ---- ops table -------------------------------------------------------

int op_post_send(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **bad) {
  std::lock_guard<std::mutex> l(g_mu);
  Qp *q = reinterpret_cast<Qp *>(qp);
  for (; wr != nullptr; wr = wr->next) {
    int e = 0;
    if (q->qp.state != IBV_QPS_RTS) e = EINVAL;
    else if (q->sq.size() >= q->max_send) e = ENOMEM;
    else if (wr->num_sge > 1) e = EINVAL;
    else if (wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM &&
             !(q->cfg.apple && wr->opcode == IBV_WR_RDMA_WRITE))
      e = EOPNOTSUPP;
    if (e) {
      *bad = wr;
      return e;
    }
    SendWr s{};
    s.wr_id = wr->wr_id;
    if (wr->num_sge == 1) {
      s.addr = wr->sg_list[0].addr;
      s.len = wr->sg_list[0].length;
      s.lkey = wr->sg_list[0].lkey;
    }
    s.imm = wr->imm_data;
    s.op = wr->opcode;
    s.signaled = (wr->send_flags & IBV_SEND_SIGNALED) != 0;
    q->sq.push_back(s);
  }
  progress(q);
  return 0;
}

int op_post_recv(ibv_qp *qp, ibv_recv_wr *wr, ibv_recv_wr **bad) {
  std::lock_guard<std::mutex> l(g_mu);
  Qp *q = reinterpret_cast<Qp *>(qp);
  take_arrivals(q);  // what arrived before these receives finds none
  for (; wr != nullptr; wr = wr->next) {
    if (q->qp.state == IBV_QPS_RESET || q->qp.state == IBV_QPS_ERR ||
        q->rq.size() >= q->max_recv || wr->num_sge > 1) {
      *bad = wr;
      return q->rq.size() >= q->max_recv ? ENOMEM : EINVAL;
    }
    RecvWr r{};
    r.wr_id = wr->wr_id;
    if (wr->num_sge == 1) {
      r.addr = wr->sg_list[0].addr;
      r.len = wr->sg_list[0].length;
      r.lkey = wr->sg_list[0].lkey;
    }
    q->rq.push_back(r);
  }
  progress(q);
  return 0;
}

int op_poll_cq(ibv_cq *cq, int n, ibv_wc *wc) {
  std::lock_guard<std::mutex> l(g_mu);
  Cq *c = reinterpret_cast<Cq *>(cq);
  for (Qp *q : c->qps) progress(q);
  if (c->overrun) return -1;  // a real CQ overrun is fatal too
  int got = 0;
  for (; got < n && !c->done.empty(); got++) {
    wc[got] = c->done.front();
    c->done.pop_front();
  }
  return got;
}

int op_query_port(ibv_context *, uint8_t port, ibv_port_attr *attr, size_t size) {
  if (port != 1) return EINVAL;
  ibv_port_attr a{};
  fill_port(read_config(), a);
  std::memcpy(attr, &a, std::min(size, sizeof a));
  return 0;
}

ibv_device g_device{};

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
  auto **l = static_cast<ibv_device **>(std::calloc(2, sizeof(ibv_device *)));
  l[0] = &g_device;
  std::strcpy(g_device.name, read_config().apple ? "rdma_en5" : "fv0");
  g_device.transport_type = IBV_TRANSPORT_IB;
  g_device.node_type = IBV_NODE_CA;
  if (num) *num = 1;
  return l;
}
FV_API void ibv_free_device_list(ibv_device **list) { std::free(list); }
FV_API const char *ibv_get_device_name(ibv_device *d) { return d->name; }

FV_API ibv_context *ibv_open_device(ibv_device *d) {
  if (failing("open", ENODEV)) return nullptr;
  std::lock_guard<std::mutex> l(g_mu);
  if (g_open++ == 0) g_sends = g_created = 0;  // a new pair (or a forked rank)
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

FV_API int ibv_query_gid(ibv_context *, uint8_t port, int index, ibv_gid *gid) {
  if (port != 1 || index < 0 || index >= kGids) return EINVAL;
  gid_of(read_config(), index, *gid);
  return 0;
}

#if !defined(FV_APPLE_EXPORTS)
FV_API int _ibv_query_gid_ex(ibv_context *, uint32_t port, uint32_t index, ibv_gid_entry *e,
                             uint32_t flags, size_t size) {
  if (port != 1 || index >= uint32_t(kGids) || flags != 0 || size < sizeof *e) return EINVAL;
  *e = ibv_gid_entry{};
  if (!gid_of(read_config(), int(index), e->gid)) return ENODATA;
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
  q->dead_in = g_created++ < cfg.dead_qps;
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
          !gid_of(q->cfg, a->ah_attr.grh.sgid_index, sgid) || a->path_mtu < IBV_MTU_256 ||
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
