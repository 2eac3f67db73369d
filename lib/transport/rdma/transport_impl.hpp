// The RDMA transport's class, shared by its two halves: setup.cpp (attach:
// queue pair, RDMA_INFO/READY, warm-up) and transport.cpp (the data path:
// posting, completions, shape changes, gates). Internal to rdma/; the
// public face is transport.hpp.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "os/wait.hpp"
#include "transport/rdma/qp_link.hpp"
#include "transport/rdma/transport.hpp"
#include "wire/gate_header.hpp"
#include "wire/rdma_frames.hpp"
#include "talk/peer_state.hpp"

namespace ds4tp::rdma {

using wire::GateHeader;
using wire::GateKind;

// What a receive expects to see when it completes.
struct Expect {
  uint64_t wr_id = 0;
  uint32_t bytes = 0;
  uint32_t imm = 0;
};

// Names the operation in messages: "row gate (layer 3, gate 1, seq 17)".
struct Op {
  uint16_t kind = 0;
  uint32_t layer = 0;
  uint32_t aux = 0;
  uint64_t seq = 0;
  const char *step = "";  // "", "drain", "warm-up", ...

  std::string str() const {
    const char *name = kind == uint16_t(GateKind::Row)     ? "row gate"
                       : kind == uint16_t(GateKind::Batch) ? "batch gate"
                       : kind == uint16_t(GateKind::Big)   ? "big gate"
                                                           : "set-up";
    std::string s;
    if (kind == uint16_t(GateKind::Row))
      s = fmt::format("{} (layer {}, gate {}, seq {})", name, layer, aux, seq);
    else if (kind == uint16_t(GateKind::Batch))
      s = fmt::format("{} (index {}, rows {}, seq {})", name, layer, aux, seq);
    else if (kind == uint16_t(GateKind::Big))
      s = fmt::format("{} (layer {}, seq {})", name, layer, seq);
    else
      s = name;
    if (*step) s += fmt::format(" [{}]", step);
    return s;
  }
};

enum class Window { Quiet, Rows, Batch };

class RdmaTransport final : public Transport {
 public:
  RdmaTransport(Endpoint ep, const DataConfig &cfg, const Tuning &t,
                const slab::Schedule &sched, const Logger &log)
      : dev_(std::move(ep.device)),
        link_(std::move(ep.link)),
        data_(std::move(ep.data)),
        control_fd_(ep.control_fd),
        rank_(ep.rank),
        cfg_(cfg),
        tun_(t),
        sched_(sched),
        log_(log) {
    // Either socket closing means the peer process is gone.
    watch_.watch_socket(data_.get(), "data");
    watch_.watch_socket(control_fd_, "control");
    talk::watch_peer(watch_, cfg_.peer);
    os::set_spin(policy_, budget_, cfg_.spin_ns, cfg_.adaptive_spin);
    policy_.grace_ns = kGoneGraceNs;
  }

  ~RdmaTransport() override { detach(); }

  const char *name() const override { return "rdma"; }

  int attach(uint8_t *base, const slab::Layout &layout, Error &err) override;
  void detach() override {
    qpl_.qp.reset();
    if (registered_) dev_->deregister_memory();
    registered_ = false;
    base_ = nullptr;
    window_ = Window::Quiet;
  }

  int gate(uint32_t layer, uint32_t gate, uint32_t slot, uint64_t seq, uint64_t start_ns,
           Error &err) override;
  int batch_gate(uint32_t index, uint32_t rows, uint64_t seq, uint64_t start_ns,
                 Error &err) override;
  int big_gate(uint32_t layer, uint64_t seq, const void *out, void *in, uint64_t bytes,
               uint64_t start_ns, Error &err) override;
  const std::atomic<uint64_t> *setup_retries() const override { return &setup_retries_; }

 private:
  std::atomic<uint64_t> setup_retries_{0};  // attempts that recreated the QP (stats)
  // ---- set-up --------------------------------------------------------
  int setup_attempt(uint32_t attempt, bool &uc_only, bool &retry, Error &err);
  int warm_up(uint32_t attempt, bool &ok, Error &err);
  int frame_send(uint32_t type, const uint8_t *p, size_t n, Error &err) {
    return link_->send(type, p, n, now_ns() + tun_.setup_timeout_ns, err);
  }
  int frame_recv(uint32_t type, uint8_t *p, size_t n, Error &err) {
    return link_->recv(type, p, n, now_ns() + tun_.setup_timeout_ns, err);
  }
  // One set-up round: sends `mine` as frame `type`, then receives the
  // peer's frame of that type and decodes it into `peer` (may be `mine`).
  template <size_t N, class M>
  int trade(uint32_t type, const M &mine, M &peer, void (*enc)(const M &, uint8_t *),
            int (*dec)(const uint8_t *, size_t, M &, Error &), Error &err) {
    uint8_t buf[N];
    enc(mine, buf);
    if (int rc = frame_send(type, buf, N, err)) return rc;
    if (int rc = frame_recv(type, buf, N, err)) return rc;
    return dec(buf, N, peer, err);
  }
  void reset_counters() {
    qpl_.reset_counters();
    window_ = Window::Quiet;
  }

  // ---- posting (qp_link.hpp) -------------------------------------------
  // Posts one receive per message of a `bytes` run at `dst` (split at the
  // message size); tags from `tag(i)`.
  template <typename Tag>
  int post_run_recv(uint8_t *dst, uint64_t bytes, Tag tag, const Op &op, Error &err) {
    const uint32_t msg = qpl_.msg;
    int rc = qpl_.post_recvs(qpl_.messages(bytes), [&](uint64_t k, RecvWork &w) {
      w.addr = dst + k * msg;
      w.bytes = qpl_.piece(k, bytes);
      ring_[w.wr_id % ring_.size()] = {w.wr_id, w.bytes, tag(uint32_t(k))};
    }, err);
    return rc ? err.set(rc, "rdma {}: {}", op.str(), err.message) : DS4TP_OK;
  }

  template <typename Tag>
  int post_run_send(const uint8_t *src, uint64_t bytes, Tag tag, const Op &op, Error &err) {
    const uint32_t msg = qpl_.msg;
    return post_sends(qpl_.messages(bytes), [&](uint64_t k, SendWork &s) {
      s.addr = src + k * msg;
      s.bytes = qpl_.piece(k, bytes);
      s.imm = tag(uint32_t(k));
    }, op, err);
  }

  // Posts `n` sends filled by `fill(k, work)`, waiting for send completions
  // whenever the send queue is full.
  template <typename Fill>
  int post_sends(uint64_t n, Fill fill, const Op &op, Error &err) {
    uint64_t done = 0;
    while (done < n) {
      if (qpl_.send_room() == 0) {
        if (int rc = wait_for(qpl_.recv_done, qpl_.send_done + 1, op, err)) return rc;
        continue;
      }
      if (int rc = qpl_.post_sends(n, done, fill, err))
        return err.set(rc, "rdma {}: {}", op.str(), err.message);
    }
    return DS4TP_OK;
  }

  // ---- row window ----------------------------------------------------
  uint8_t *row_dst(uint64_t seq) const {
    if (staged_rows_) return base_ + L_.big_in + (seq & 1) * L_.vec_stride;
    return base_ + L_.in_vec(uint32_t(slab::slot_for_seq(sched_, seq)));
  }
  int post_row(uint64_t seq, const Op &op, Error &err) {
    return post_run_recv(row_dst(seq), L_.vec_bytes,
                         [seq](uint32_t k) { return row_tag(seq, k); }, op, err);
  }

  // ---- shape changes -------------------------------------------------
  // Crosses the header barrier on the data socket: both ranks must present
  // the same header; a live peer may arrive up to cfg_.arrival(big) late.
  int barrier(const GateHeader &mine, bool big, const Op &op, Error &err);
  // Turns the receives posted before index `upto` into drain receives,
  // sends as many drain messages and waits until both sides consumed them.
  int drain(uint64_t upto, const Op &op, Error &err);
  // Makes this gate's receives (posted by `post`) known to the peer: from
  // Quiet, post then barrier; from an armed window, barrier, post, drain.
  template <typename Post>
  int change_shape(const GateHeader &h, const Op &op, Post post, Error &err) {
    const bool big = h.kind == uint16_t(GateKind::Big);
    if (window_ == Window::Quiet) {
      if (int rc = post()) return rc;
      return barrier(h, big, op, err);
    }
    if (int rc = barrier(h, big, op, err)) return rc;
    uint64_t old_end = qpl_.recv_posted;
    if (int rc = post()) return rc;
    Op d = op;
    d.step = "drain";
    return drain(old_end, d, err);
  }

  // ---- completions ---------------------------------------------------
  // Polls until `want_recv` receives and `want_send` sends completed,
  // failing after `idle_ns` (default gate_timeout_ns) without progress.
  // `meet_ns` (0: idle_ns) bounds the wait while the peer may not have
  // reached the gate yet: until a receive completes or its heartbeat says
  // it completed a gate since the wait began.
  int wait_for(uint64_t want_recv, uint64_t want_send, const Op &op, Error &err,
               uint64_t idle_ns = 0, uint64_t meet_ns = 0);

  // The gate in progress's start_ns, for its first Waiter (wait_for or
  // barrier), which then reads no clock to begin; later waits of the gate
  // read their own. Zero outside a gate (set-up waits read their own too).
  uint64_t gate_start_ = 0;
  uint64_t take_gate_start() { return std::exchange(gate_start_, 0); }
  struct GateStart {
    GateStart(uint64_t &slot, uint64_t start_ns) : slot_(slot) { slot_ = start_ns; }
    ~GateStart() { slot_ = 0; }
    GateStart(const GateStart &) = delete;
    GateStart &operator=(const GateStart &) = delete;
    uint64_t &slot_;
  };
  int not_reached(const Op &op, uint64_t meet_ns, Error &err);
  // Judges what a receive carried against what its post expects.
  int expected(const Completion &c, Error &err) const;

  // ---- members -------------------------------------------------------
  std::unique_ptr<Device> dev_;
  std::unique_ptr<SetupLink> link_;
  net::Fd data_;
  int control_fd_;
  int rank_;
  DataConfig cfg_;
  Tuning tun_;
  slab::Schedule sched_;
  Logger log_;
  os::PeerWatch watch_;
  os::WaitPolicy policy_;
  os::SpinBudget budget_;  // the adaptive policy's window, learned across waits

  QpLink qpl_;  // the queue pair, its negotiated message size and depths
  bool registered_ = false;
  uint32_t rkey_ = 0;
  uint8_t *base_ = nullptr;
  slab::Layout L_;
  uint32_t row_msgs_ = 0;  // messages per row vector
  uint32_t row_window_ = 0;
  bool staged_rows_ = false;  // consecutive row gates can share a slot
  uint64_t round_bytes_ = 0;  // a big gate's round, staged or straight from/to the slab

  std::vector<Expect> ring_;  // what each posted receive expects, by wr_id

  Window window_ = Window::Quiet;
  // Rows: receives for seqs [row_first_seq_, row_posted_] posted from ring
  // index row_first_idx_ on; row_next_ is the next seq expected.
  uint64_t row_first_seq_ = 0, row_first_idx_ = 0, row_posted_ = 0, row_next_ = 0;
  // Batch prediction: receives for (pred_index_, pred_rows_, pred_seq_)
  // posted from ring index pred_idx_.
  uint32_t pred_index_ = 0, pred_rows_ = 0;
  uint64_t pred_seq_ = 0, pred_idx_ = 0;
  bool have_last_batch_ = false;
  uint32_t last_batch_index_ = 0;
};

}  // namespace ds4tp::rdma
