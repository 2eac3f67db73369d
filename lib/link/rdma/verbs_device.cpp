// The verbs binding: probe(), open_device(), the device and its queue
// pairs (the port walk they share is verbs_port.cpp). Built unless
// DS4TP_WITH_RDMA=OFF, on Linux and macOS alike: the types are our own
// verbs ABI declarations (verbs_abi.hpp), every call goes through the
// table load_verbs() resolved (or the context's ops table), so nothing
// here links against libibverbs or librdma.
//
// Verified here: it compiles warning-free for Linux and for macOS
// (scripts/cross-macos.sh), and the whole binding (probe, PD/MR/CQ/QP,
// INIT->RTR->RTS, posting and polling) runs between two processes through
// the test verbs provider (tests/verbs_provider, built from rdma-core's
// header, so the two meet only through the ABI), which checks every step
// as a provider would; see README "RDMA" for the two-host check. Not run
// against Apple's librdma.
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/clock.hpp"
#include "os/os.hpp"
#include "link/rdma/probe.hpp"
#include "link/rdma/verbs_port.hpp"

namespace ds4tp::rdma {

namespace {

#if defined(__APPLE__)
constexpr uint64_t kAppleMaxMsg = 16384;
#endif

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
  abi::Sge sge[kChunk];
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
  VerbsQp(const Verbs &v, abi::Qp *qp, abi::Cq *cq, uint32_t lkey, const Found &f,
          const abi::QpCap &cap, uint8_t type, uint32_t max_msg)
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
    abi::QpAttr a{};
    a.qp_state = abi::kQpsInit;
    a.pkey_index = 0;
    a.port_num = uint8_t(f_.port);
    a.qp_access_flags = abi::kAccessLocalWrite | abi::kAccessRemoteWrite |
                        (rc ? abi::kAccessRemoteRead : 0);
    int mask = abi::kQpState | abi::kQpPkeyIndex | abi::kQpPort | abi::kQpAccessFlags;
    if (int e = v_.modify_qp(qp_, &a, mask)) return step_failed("INIT", e, err);

    a = abi::QpAttr{};
    a.qp_state = abi::kQpsRtr;
    a.path_mtu = std::min<int>(f_.port_attr.active_mtu, peer.mtu);
    a.dest_qp_num = peer.qp_num;
    a.rq_psn = peer.psn;
    a.ah_attr.dlid = peer.lid;
    a.ah_attr.sl = 0;
    a.ah_attr.src_path_bits = 0;
    a.ah_attr.port_num = uint8_t(f_.port);
    // Ethernet (RoCE) always routes by GID; InfiniBand by LID unless the
    // peer has none.
    if (f_.port_attr.link_layer == abi::kLinkLayerEthernet || peer.lid == 0) {
      a.ah_attr.is_global = 1;
      std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid.data(), 16);
      a.ah_attr.grh.sgid_index = uint8_t(f_.gid_index);
      a.ah_attr.grh.hop_limit = 64;
      a.ah_attr.grh.traffic_class = 0;
      a.ah_attr.grh.flow_label = 0;
    }
    mask = abi::kQpState | abi::kQpAv | abi::kQpPathMtu | abi::kQpDestQpn | abi::kQpRqPsn;
    if (rc) {
      a.max_dest_rd_atomic = 1;
      a.min_rnr_timer = 12;
      mask |= abi::kQpMaxDestRdAtomic | abi::kQpMinRnrTimer;
    }
    if (int e = v_.modify_qp(qp_, &a, mask)) return step_failed("RTR", e, err);

    a = abi::QpAttr{};
    a.qp_state = abi::kQpsRts;
    a.sq_psn = info_.psn;
    mask = abi::kQpState | abi::kQpSqPsn;
    if (rc) {
      a.timeout = 14;
      a.retry_cnt = 7;
      a.rnr_retry = 7;  // receives are posted ahead; an RNR wait beats an error
      a.max_rd_atomic = 1;
      mask |= abi::kQpTimeout | abi::kQpRetryCnt | abi::kQpRnrRetry | abi::kQpMaxQpRdAtomic;
    }
    if (int e = v_.modify_qp(qp_, &a, mask)) return step_failed("RTS", e, err);
    return DS4TP_OK;
  }

  int post_recv(const RecvWork *w, size_t n, Error &err) override {
    return post_chunked<abi::RecvWr>(
        w, n, lkey_, [](abi::RecvWr &, const RecvWork &) {},
        [&](abi::RecvWr *wr, abi::RecvWr **bad) { return v_.do_post_recv(qp_, wr, bad); },
        "ibv_post_recv", err);
  }

  int post_send(const SendWork *w, size_t n, Error &err) override {
    return post_chunked<abi::SendWr>(
        w, n, lkey_,
        [](abi::SendWr &wr, const SendWork &s) {
          wr.opcode = abi::kWrSendWithImm;
          wr.send_flags = abi::kSendSignaled;
          wr.imm_data = htonl(s.imm);
        },
        [&](abi::SendWr *wr, abi::SendWr **bad) { return v_.do_post_send(qp_, wr, bad); },
        "ibv_post_send", err);
  }

  int poll(Completion *out, int max, Error &err) override {
    constexpr int kChunk = 32;
    abi::Wc wc[kChunk];
    int n = v_.do_poll_cq(cq_, std::min(max, kChunk), wc);
    if (n < 0) return err.set(DS4TP_EIO, "ibv_poll_cq failed ({})", n);
    for (int i = 0; i < n; i++) {
      Completion &c = out[i];
      c.wr_id = wc[i].wr_id;
      c.status = int(wc[i].status);
      c.vendor_err = wc[i].vendor_err;
      c.bytes = wc[i].byte_len;
      c.has_imm = (wc[i].wc_flags & abi::kWcWithImm) != 0;
      c.imm = c.has_imm ? ntohl(wc[i].imm_data) : 0;
    }
    return n;
  }

  std::string status_text(int status) const override {
    const char *s = v_.wc_status_str(status);
    return s ? s : "unknown status";
  }

 private:
  int step_failed(const char *step, int e, Error &err) {
    return err.set(DS4TP_EIO, "rdma: moving the {} queue pair {} to {} failed: {}",
                   wire::qp_type_name(type_), qp_->qp_num, step, std::strerror(e));
  }

  const Verbs &v_;
  abi::Qp *qp_;
  abi::Cq *cq_;
  uint32_t lkey_;
  Found f_;
  uint8_t type_;
  wire::RdmaInfo info_;
};

class VerbsDevice final : public Device {
 public:
  VerbsDevice(const Verbs &v, abi::Context *ctx, abi::Pd *pd, const Found &f)
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
                    abi::kAccessLocalWrite | abi::kAccessRemoteWrite | abi::kAccessRemoteRead);
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
      abi::Cq *cq = v_.create_cq(ctx_, int(cqe), nullptr, nullptr, 0);
      if (cq == nullptr) {
        last_errno = errno;
        continue;
      }
      const int types[2] = {abi::kQptRc, abi::kQptUc};
      for (int t = req.uc_only ? 1 : 0; t < 2; t++) {
        abi::QpInitAttr init{};
        init.send_cq = cq;
        init.recv_cq = cq;
        init.cap.max_send_wr = send;
        init.cap.max_recv_wr = recv;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        init.cap.max_inline_data = 0;
        init.qp_type = types[t];
        init.sq_sig_all = 0;
        abi::Qp *qp = v_.create_qp(pd_, &init);
        if (qp == nullptr) {
          last_errno = errno;
          continue;
        }
        abi::QpCap cap = init.cap;
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
  abi::Context *ctx_;
  abi::Pd *pd_;
  Found f_;
  abi::Mr *mr_ = nullptr;
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
  abi::Context *ctx = nullptr;
  if (!find_port(*v, exact, f, why, &ctx))
    return err.set(DS4TP_EUNSUPPORTED, "rdma: the port found at bring-up is gone: {}", why);
  abi::Pd *pd = v->alloc_pd(ctx);
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
