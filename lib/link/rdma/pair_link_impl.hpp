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

#include "link/pair_link.hpp"
#include "os/wait.hpp"
#include "link/rdma/qp_link.hpp"
#include "multipath/survivor.hpp"
#include "link/rdma/pair_link.hpp"
#include "wire/gate_header.hpp"
#include "wire/failover.hpp"
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

// The link namespace, named where the class's own link() would hide it.
namespace lk = ds4tp::link;

class WindowLink final : public lk::PairLink, public multipath::Survivor {
 public:
  WindowLink(Endpoint ep, const DataConfig &cfg, const Tuning &t,
                const slab::Schedule &sched, const Logger &log)
      : dev_(std::move(ep.device)),
        link_(std::move(ep.link)),
        data_(std::move(ep.data)),
        control_fd_(ep.control_fd),
        rank_(ep.rank),
        cfg_(cfg),
        tun_(t),
        sched_(sched),
        log_(log),
        rail_rows_(ep.rail_rows),
        pinned_row_(ep.row_link) {
    // Either socket closing means the peer process is gone.
    watch_.watch_socket(data_.get(), "data");
    watch_.watch_socket(control_fd_, "control");
    talk::watch_peer(watch_, cfg_.peer);
    os::set_spin(policy_, budget_, cfg_.spin_ns, cfg_.adaptive_spin);
    policy_.tally = cfg_.tally;
    policy_.grace_ns = kGoneGraceNs;
    for (auto &d : ep.rails) rails_.push_back(Rail{std::move(d), {}, {}, false, 0});
  }

  ~WindowLink() override { unbind(); }

  const char *name() const override { return "rdma"; }
  int kind() const override { return DS4TP_TRANSPORT_RDMA; }

  int bind(uint8_t *base, const slab::Layout &layout, Error &err) override;
  void unbind() override {
    qpl_.qp.reset();
    if (registered_) dev_->deregister_memory();
    registered_ = false;
    for (Rail &r : rails_) {
      r.q.qp.reset();
      if (r.registered) r.dev->deregister_memory();
      r.registered = false;
    }
    // The next attach starts from the primary again.
    if (row_ != 0) std::swap(dev_, rails_[size_t(row_ - 1)].dev);
    row_ = 0;
    plan_ = wire::RailPlan{};
    stripe_round_ = 0;
    base_ = nullptr;
    window_ = Window::Quiet;
  }

  const std::atomic<uint64_t> *setup_retries() const override { return &setup_retries_; }
  bool links(std::vector<LinkInfo> &out) const override;

 protected:
  int row(uint32_t layer, uint32_t gate, uint32_t slot, uint64_t seq, uint64_t start_ns,
          Error &err) override;
  int batch(uint32_t index, uint32_t rows, uint64_t seq, uint64_t start_ns, Error &err) override;
  int big(uint32_t layer, uint64_t seq, const void *out, void *in, uint64_t bytes,
          uint64_t start_ns, Error &err) override;

 private:
  std::atomic<uint64_t> setup_retries_{0};  // attempts that recreated the QP (stats)
  // ---- set-up --------------------------------------------------------
  int setup_attempt(uint32_t attempt, bool &uc_only, bool &retry, Error &err);
  int warm_up(uint32_t attempt, bool &ok, Error &err);
  // How long a set-up exchange over a queue pair (warm-up, sample, ping)
  // waits for its messages.
  uint64_t warm_limit_ns() const {
    return tun_.warm_timeout_ns ? tun_.warm_timeout_ns : cfg_.gate_timeout_ns;
  }
  // How a pattern crossed link k each way (cross()).
  struct Crossing {
    bool waited = false;  // both directions completed within the limit
    bool got = false, sent = false, peer_got = false, peer_sent = false;
    std::string why;      // the wait's error when it did not complete
    uint64_t ns = 0;      // from our sends posted to both directions done
    bool ok() const { return got && sent && peer_got && peer_sent; }
  };
  // Moves `bytes` of a pattern each way over link k: receives posted,
  // RDMA_POSTED {attempt, their count} traded, sends (immediate
  // warm_tag(tag)), a wait of at most the warm-up limit, RDMA_WARM
  // verdicts traded. A lost or corrupted direction is not an error here:
  // `c` says what crossed; both ranks learn the same.
  int cross(int k, uint32_t attempt, uint32_t tag, uint64_t bytes, const char *step,
            Crossing &c, Error &err);
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
  // Link k: 0 the row link's queue pair (every gate), k > 0 the others
  // (striped big gates only). The row link is the primary unless the plan
  // moved the row gates to a rail (adopt_row_link): then link 0 and that
  // rail trade places, and user(k) gives a link's place in the user's
  // order (0 the primary, k rail k), which names and reports use.
  QpLink &link(int k) { return k == 0 ? qpl_ : rails_[size_t(k - 1)].q; }
  const QpLink &link(int k) const { return k == 0 ? qpl_ : rails_[size_t(k - 1)].q; }
  std::vector<Expect> &ring(int k) { return k == 0 ? ring_ : rails_[size_t(k - 1)].ring; }
  const Device &device(int k) const { return k == 0 ? *dev_ : *rails_[size_t(k - 1)].dev; }
  int user(int k) const { return k == 0 ? row_ : k == row_ ? 0 : k; }  // its own inverse
  void name_lost(int k) { lost_ |= 1u << user(k); }

  // Posts one receive per message of a `bytes` run at `dst` on link k
  // (split at its message size); tags from `tag(i)`.
  template <typename Tag>
  int post_run_recv(int k, uint8_t *dst, uint64_t bytes, Tag tag, const Op &op, Error &err) {
    QpLink &l = link(k);
    std::vector<Expect> &expect = ring(k);
    int rc = l.post_recvs(l.messages(bytes), [&](uint64_t i, RecvWork &w) {
      w.addr = dst + i * l.msg;
      w.bytes = l.piece(i, bytes);
      expect[w.wr_id % expect.size()] = {w.wr_id, w.bytes, tag(uint32_t(i))};
    }, err);
    return rc ? refused(k, rc, op, err) : DS4TP_OK;
  }
  template <typename Tag>
  int post_run_recv(uint8_t *dst, uint64_t bytes, Tag tag, const Op &op, Error &err) {
    return post_run_recv(0, dst, bytes, tag, op, err);
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
  // Link k's sends of a run that fits its send queue (a striped round, a
  // rail's sample): posted at once, no wait for room.
  template <typename Tag>
  int post_rail_send(int k, const uint8_t *src, uint64_t bytes, Tag tag, const Op &op,
                     Error &err) {
    QpLink &l = link(k);
    uint64_t done = 0;
    const uint64_t n = l.messages(bytes);
    if (n > l.send_room())  // the striped round is sized so this never is
      return err.set(DS4TP_EIO, "rdma {}{}: {} sends do not fit the send queue ({} free)",
                     op.str(), rail_name(k), n, l.send_room());
    int rc = l.post_sends(n, done, [&](uint64_t i, SendWork &s) {
      s.addr = src + i * l.msg;
      s.bytes = l.piece(i, bytes);
      s.imm = tag(uint32_t(i));
    }, err);
    return rc ? refused(k, rc, op, err) : DS4TP_OK;
  }
  // A post on link k refused: named in the error and in lost_links().
  int refused(int k, int rc, const Op &op, Error &err) {
    name_lost(k);
    return err.set(rc, "rdma {}{}: {}", op.str(), rail_name(k), err.message);
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
      if (int rc = qpl_.post_sends(n, done, fill, err)) return refused(0, rc, op, err);
    }
    return DS4TP_OK;
  }

  // ---- row window ----------------------------------------------------
  // Receives an armed window holds on link l: a row window, or a batch
  // gate and its prediction. Half the receive queue must hold them, the
  // other half the receives of the next shape, posted before the old
  // window drains.
  uint64_t armed_receives(const QpLink &l) const {
    const uint64_t msgs = l.messages(L_.vec_bytes);
    return std::max<uint64_t>(row_window_ * msgs, uint64_t(2) * L_.batch_rows * msgs);
  }
  bool rows_fit(const QpLink &l) const {
    return l.sdepth >= 1 && armed_receives(l) <= l.rdepth / 2;
  }
  // Rail r may carry the row gates: both ranks agreed to, and its queues
  // hold the windows (values both ranks share, so both judge alike).
  bool rows_may_move_to(int r) const { return rail_rows_ && rows_fit(link(r)); }
  // Row messages and a big gate's round from link 0's sizes.
  void size_row_link() {
    row_msgs_ = qpl_.messages(L_.vec_bytes);
    const uint32_t round_msgs = std::max(1u, std::min(qpl_.rdepth / 4, qpl_.sdepth));
    round_bytes_ = std::min<uint64_t>(uint64_t(round_msgs) * qpl_.msg, L_.big_staging / 2);
  }
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
  // With `rail_recv`, also until each rail k's receives reach
  // rail_recv[k - 1] and its sends all completed (a striped big gate).
  int wait_for(uint64_t want_recv, uint64_t want_send, const Op &op, Error &err,
               uint64_t idle_ns = 0, uint64_t meet_ns = 0, const uint64_t *rail_recv = nullptr);

  // The gate in progress's start_ns, for its first Waiter (wait_for or
  // barrier), which then reads no clock to begin; later waits of the gate
  // read their own. Zero outside a gate (set-up waits read their own too).
  uint64_t gate_start_ = 0;
  uint64_t take_gate_start() { return std::exchange(gate_start_, 0); }
  // Also starts the gate with no link named lost.
  struct GateStart {
    GateStart(uint64_t &slot, uint32_t &lost, uint64_t start_ns) : slot_(slot) {
      slot_ = start_ns;
      lost = 0;
    }
    ~GateStart() { slot_ = 0; }
    GateStart(const GateStart &) = delete;
    GateStart &operator=(const GateStart &) = delete;
    uint64_t &slot_;
  };
  int not_reached(const Op &op, uint64_t meet_ns, Error &err);
  // ", of them 1 receive(s) and 0 send(s) on rail 1 (...)" for the rails
  // that still owe, "" when none does (or none was waited on).
  std::string owing(const uint64_t *rail_recv);
  // Judges what a receive on link k carried against what its post expects.
  int expected(int k, const Completion &c, Error &err);
  // Polls link k once (QpLink::poll), its errors naming the rail.
  int poll_link(int k, Error &err);

  // ---- rails (rails.cpp) ---------------------------------------------
  // After the primary is up: each rail's queue pair, its warm-up (which
  // finds a crossed or dead cable), every link's rate and round trip, and
  // the leader's plan of shares, which the worker takes as it is.
  int attach_rails(Error &err);
  int attach_rail(int k, Error &err);
  // Crosses a sample over link k (cross()): `mbit` its rate, `ok`
  // whether both directions came intact (a bad link is not an error here:
  // err then names it and the lost direction).
  int sample_link(int k, uint32_t &mbit, bool &ok, Error &err);
  // The leader's plan from the measures, sent; the worker's, read.
  int trade_plan(const uint32_t *mbit, const uint64_t *rtt, Error &err);
  // Row and batch gates move to rail r: it trades places with link 0
  // (device, registration, queue pair, expectations, plan entries).
  void adopt_row_link(int r);
  // The bytes of a striped round, from the plan and every link's queues.
  uint64_t striped_round() const;
  // Waits (bounded by limit_ns) until link k's receives reach want_recv
  // and every link's sends completed.
  int wait_link(int k, uint64_t want_recv, const Op &op, uint64_t limit_ns, Error &err);
  // Pings over link k, the leader timing the shortest of a few round trips
  // (the worker's rtt_ns stays unset: it takes the leader's plan).
  int ping_link(int k, uint64_t limit_ns, uint64_t &rtt_ns, Error &err);
  // " on rail 2 (fv1 port 1 GID 1 (RoCE v2))" for a rail, "" for the
  // primary; link_name always names ("the primary (fv0 ...)", "rail 2 (...)").
  std::string link_name(int k) const;
  std::string rail_name(int k) const;
  uint32_t lost_links() const override { return lost_; }
  std::unique_ptr<lk::Link> remake_without(net::Fd &standby, uint32_t lost,
                                           std::vector<int> &kept) override;

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

  // Rails: each its own device (the slab registered there too), queue pair
  // and expectations; the plan splits big gates of kStripeMinBytes or more
  // across link 0 (the primary) and them, in rounds of stripe_round_.
  struct Rail {
    std::unique_ptr<Device> dev;
    QpLink q;
    std::vector<Expect> ring;
    bool registered = false;
    uint32_t rkey = 0;
  };
  std::vector<Rail> rails_;
  wire::RailPlan plan_;
  uint64_t stripe_round_ = 0;
  uint32_t lost_ = 0;  // lost_links(): named by the gate in progress or last failed,
                       // in the user's order
  bool rail_rows_ = false;  // both ranks may run row gates on a rail (Endpoint)
  int pinned_row_ = -1;     // the operator's row link (Endpoint::row_link)
  int row_ = 0;             // the user's index of link 0: the link row gates run on

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
