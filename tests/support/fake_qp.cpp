#include "support/fake_qp.hpp"

#include <cstring>
#include <deque>
#include <map>
#include <mutex>

namespace ds4tp::rdma::fake {

namespace {

struct PostedRecv {
  uint64_t wr_id;
  uint8_t *addr;
  uint32_t bytes;
};

struct Qp {
  int end = 0;
  uint32_t qpn = 0;
  uint32_t dest_qpn = 0;  // 0 until connected
  bool error = false;
  bool dead_out = false;  // this direction drops everything
  uint32_t send_depth = 0, recv_depth = 0, max_msg = 0;
  uint8_t qp_type = wire::kQpUc;
  std::deque<PostedRecv> rq;
  std::deque<Completion> cq;
  uint32_t sends_out = 0;  // posted, completion not yet polled
  uint32_t recvs_out = 0;
  int hold = 0;  // polls left before held completions show
  bool destroyed = false;
};

}  // namespace

struct Fabric::State {
  std::mutex mu;
  EndOptions opt[2];
  uint8_t *mem[2] = {nullptr, nullptr};
  uint64_t mem_bytes[2] = {0, 0};
  std::map<uint32_t, std::shared_ptr<Qp>> qps;
  uint32_t next_qpn = 0x100;
  // Faults.
  int drop[2] = {0, 0};
  int fail_send[2] = {0, 0};
  int fail_recv[2] = {0, 0};
  int delay[2] = {0, 0};
  bool kill[2] = {false, false};
  // Counters.
  uint64_t delivered[2] = {0, 0};
  uint64_t lost[2] = {0, 0};
  uint32_t created[2] = {0, 0};
  std::shared_ptr<Qp> live[2];

  bool inside(int end, const void *p, uint32_t n) const {
    auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(mem[end]);
    return mem[end] != nullptr && a >= b && a - b <= mem_bytes[end] &&
           n <= mem_bytes[end] - (a - b);
  }

  void push(Qp &q, const Completion &c) {
    if (q.cq.empty()) q.hold = delay[q.end];
    q.cq.push_back(c);
  }

  // Moves `q` to error: its posted receives flush.
  void break_qp(Qp &q) {
    q.error = true;
    while (!q.rq.empty()) {
      Completion c;
      c.wr_id = q.rq.front().wr_id;
      c.status = kStatusWrFlushErr;
      q.rq.pop_front();
      push(q, c);
    }
  }
};

namespace {

std::string fake_status_text(int s) {
  switch (s) {
    case kStatusSuccess: return "success";
    case kStatusLocLenErr: return "local length error";
    case kStatusLocProtErr: return "local protection error";
    case kStatusWrFlushErr: return "Work Request Flushed Error";
    case kStatusRemAccessErr: return "remote access error";
    case kStatusRetryExcErr: return "transport retry counter exceeded";
    default: return "unknown";
  }
}

class FakeQp final : public QueuePair {
 public:
  FakeQp(std::shared_ptr<Fabric::State> s, std::shared_ptr<Qp> q) : s_(std::move(s)), q_(std::move(q)) {}
  ~FakeQp() override {
    std::lock_guard<std::mutex> l(s_->mu);
    q_->destroyed = true;
    s_->qps.erase(q_->qpn);
  }

  wire::RdmaInfo local_info() const override {
    std::lock_guard<std::mutex> l(s_->mu);
    wire::RdmaInfo i;
    i.qp_num = q_->qpn;
    i.psn = q_->qpn * 7u & 0xFFFFFFu;
    i.lid = uint16_t(q_->end + 1);
    i.gid_index = 0;
    i.port = 1;
    i.link_layer = wire::kLinkEthernet;
    i.mtu = 3;
    i.qp_type = q_->qp_type;
    i.gid[15] = uint8_t(q_->end + 1);
    i.max_msg = q_->max_msg;
    i.send_depth = q_->send_depth;
    i.recv_depth = q_->recv_depth;
    return i;
  }

  int connect(const wire::RdmaInfo &peer, Error &err) override {
    std::lock_guard<std::mutex> l(s_->mu);
    if (peer.qp_type != q_->qp_type)
      return err.set(DS4TP_EIO, "fake: cannot connect a {} queue pair to a {} one",
                     wire::qp_type_name(q_->qp_type), wire::qp_type_name(peer.qp_type));
    q_->dest_qpn = peer.qp_num;
    return DS4TP_OK;
  }

  int post_recv(const RecvWork *w, size_t n, Error &err) override {
    std::lock_guard<std::mutex> l(s_->mu);
    Qp &q = *q_;
    for (size_t i = 0; i < n; i++) {
      if (q.recvs_out >= q.recv_depth)
        return err.set(DS4TP_EIO, "fake: receive queue full ({} outstanding)", q.recv_depth);
      if (!s_->inside(q.end, w[i].addr, w[i].bytes))
        return err.set(DS4TP_EIO, "fake: receive of {} bytes at {} is outside registered memory",
                       w[i].bytes, w[i].addr);
      q.recvs_out++;
      if (q.error) {
        Completion c;
        c.wr_id = w[i].wr_id;
        c.status = kStatusWrFlushErr;
        s_->push(q, c);
        continue;
      }
      q.rq.push_back({w[i].wr_id, static_cast<uint8_t *>(w[i].addr), w[i].bytes});
    }
    return DS4TP_OK;
  }

  int post_send(const SendWork *w, size_t n, Error &err) override {
    std::lock_guard<std::mutex> l(s_->mu);
    Qp &q = *q_;
    const int end = q.end;
    for (size_t i = 0; i < n; i++) {
      if (q.sends_out >= q.send_depth)
        return err.set(DS4TP_EIO, "fake: send queue full ({} outstanding)", q.send_depth);
      if (w[i].bytes > q.max_msg)
        return err.set(DS4TP_EIO, "fake: send of {} bytes exceeds the {} byte message limit",
                       w[i].bytes, q.max_msg);
      if (w[i].bytes > 0 && !s_->inside(end, w[i].addr, w[i].bytes))
        return err.set(DS4TP_EIO, "fake: send of {} bytes at {} is outside registered memory",
                       w[i].bytes, w[i].addr);
      if (q.dest_qpn == 0)
        return err.set(DS4TP_EIO, "fake: send on a queue pair that is not connected");
      q.sends_out++;
      Completion sc;
      sc.wr_id = w[i].wr_id;
      if (q.error) {
        sc.status = kStatusWrFlushErr;
        s_->push(q, sc);
        continue;
      }
      if (s_->fail_send[end] != 0) {
        sc.status = s_->fail_send[end];
        s_->fail_send[end] = 0;
        s_->push(q, sc);
        s_->break_qp(q);
        continue;
      }
      deliver(w[i], end);
      s_->push(q, sc);
    }
    return DS4TP_OK;
  }

  int poll(Completion *out, int max, Error &) override {
    std::lock_guard<std::mutex> l(s_->mu);
    Qp &q = *q_;
    if (q.cq.empty()) return 0;
    if (q.hold > 0) {
      q.hold--;
      return 0;
    }
    int n = 0;
    while (n < max && !q.cq.empty()) {
      out[n] = q.cq.front();
      q.cq.pop_front();
      if (out[n].wr_id >> 63)
        q.sends_out--;
      else
        q.recvs_out--;
      n++;
    }
    return n;
  }

  std::string status_text(int status) const override { return fake_status_text(status); }

 private:
  // Under the lock: puts one message into the peer's oldest receive, or
  // loses it. Sends are tagged with bit 63 of wr_id by the transport; the
  // fake relies on that only to keep its depth counters.
  void deliver(const SendWork &w, int end) {
    Fabric::State &s = *s_;
    if (s.drop[end] > 0) {
      s.drop[end]--;
      s.lost[end]++;
      return;
    }
    if (q_->dead_out) {
      s.lost[end]++;
      return;
    }
    auto it = s.qps.find(q_->dest_qpn);
    if (it == s.qps.end() || it->second->dest_qpn != q_->qpn || it->second->error) {
      s.lost[end]++;
      return;
    }
    Qp &r = *it->second;
    if (r.rq.empty() || r.rq.front().bytes < w.bytes) {
      s.lost[end]++;
      if (r.rq.empty() && s.opt[end].dead_after_unposted) q_->dead_out = true;
      return;
    }
    PostedRecv pr = r.rq.front();
    r.rq.pop_front();
    Completion rc;
    rc.wr_id = pr.wr_id;
    if (s.fail_recv[r.end] != 0) {
      rc.status = s.fail_recv[r.end];
      s.fail_recv[r.end] = 0;
      s.push(r, rc);
      s.break_qp(r);
      s.lost[end]++;
      return;
    }
    if (w.bytes > 0) std::memcpy(pr.addr, w.addr, w.bytes);
    rc.bytes = w.bytes;
    rc.imm = w.imm;
    rc.has_imm = true;
    s.push(r, rc);
    s.delivered[end]++;
  }

  std::shared_ptr<Fabric::State> s_;
  std::shared_ptr<Qp> q_;
};

class FakeDevice final : public Device {
 public:
  FakeDevice(std::shared_ptr<Fabric::State> s, int end) : s_(std::move(s)), end_(end) {}
  ~FakeDevice() override { deregister_memory(); }

  std::string describe() const override { return fmt::format("fake UC end {}", end_); }

  int register_memory(void *base, uint64_t bytes, uint32_t &rkey, Error &err) override {
    std::lock_guard<std::mutex> l(s_->mu);
    if (s_->mem[end_] != nullptr)
      return err.set(DS4TP_EIO, "fake: memory is already registered");
    s_->mem[end_] = static_cast<uint8_t *>(base);
    s_->mem_bytes[end_] = bytes;
    rkey = 0x1000u + uint32_t(end_);
    return DS4TP_OK;
  }

  void deregister_memory() override {
    std::lock_guard<std::mutex> l(s_->mu);
    s_->mem[end_] = nullptr;
    s_->mem_bytes[end_] = 0;
  }

  int create_qp(const QpRequest &req, std::unique_ptr<QueuePair> &out, Error &err) override {
    std::lock_guard<std::mutex> l(s_->mu);
    if (s_->mem[end_] == nullptr)
      return err.set(DS4TP_EIO, "fake: create the queue pair after registering memory");
    const EndOptions &o = s_->opt[end_];
    auto q = std::make_shared<Qp>();
    q->end = end_;
    q->qpn = s_->next_qpn++;
    q->qp_type = (o.offer_rc && !req.uc_only) ? wire::kQpRc : wire::kQpUc;
    q->send_depth = std::min(req.send_depth, o.max_send_depth);
    q->recv_depth = std::min(req.recv_depth, o.max_recv_depth);
    q->max_msg = std::min(req.max_msg, o.max_msg);
    s_->qps[q->qpn] = q;
    s_->created[end_]++;
    q->dead_out = s_->kill[end_];  // a kill requested before this QP existed
    s_->kill[end_] = false;
    s_->live[end_] = q;
    out = std::make_unique<FakeQp>(s_, q);
    return DS4TP_OK;
  }

 private:
  std::shared_ptr<Fabric::State> s_;
  int end_;
};

}  // namespace

Fabric::Fabric(const EndOptions &a, const EndOptions &b) : s_(std::make_shared<State>()) {
  s_->opt[0] = a;
  s_->opt[1] = b;
}

Fabric::~Fabric() = default;

std::unique_ptr<Device> Fabric::device(int end) {
  return std::make_unique<FakeDevice>(s_, end & 1);
}

void Fabric::drop_next(int end, int messages) {
  std::lock_guard<std::mutex> l(s_->mu);
  s_->drop[end & 1] += messages;
}

void Fabric::fail_next_send(int end, int status) {
  std::lock_guard<std::mutex> l(s_->mu);
  s_->fail_send[end & 1] = status;
}

void Fabric::fail_next_recv(int end, int status) {
  std::lock_guard<std::mutex> l(s_->mu);
  s_->fail_recv[end & 1] = status;
}

void Fabric::kill_direction(int end) {
  std::lock_guard<std::mutex> l(s_->mu);
  auto &q = s_->live[end & 1];
  if (q && !q->destroyed)
    q->dead_out = true;
  else
    s_->kill[end & 1] = true;
}

void Fabric::delay_completions(int end, int polls) {
  std::lock_guard<std::mutex> l(s_->mu);
  s_->delay[end & 1] = polls;
}

uint64_t Fabric::delivered(int end) const {
  std::lock_guard<std::mutex> l(s_->mu);
  return s_->delivered[end & 1];
}

uint64_t Fabric::lost(int end) const {
  std::lock_guard<std::mutex> l(s_->mu);
  return s_->lost[end & 1];
}

uint64_t Fabric::posted_receives(int end) const {
  std::lock_guard<std::mutex> l(s_->mu);
  auto &q = s_->live[end & 1];
  return q && !q->destroyed ? q->rq.size() : 0;
}

uint32_t Fabric::qps_created(int end) const {
  std::lock_guard<std::mutex> l(s_->mu);
  return s_->created[end & 1];
}

}  // namespace ds4tp::rdma::fake
