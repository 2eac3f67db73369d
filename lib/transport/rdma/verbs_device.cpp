// The verbs binding: probe, device, queue pair. Built with DS4TP_WITH_RDMA;
// every verbs call goes through the table load_verbs() resolved (or the
// header inlines that dispatch through the context's ops), so nothing here
// links against libibverbs.
//
// Verified here: it compiles warning-free against rdma-core, and the whole
// binding (probe, PD/MR/CQ/QP, INIT->RTR->RTS, posting and polling) runs
// between two processes through the test verbs provider
// (tests/verbs_provider, tests/test_verbs_provider.cpp), which checks every
// step as a provider would; see README "RDMA" for the two-host check.
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/clock.hpp"
#include "os/os.hpp"
#include "transport/rdma/probe.hpp"
#include "transport/rdma/verbs_loader.hpp"

namespace ds4tp::rdma {

namespace {

const char *port_state_name(int s) {
  switch (s) {
    case IBV_PORT_NOP: return "NOP";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "unknown";
  }
}

bool gid_zero(const ibv_gid &g) {
  for (uint8_t b : g.raw)
    if (b) return false;
  return true;
}

bool gid_ipv4_mapped(const ibv_gid &g) {
  for (int i = 0; i < 10; i++)
    if (g.raw[i]) return false;
  return g.raw[10] == 0xff && g.raw[11] == 0xff;
}

bool gid_link_local(const ibv_gid &g) { return g.raw[0] == 0xfe && (g.raw[1] & 0xc0) == 0x80; }

enum class GidKind { Ib, RoceV1, RoceV2, Unknown };

const char *gid_kind_name(GidKind k) {
  switch (k) {
    case GidKind::Ib: return "IB";
    case GidKind::RoceV1: return "RoCE v1";
    case GidKind::RoceV2: return "RoCE v2";
    default: return "unknown type";
  }
}

// Reads one GID and its type: the extended query when the library has it,
// else the plain query plus what the OS says (os::rdma_gid_type). False for an empty or unreadable entry.
bool read_gid(const Verbs &v, ibv_context *ctx, const char *dev, int port, int index,
              uint8_t link_layer, ibv_gid &gid, GidKind &kind) {
  if (v.query_gid_ex != nullptr) {
    ibv_gid_entry e{};
    if (v.query_gid_ex(ctx, uint32_t(port), uint32_t(index), &e, 0, sizeof e) != 0) return false;
    gid = e.gid;
    kind = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? GidKind::RoceV2
           : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? GidKind::RoceV1
                                                : GidKind::Ib;
  } else {
    if (v.query_gid(ctx, uint8_t(port), index, &gid) != 0) return false;
    kind = link_layer == IBV_LINK_LAYER_ETHERNET ? GidKind::Unknown : GidKind::Ib;
    std::string t;
    if (os::rdma_gid_type(dev, port, index, t))
      kind = t.find("v2") != std::string::npos ? GidKind::RoceV2 : GidKind::RoceV1;
  }
  if (link_layer == IBV_LINK_LAYER_INFINIBAND) kind = GidKind::Ib;
  return !gid_zero(gid);
}

#if defined(__APPLE__)
constexpr uint64_t kAppleMaxMsg = 16384;
#endif

// Higher is better; 0 = do not use.
int gid_score(const ibv_gid &g, GidKind k, uint8_t link_layer) {
#if defined(__APPLE__)
  // Apple reports no GID types; only the IPv4-mapped GID routes (it
  // appears once the Thunderbolt interface has an IPv4 address).
  (void)k;
  (void)link_layer;
  return gid_ipv4_mapped(g) ? 1 : 0;
#endif
  if (link_layer != IBV_LINK_LAYER_ETHERNET) return 1;
  switch (k) {
    case GidKind::RoceV2: return gid_ipv4_mapped(g) ? 5 : gid_link_local(g) ? 3 : 4;
    case GidKind::RoceV1: return 2;
    default: return 1;
  }
}

struct Found {
  std::string device;
  int port = 0;
  int gid_index = -1;
  GidKind kind = GidKind::Unknown;
  ibv_gid gid{};
  ibv_port_attr port_attr{};
  ibv_device_attr dev_attr{};
};

// Checks one opened device's requested port; true with `f` filled when
// usable, else appends the reason to `notes`.
bool check_port(const Verbs &v, ibv_context *ctx, const char *name, const ProbeRequest &req,
                Found &f, std::vector<std::string> &notes) {
  // ibv_query_device and ibv_query_port return the error; errno is not set.
  if (int e = v.query_device(ctx, &f.dev_attr)) {
    notes.push_back(fmt::format("{}: querying the device failed: {}", name, std::strerror(e)));
    return false;
  }
  if (req.port < 1 || req.port > f.dev_attr.phys_port_cnt) {
    notes.push_back(fmt::format("{} has ports 1..{}, not port {}", name,
                                unsigned(f.dev_attr.phys_port_cnt), req.port));
    return false;
  }
  if (int e = v.query_port(ctx, uint8_t(req.port), &f.port_attr)) {
    notes.push_back(fmt::format("{} port {}: query failed: {}", name, req.port, std::strerror(e)));
    return false;
  }
  if (f.port_attr.state != IBV_PORT_ACTIVE) {
    notes.push_back(fmt::format("{} port {} is {} (not ACTIVE: check the cable and the link)",
                                name, req.port, port_state_name(f.port_attr.state)));
    return false;
  }
  const uint8_t ll = f.port_attr.link_layer;
  if (req.gid_index >= 0) {
    if (req.gid_index >= f.port_attr.gid_tbl_len) {
      notes.push_back(fmt::format("{} port {} has GID indices 0..{}, not {}", name, req.port,
                                  f.port_attr.gid_tbl_len - 1, req.gid_index));
      return false;
    }
    if (!read_gid(v, ctx, name, req.port, req.gid_index, ll, f.gid, f.kind)) {
      notes.push_back(fmt::format("{} port {} GID index {} is empty (no address on it)", name,
                                  req.port, req.gid_index));
      return false;
    }
    f.gid_index = req.gid_index;
  } else {
    int best = 0;
    for (int i = 0; i < f.port_attr.gid_tbl_len; i++) {
      ibv_gid g{};
      GidKind k;
      if (!read_gid(v, ctx, name, req.port, i, ll, g, k)) continue;
      int s = gid_score(g, k, ll);
      if (s > best) {
        best = s;
        f.gid_index = i;
        f.gid = g;
        f.kind = k;
      }
      if (ll != IBV_LINK_LAYER_ETHERNET) break;  // InfiniBand: the port GID
    }
    if (f.gid_index < 0) {
      notes.push_back(fmt::format(
#if defined(__APPLE__)
          "{} port {} has no IPv4-mapped GID ({} entries): give the Thunderbolt bridge's "
          "member interface its own IPv4 address",
          name, req.port, f.port_attr.gid_tbl_len));
#else
          "{} port {} has no usable GID ({} entries, all empty{})", name, req.port,
          f.port_attr.gid_tbl_len,
          ll == IBV_LINK_LAYER_ETHERNET ? ": give the interface an IP address" : ""));
#endif
      return false;
    }
  }
  f.device = name;
  f.port = req.port;
  return true;
}

std::string describe_found(const Found &f) {
  return fmt::format("{} port {} GID {} ({})", f.device, f.port, f.gid_index,
                     gid_kind_name(f.kind));
}

// Walks the device list: the first usable port (or the named device's).
// On success `ctx_out` (when non-null) keeps that device open.
bool find_port(const Verbs &v, const ProbeRequest &req, Found &f, std::string &why,
               ibv_context **ctx_out) {
  int n = 0;
  errno = 0;
  ibv_device **list = v.get_device_list(&n);
  if (list == nullptr) {
    int e = errno;
    why = e == ENOSYS ? "libibverbs found no RDMA devices (the kernel has no RDMA support: "
                        "ibv_get_device_list: Function not implemented)"
                      : fmt::format("libibverbs found no RDMA devices (ibv_get_device_list: {})",
                                    std::strerror(e));
    return false;
  }
  std::vector<std::string> notes, names;
  bool ok = false;
  for (int i = 0; i < n && !ok; i++) {
    const char *name = v.get_device_name(list[i]);
    if (name == nullptr) name = "?";
    names.push_back(name);
    if (!req.device.empty() && req.device != name) continue;
    ibv_context *ctx = v.open_device(list[i]);
    if (ctx == nullptr) {
      notes.push_back(fmt::format("{}: cannot open: {}", name, std::strerror(errno)));
      continue;
    }
    ok = check_port(v, ctx, name, req, f, notes);
    if (ok && ctx_out != nullptr)
      *ctx_out = ctx;
    else
      v.close_device(ctx);
  }
  v.free_device_list(list);
  if (ok) return true;
  if (n == 0) {
#if defined(__APPLE__)
    why = "librdma found no rdma_en* device (is a Thunderbolt 5 cable connected and RDMA "
          "enabled with `rdma_ctl enable`?)";
#else
    why = "libibverbs found no RDMA devices";
#endif
  } else if (!req.device.empty() && notes.empty()) {
    std::string all;
    for (auto &s : names) all += (all.empty() ? "" : ", ") + s;
    why = fmt::format("RDMA device '{}' not found (devices here: {})", req.device, all);
  } else {
    std::string all;
    for (auto &s : notes) all += (all.empty() ? "" : "; ") + s;
    why = "no usable RDMA port: " + all;
  }
  return false;
}

uint32_t random_psn() {
  uint32_t v = 0;
  if (!os::random_bytes(&v, sizeof v)) v = uint32_t(now_ns());
  return v & 0xFFFFFFu;
}

// ---------------------------------------------------------------------

// Posts `n` work requests (receives or sends) as linked lists of up to 32:
// each gets its own buffer's scatter entry, `fill` sets what only that
// kind carries, `post` hands a list to verbs (returning its errno).
template <class Wr, class Work, class Fill, class Post>
int post_chunked(const Work *w, size_t n, uint32_t lkey, Fill fill, Post post, const char *call,
                 Error &err) {
  constexpr size_t kChunk = 32;
  Wr wr[kChunk];
  ibv_sge sge[kChunk];
  for (size_t done = 0; done < n;) {
    size_t m = std::min(kChunk, n - done);
    for (size_t i = 0; i < m; i++) {
      const Work &x = w[done + i];
      sge[i] = {reinterpret_cast<uintptr_t>(x.addr), x.bytes, lkey};
      wr[i] = Wr{};
      wr[i].wr_id = x.wr_id;
      wr[i].sg_list = &sge[i];
      wr[i].num_sge = x.bytes ? 1 : 0;
      fill(wr[i], x);
      wr[i].next = i + 1 < m ? &wr[i + 1] : nullptr;
    }
    Wr *bad = nullptr;
    if (int e = post(wr, &bad)) return err.set(DS4TP_EIO, "{} failed: {}", call, std::strerror(e));
    done += m;
  }
  return DS4TP_OK;
}

class VerbsQp final : public QueuePair {
 public:
  VerbsQp(const Verbs &v, ibv_qp *qp, ibv_cq *cq, uint32_t lkey, const Found &f,
          const ibv_qp_cap &cap, uint8_t type, uint32_t max_msg)
      : v_(v), qp_(qp), cq_(cq), lkey_(lkey), f_(f), type_(type) {
    info_.qp_num = qp->qp_num;
    info_.psn = random_psn();
    info_.lid = f.port_attr.lid;
    info_.gid_index = uint16_t(f.gid_index);
    info_.port = uint8_t(f.port);
    info_.link_layer = f.port_attr.link_layer;
    info_.mtu = uint8_t(f.port_attr.active_mtu);
    info_.qp_type = type;
    std::memcpy(info_.gid.data(), f.gid.raw, 16);
    uint64_t dev_max = f.port_attr.max_msg_sz ? f.port_attr.max_msg_sz : max_msg;
#if defined(__APPLE__)
    // Apple's Thunderbolt verbs lose anything over 16 KiB per message
    // without an error, whatever the port reports (REFERENCE §4.4).
    dev_max = std::min<uint64_t>(dev_max, kAppleMaxMsg);
#endif
    info_.max_msg = uint32_t(std::min<uint64_t>(dev_max, max_msg));
    info_.send_depth = cap.max_send_wr;
    info_.recv_depth = cap.max_recv_wr;
  }
  ~VerbsQp() override {
    v_.destroy_qp(qp_);
    v_.destroy_cq(cq_);
  }

  wire::RdmaInfo local_info() const override { return info_; }

  int connect(const wire::RdmaInfo &peer, Error &err) override {
    const bool rc = type_ == wire::kQpRc;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = uint8_t(f_.port);
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                        (rc ? IBV_ACCESS_REMOTE_READ : 0);
    if (int e = v_.modify_qp(qp_, &a,
                             IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      return step_failed("INIT", e, err);

    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = ibv_mtu(std::min<int>(f_.port_attr.active_mtu, peer.mtu));
    a.dest_qp_num = peer.qp_num;
    a.rq_psn = peer.psn;
    a.ah_attr.dlid = peer.lid;
    a.ah_attr.sl = 0;
    a.ah_attr.src_path_bits = 0;
    a.ah_attr.port_num = uint8_t(f_.port);
    // Ethernet (RoCE) always routes by GID; InfiniBand by LID unless the
    // peer has none.
    if (f_.port_attr.link_layer == IBV_LINK_LAYER_ETHERNET || peer.lid == 0) {
      a.ah_attr.is_global = 1;
      std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid.data(), 16);
      a.ah_attr.grh.sgid_index = uint8_t(f_.gid_index);
      a.ah_attr.grh.hop_limit = 64;
      a.ah_attr.grh.traffic_class = 0;
      a.ah_attr.grh.flow_label = 0;
    }
    int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (rc) {
      a.max_dest_rd_atomic = 1;
      a.min_rnr_timer = 12;
      mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
    if (int e = v_.modify_qp(qp_, &a, mask)) return step_failed("RTR", e, err);

    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = info_.psn;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (rc) {
      a.timeout = 14;
      a.retry_cnt = 7;
      a.rnr_retry = 7;  // receives are posted ahead; an RNR wait beats an error
      a.max_rd_atomic = 1;
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    if (int e = v_.modify_qp(qp_, &a, mask)) return step_failed("RTS", e, err);
    return DS4TP_OK;
  }

  int post_recv(const RecvWork *w, size_t n, Error &err) override {
    return post_chunked<ibv_recv_wr>(
        w, n, lkey_, [](ibv_recv_wr &, const RecvWork &) {},
        [&](ibv_recv_wr *wr, ibv_recv_wr **bad) { return v_.do_post_recv(qp_, wr, bad); },
        "ibv_post_recv", err);
  }

  int post_send(const SendWork *w, size_t n, Error &err) override {
    return post_chunked<ibv_send_wr>(
        w, n, lkey_,
        [](ibv_send_wr &wr, const SendWork &s) {
          wr.opcode = IBV_WR_SEND_WITH_IMM;
          wr.send_flags = IBV_SEND_SIGNALED;
          wr.imm_data = htonl(s.imm);
        },
        [&](ibv_send_wr *wr, ibv_send_wr **bad) { return v_.do_post_send(qp_, wr, bad); },
        "ibv_post_send", err);
  }

  int poll(Completion *out, int max, Error &err) override {
    constexpr int kChunk = 32;
    ibv_wc wc[kChunk];
    int n = v_.do_poll_cq(cq_, std::min(max, kChunk), wc);
    if (n < 0) return err.set(DS4TP_EIO, "ibv_poll_cq failed ({})", n);
    for (int i = 0; i < n; i++) {
      Completion &c = out[i];
      c.wr_id = wc[i].wr_id;
      c.status = int(wc[i].status);
      c.vendor_err = wc[i].vendor_err;
      c.bytes = wc[i].byte_len;
      c.has_imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0;
      c.imm = c.has_imm ? ntohl(wc[i].imm_data) : 0;
    }
    return n;
  }

  std::string status_text(int status) const override {
    const char *s = v_.wc_status_str(ibv_wc_status(status));
    return s ? s : "unknown status";
  }

 private:
  int step_failed(const char *step, int e, Error &err) {
    return err.set(DS4TP_EIO, "rdma: moving the {} queue pair {} to {} failed: {}",
                   wire::qp_type_name(type_), qp_->qp_num, step, std::strerror(e));
  }

  const Verbs &v_;
  ibv_qp *qp_;
  ibv_cq *cq_;
  uint32_t lkey_;
  Found f_;
  uint8_t type_;
  wire::RdmaInfo info_;
};

class VerbsDevice final : public Device {
 public:
  VerbsDevice(const Verbs &v, ibv_context *ctx, ibv_pd *pd, const Found &f)
      : v_(v), ctx_(ctx), pd_(pd), f_(f) {}
  ~VerbsDevice() override {
    deregister_memory();
    v_.dealloc_pd(pd_);
    v_.close_device(ctx_);
  }

  std::string describe() const override { return describe_found(f_); }

  int register_memory(void *base, uint64_t bytes, uint32_t &rkey, Error &err) override {
    if (mr_ != nullptr) return err.set(DS4TP_EIO, "rdma: memory is already registered");
    mr_ = v_.reg_mr(pd_, base, bytes,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (mr_ == nullptr) {
      int e = errno;
      return err.set(DS4TP_EIO, "ibv_reg_mr of {} bytes failed: {}{}", bytes, std::strerror(e),
                     e == ENOMEM || e == EPERM
                         ? " (is the locked-memory limit, ulimit -l, smaller than the slab?)"
                         : "");
    }
    rkey = mr_->rkey;
    return DS4TP_OK;
  }

  void deregister_memory() override {
    if (mr_ != nullptr) v_.dereg_mr(mr_);
    mr_ = nullptr;
  }

  int create_qp(const QpRequest &req, std::unique_ptr<QueuePair> &out, Error &err) override {
    if (mr_ == nullptr) return err.set(DS4TP_EIO, "rdma: register memory before creating a QP");
    const uint32_t max_wr = uint32_t(std::max(f_.dev_attr.max_qp_wr, 1));
    const uint32_t max_cqe = uint32_t(std::max(f_.dev_attr.max_cqe, 1));
    uint32_t send = std::min(req.send_depth, max_wr);
    uint32_t recv = std::min(req.recv_depth, max_wr);
    int last_errno = 0;
    // Devices grant less than they advertise under memory pressure: halve
    // the depths until creation works (the transport checks what it got).
    for (; send >= 8 && recv >= 8; send /= 2, recv /= 2) {
      uint32_t cqe = std::min(send + recv, max_cqe);
      ibv_cq *cq = v_.create_cq(ctx_, int(cqe), nullptr, nullptr, 0);
      if (cq == nullptr) {
        last_errno = errno;
        continue;
      }
      const ibv_qp_type types[2] = {IBV_QPT_RC, IBV_QPT_UC};
      for (int t = req.uc_only ? 1 : 0; t < 2; t++) {
        ibv_qp_init_attr init{};
        init.send_cq = cq;
        init.recv_cq = cq;
        init.cap.max_send_wr = send;
        init.cap.max_recv_wr = recv;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        init.cap.max_inline_data = 0;
        init.qp_type = types[t];
        init.sq_sig_all = 0;
        ibv_qp *qp = v_.create_qp(pd_, &init);
        if (qp == nullptr) {
          last_errno = errno;
          continue;
        }
        ibv_qp_cap cap = init.cap;
        cap.max_send_wr = std::min(cap.max_send_wr, send);
        cap.max_recv_wr = std::min(cap.max_recv_wr, recv);
        out = std::make_unique<VerbsQp>(v_, qp, cq, mr_->lkey, f_, cap,
                                        t == 0 ? wire::kQpRc : wire::kQpUc, req.max_msg);
        return DS4TP_OK;
      }
      v_.destroy_cq(cq);
    }
    return err.set(DS4TP_EIO, "rdma: creating a queue pair on {} failed: {}", describe(),
                   std::strerror(last_errno));
  }

 private:
  const Verbs &v_;
  ibv_context *ctx_;
  ibv_pd *pd_;
  Found f_;
  ibv_mr *mr_ = nullptr;
};

}  // namespace

bool built_with_verbs() { return true; }

ProbeResult probe(const ProbeRequest &req) {
  ProbeResult r;
  std::string why;
  const Verbs *v = load_verbs(req.library.empty() ? nullptr : req.library.c_str(), why);
  if (v == nullptr) {
#if defined(__APPLE__)
    r.reason = "librdma is not available (" + why +
               "; RDMA over Thunderbolt needs macOS 26.2 or later)";
#else
    r.reason = "libibverbs is not installed or cannot be loaded (" + why +
               "; on Debian: apt install libibverbs1 ibverbs-providers)";
#endif
    return r;
  }
  Found f;
  if (!find_port(*v, req, f, r.reason, nullptr)) {
    r.reason += " [verbs library " + v->path + "]";
    return r;
  }
  r.usable = true;
  r.reason = describe_found(f);
  r.device = f.device;
  r.port = f.port;
  r.gid_index = f.gid_index;
  return r;
}

int open_device(const ProbeRequest &req, const ProbeResult &found, std::unique_ptr<Device> &out,
                Error &err) {
  std::string why;
  const Verbs *v = load_verbs(req.library.empty() ? nullptr : req.library.c_str(), why);
  if (v == nullptr) return err.set(DS4TP_EUNSUPPORTED, "rdma: cannot load libibverbs: {}", why);
  ProbeRequest exact = req;
  exact.device = found.device;
  exact.port = found.port;
  exact.gid_index = found.gid_index;
  Found f;
  ibv_context *ctx = nullptr;
  if (!find_port(*v, exact, f, why, &ctx))
    return err.set(DS4TP_EUNSUPPORTED, "rdma: the port found at bring-up is gone: {}", why);
  ibv_pd *pd = v->alloc_pd(ctx);
  if (pd == nullptr) {
    int e = errno;
    v->close_device(ctx);
    return err.set(DS4TP_EIO, "rdma: allocating a protection domain on {} failed: {}",
                   describe_found(f), std::strerror(e));
  }
  out = std::make_unique<VerbsDevice>(*v, ctx, pd, f);
  return DS4TP_OK;
}

}  // namespace ds4tp::rdma
