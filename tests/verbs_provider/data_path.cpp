// The test verbs provider's data path: posted sends move into the peer's
// ring, arrived messages meet posted receives, completions queue on the
// CQ. Progress happens inside post and poll calls (no threads).
#include <cerrno>
#include <cstring>
#include <ctime>

#include "state.hpp"

namespace fv {
namespace {

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

uint64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return uint64_t(t.tv_sec) * 1000000000u + uint64_t(t.tv_nsec);
}

// Moves posted sends into the peer's ring while it has room (and, under
// the delay fault, once they are old enough).
void push_sends(Qp *q) {
  Cq *cq = reinterpret_cast<Cq *>(q->qp.send_cq);
  const uint64_t delay_ns =
      device_of(q->qp.context) == q->cfg.delay_device ? q->cfg.delay_us * 1000 : 0;
  while (!q->sq.empty() && q->qp.state == IBV_QPS_RTS) {
    SendWr &s = q->sq.front();
    if (delay_ns != 0 && now_ns() - s.posted_ns < delay_ns) return;
    ibv_wc_status st = IBV_WC_SUCCESS;
    bool deliver = true;
    if (!lkey_ok(s.addr, s.len, s.lkey)) {
      st = IBV_WC_LOC_PROT_ERR;
      deliver = false;
    } else if (s.op == IBV_WR_RDMA_WRITE || s.op == IBV_WR_RDMA_WRITE_WITH_IMM) {
      deliver = false;  // uc-apple: completes, places nothing
    } else if (q->cfg.apple && s.len > 16384) {
      deliver = false;  // uc-apple: lost without an error
    } else if (q->dgid[15] != device_of(q->qp.context) + 1) {
      // Another device's GID: its cable ends elsewhere (crossed rails).
      deliver = false;
      if (q->qp.qp_type == IBV_QPT_RC) st = IBV_WC_RETRY_EXC_ERR;
    } else {
      uint64_t n = ++g_sends;
      const int dev = device_of(q->qp.context);
      const uint64_t nd = ++g_device_sends[dev];
      const bool cut = q->cfg.cut_at != 0 &&
                       (q->cfg.cut_device < 0 ? n >= q->cfg.cut_at
                                              : dev == q->cfg.cut_device && nd >= q->cfg.cut_at);
      if (n == q->cfg.drop_at || cut) deliver = false;
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

}  // namespace

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
    s.posted_ns = q->cfg.delay_us != 0 ? now_ns() : 0;
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

}  // namespace fv
