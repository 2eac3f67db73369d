#include "transport/rdma/rdma_transport.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <poll.h>
#include <sys/socket.h>

#include "common/clock.hpp"
#include "os/wait.hpp"
#include "wire/gate_header.hpp"

namespace ds4tp::rdma {

uint32_t row_tag(uint64_t seq, uint32_t chunk) {
  return kTagRow << 28 | uint32_t(seq & 0xFFFFFu) << 8 | (chunk & 0xFFu);
}
uint32_t batch_tag(uint64_t seq, uint32_t message) {
  return kTagBatch << 28 | uint32_t(seq & 0xFFFFu) << 12 | (message & 0xFFFu);
}
uint32_t big_tag(uint32_t round, uint32_t message) {
  return kTagBig << 28 | (round & 0xFFFu) << 16 | (message & 0xFFFFu);
}
uint32_t drain_tag(uint32_t message) { return kTagDrain << 28 | (message & 0x0FFFFFFFu); }
uint32_t warm_tag(uint32_t attempt) { return kTagWarm << 28 | (attempt & 0x0FFFFFFFu); }

std::string describe_tag(uint32_t imm) {
  switch (imm >> 28) {
    case kTagRow:
      return fmt::format("row gate seq ...{} (low 20 bits) message {}", (imm >> 8) & 0xFFFFF,
                         imm & 0xFF);
    case kTagBatch:
      return fmt::format("batch gate seq ...{} (low 16 bits) message {}", (imm >> 12) & 0xFFFF,
                         imm & 0xFFF);
    case kTagBig:
      return fmt::format("big gate round {} message {}", (imm >> 16) & 0xFFF, imm & 0xFFFF);
    case kTagDrain: return fmt::format("drain message {}", imm & 0x0FFFFFFF);
    case kTagWarm: return fmt::format("warm-up of attempt {}", imm & 0x0FFFFFFF);
    default: return fmt::format("unknown message (immediate 0x{:08x})", imm);
  }
}

namespace {

using wire::GateHeader;
using wire::GateKind;

constexpr uint64_t kSendBit = 1ull << 63;
constexpr int kPostBatch = 32;           // work requests per post call (stack array)
constexpr int kPollBatch = 32;           // completions per poll call
constexpr uint64_t kNapNs = 50000;          // one nap after the spin window
constexpr uint64_t kGoneGraceNs = 2000000;  // completions still drained after peer EOF

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
    policy_.spin_ns = cfg_.spin_ns;
    policy_.grace_ns = kGoneGraceNs;
  }

  ~RdmaTransport() override { detach(); }

  const char *name() const override { return "rdma"; }

  int attach(uint8_t *base, const slab::Layout &layout, Error &err) override;
  void detach() override {
    qp_.reset();
    if (registered_) dev_->deregister_memory();
    registered_ = false;
    base_ = nullptr;
    window_ = Window::Quiet;
  }

  int gate(uint32_t layer, uint32_t gate, uint32_t slot, uint64_t seq, Error &err) override;
  int batch_gate(uint32_t index, uint32_t rows, uint64_t seq, Error &err) override;
  int big_gate(uint32_t layer, uint64_t seq, const void *out, void *in, uint64_t bytes,
               Error &err) override;

 private:
  // ---- set-up --------------------------------------------------------
  int setup_attempt(uint32_t attempt, bool &uc_only, bool &retry, Error &err);
  int warm_up(uint32_t attempt, bool &ok, Error &err);
  int frame_send(uint32_t type, const uint8_t *p, size_t n, Error &err) {
    return link_->send(type, p, n, now_ns() + tun_.setup_timeout_ns, err);
  }
  int frame_recv(uint32_t type, uint8_t *p, size_t n, Error &err) {
    return link_->recv(type, p, n, now_ns() + tun_.setup_timeout_ns, err);
  }
  void reset_counters() {
    recv_posted_ = recv_done_ = send_posted_ = send_done_ = 0;
    window_ = Window::Quiet;
  }

  // ---- posting -------------------------------------------------------
  // Posts one receive per message of a `bytes` run at `dst` (split at the
  // message size); tags from `tag(i)`.
  template <typename Tag>
  int post_run_recv(uint8_t *dst, uint64_t bytes, Tag tag, const Op &op, Error &err) {
    uint32_t n = messages(bytes);
    if (recv_posted_ - recv_done_ + n > depth_)
      return err.set(DS4TP_EIO,
                     "rdma {}: {} more receives would exceed the queue depth {} ({} posted)",
                     op.str(), n, depth_, recv_posted_ - recv_done_);
    RecvWork w[kPostBatch];
    uint32_t k = 0;
    while (k < n) {
      int m = 0;
      for (; m < kPostBatch && k < n; m++, k++) {
        uint64_t off = uint64_t(k) * msg_;
        uint32_t len = uint32_t(std::min<uint64_t>(msg_, bytes - off));
        uint64_t id = recv_posted_ + uint64_t(m);
        w[m] = {id, dst + off, len};
        ring_[id % ring_.size()] = {id, len, tag(k)};
      }
      if (int rc = qp_->post_recv(w, size_t(m), err)) return posting_failed(op, rc, err);
      recv_posted_ += uint64_t(m);
    }
    return DS4TP_OK;
  }

  template <typename Tag>
  int post_run_send(const uint8_t *src, uint64_t bytes, Tag tag, const Op &op, Error &err) {
    uint32_t n = messages(bytes);
    return post_sends(n, [&](uint32_t k, SendWork &s) {
      uint64_t off = uint64_t(k) * msg_;
      s.addr = src + off;
      s.bytes = uint32_t(std::min<uint64_t>(msg_, bytes - off));
      s.imm = tag(k);
    }, op, err);
  }

  // Posts `n` sends filled by `fill(k, work)`, waiting for send completions
  // whenever the send queue is full.
  template <typename Fill>
  int post_sends(uint32_t n, Fill fill, const Op &op, Error &err) {
    SendWork w[kPostBatch];
    uint32_t k = 0;
    while (k < n) {
      uint64_t room = sdepth_ - (send_posted_ - send_done_);
      if (room == 0) {
        if (int rc = wait_for(recv_done_, send_done_ + 1, op, err)) return rc;
        continue;
      }
      int m = 0;
      for (; m < kPostBatch && k < n && uint64_t(m) < room; m++, k++) {
        w[m] = SendWork{};
        w[m].wr_id = kSendBit | (send_posted_ + uint64_t(m));
        fill(k, w[m]);
      }
      if (int rc = qp_->post_send(w, size_t(m), err)) return posting_failed(op, rc, err);
      send_posted_ += uint64_t(m);
    }
    return DS4TP_OK;
  }

  uint32_t messages(uint64_t bytes) const {
    return bytes == 0 ? 0 : uint32_t((bytes + msg_ - 1) / msg_);
  }

  int posting_failed(const Op &op, int, Error &err) {
    std::string why = err.message;
    return err.set(DS4TP_EIO, "rdma {}: posting work requests failed: {}", op.str(), why);
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
  // the same header within `meet_ns`.
  int barrier(const GateHeader &mine, uint64_t meet_ns, const Op &op, Error &err);
  // Turns the receives posted before index `upto` into drain receives,
  // sends as many drain messages and waits until both sides consumed them.
  int drain(uint64_t upto, const Op &op, Error &err);
  // Makes this gate's receives (posted by `post`) known to the peer: from
  // Quiet, post then barrier; from an armed window, barrier, post, drain.
  template <typename Post>
  int change_shape(const GateHeader &h, uint64_t meet_ns, const Op &op, Post post,
                   Error &err) {
    if (window_ == Window::Quiet) {
      if (int rc = post()) return rc;
      return barrier(h, meet_ns, op, err);
    }
    if (int rc = barrier(h, meet_ns, op, err)) return rc;
    uint64_t old_end = recv_posted_;
    if (int rc = post()) return rc;
    Op d = op;
    d.step = "drain";
    return drain(old_end, d, err);
  }

  // ---- completions ---------------------------------------------------
  // Polls until `want_recv` receives and `want_send` sends completed.
  int wait_for(uint64_t want_recv, uint64_t want_send, const Op &op, Error &err,
               uint64_t idle_ns = 0);
  int handle(const Completion &c, const Op &op, Error &err);

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

  std::unique_ptr<QueuePair> qp_;
  bool registered_ = false;
  uint32_t rkey_ = 0;
  uint8_t *base_ = nullptr;
  slab::Layout L_;
  uint32_t msg_ = 0;      // negotiated message size
  uint32_t depth_ = 0;    // receives either rank may have posted (min of both)
  uint32_t sdepth_ = 0;   // sends in flight (min of both)
  uint32_t row_msgs_ = 0;  // messages per row vector
  uint32_t row_window_ = 0;
  bool staged_rows_ = false;  // consecutive row gates can share a slot
  uint64_t round_bytes_ = 0;  // big gate round through staging
  uint32_t direct_round_msgs_ = 0;  // big gate round straight from/to the slab

  std::vector<Expect> ring_;
  uint64_t recv_posted_ = 0, recv_done_ = 0, send_posted_ = 0, send_done_ = 0;

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

// ---------------------------------------------------------------------
// Set-up

int RdmaTransport::attach(uint8_t *base, const slab::Layout &layout, Error &err) {
  detach();
  base_ = base;
  L_ = layout;
  uint32_t rkey = 0;
  if (int rc = dev_->register_memory(base, layout.total, rkey, err)) {
    std::string why = err.message;
    base_ = nullptr;
    return err.set(rc, "rdma: registering the {} byte slab with {} failed: {}", layout.total,
                   dev_->describe(), why);
  }
  registered_ = true;
  rkey_ = rkey;
  // The peer can send gate s+1 as soon as our data for s arrived, while the
  // engine may still read in[slot(s)]. When consecutive gates share a slot
  // (one gate per token, or a step of 0) that would overwrite it, so such
  // schedules land rows in two alternating staging vectors instead.
  staged_rows_ = false;
  const uint64_t period = std::min<uint64_t>(sched_.per_token ? sched_.per_token : sched_.slots,
                                             4096);
  for (uint64_t s = 1; s <= period && !staged_rows_; s++)
    staged_rows_ = slab::slot_for_seq(sched_, s) == slab::slot_for_seq(sched_, s + 1);
  if (staged_rows_ && 2 * layout.vec_stride > layout.big_staging) {
    detach();
    return err.set(DS4TP_EUNSUPPORTED,
                   "rdma: this schedule fires consecutive gates on one slot, so rows are "
                   "staged in the big-gate region, which holds {} bytes but needs {}",
                   layout.big_staging, 2 * layout.vec_stride);
  }
  bool uc_only = false;
  uint32_t attempts = std::max(1u, std::min(tun_.setup_attempts, wire::kMaxSetupAttempt + 1));
  for (uint32_t a = 0; a < attempts; a++) {
    bool retry = false;
    int rc = setup_attempt(a, uc_only, retry, err);
    if (rc == DS4TP_OK) return DS4TP_OK;
    qp_.reset();
    if (!retry || a + 1 == attempts) {
      detach();
      return rc;
    }
    log_.warn("rdma: set-up attempt {} failed ({}); recreating the queue pair", a + 1,
              err.message);
    err.clear();
  }
  detach();
  return err.set(DS4TP_EIO, "rdma: set-up failed");
}

int RdmaTransport::setup_attempt(uint32_t attempt, bool &uc_only, bool &retry, Error &err) {
  QpRequest req;
  req.uc_only = uc_only;
  req.send_depth = tun_.send_depth;
  req.recv_depth = tun_.recv_depth;
  req.max_msg = tun_.max_msg;
  if (int rc = dev_->create_qp(req, qp_, err)) return rc;
  reset_counters();

  wire::RdmaInfo mine = qp_->local_info();
  mine.attempt = attempt;
  mine.slab_addr = reinterpret_cast<uintptr_t>(base_);
  mine.slab_bytes = L_.total;
  mine.rkey = rkey_;
  uint8_t buf[wire::kRdmaInfoPayload];
  wire::encode_rdma_info(mine, buf);
  if (int rc = frame_send(wire::kFrameRdmaInfo, buf, sizeof buf, err)) return rc;
  if (int rc = frame_recv(wire::kFrameRdmaInfo, buf, sizeof buf, err)) return rc;
  wire::RdmaInfo peer;
  if (int rc = wire::decode_rdma_info(buf, sizeof buf, peer, err)) return rc;
  if (peer.attempt != attempt)
    return err.set(DS4TP_EPROTO, "rdma: this rank is at set-up attempt {} but the peer at {}",
                   attempt, peer.attempt);
  if (peer.qp_type != mine.qp_type) {
    // One side could not make RC: both sides see the same pair of types
    // and recreate as UC together.
    uc_only = true;
    retry = true;
    return err.set(DS4TP_EUNSUPPORTED,
                   "rdma: this rank made an {} queue pair but the peer an {} one",
                   wire::qp_type_name(mine.qp_type), wire::qp_type_name(peer.qp_type));
  }
  if (peer.link_layer != mine.link_layer && peer.link_layer != wire::kLinkUnspecified &&
      mine.link_layer != wire::kLinkUnspecified)
    return err.set(DS4TP_EUNSUPPORTED,
                   "rdma: link layers differ (this rank {}, the peer {}; 1 = InfiniBand, "
                   "2 = Ethernet): the ports cannot talk to each other",
                   mine.link_layer, peer.link_layer);

  msg_ = std::min({mine.max_msg, peer.max_msg, tun_.max_msg});
  depth_ = std::min(mine.recv_depth, peer.recv_depth);
  sdepth_ = std::min(mine.send_depth, peer.send_depth);
  row_msgs_ = messages(L_.vec_bytes);
  row_window_ = std::max(3u, tun_.row_window);
  // Everything that follows is computed from values both ranks share, so
  // both make the same decisions.
  // Half the receive queue holds whatever window is armed (row window, or a
  // batch gate plus its prediction), the other half the receives of the
  // next shape, posted before the old window drains.
  const uint64_t armed = std::max<uint64_t>(uint64_t(row_window_) * row_msgs_,
                                            uint64_t(2) * L_.batch_rows * row_msgs_);
  if (armed > depth_ / 2 || sdepth_ < 1)
    return err.set(DS4TP_EUNSUPPORTED,
                   "rdma: a receive queue depth of {} cannot hold twice {} receives (a {}-gate "
                   "window or two {}-row batch gates of {} messages per {} byte vector at a {} "
                   "byte message size); raise the maximum message size or the queue depth",
                   depth_, armed, row_window_, L_.batch_rows, row_msgs_, L_.vec_bytes, msg_);
  direct_round_msgs_ = std::max(1u, std::min(depth_ / 4, sdepth_));
  round_bytes_ = std::min<uint64_t>(uint64_t(direct_round_msgs_) * msg_, L_.big_staging / 2);
  ring_.assign(depth_ + 1, Expect{});
  have_last_batch_ = false;

  if (int rc = qp_->connect(peer, err)) return rc;
  wire::RdmaReady ready{attempt};
  uint8_t rb[wire::kRdmaReadyPayload];
  wire::encode_rdma_ready(ready, rb);
  if (int rc = frame_send(wire::kFrameRdmaReady, rb, sizeof rb, err)) return rc;
  if (int rc = frame_recv(wire::kFrameRdmaReady, rb, sizeof rb, err)) return rc;
  if (int rc = wire::decode_rdma_ready(rb, sizeof rb, ready, err)) return rc;
  if (ready.attempt != attempt)
    return err.set(DS4TP_EPROTO, "rdma: RDMA_READY for attempt {} while at attempt {}",
                   ready.attempt, attempt);

  bool ok = false;
  if (int rc = warm_up(attempt, ok, err)) return rc;
  if (!ok) {
    retry = mine.qp_type == wire::kQpUc;
    return DS4TP_EIO;  // err names the directions that failed
  }
  reset_counters();
  log_.info("rdma: {} {} queue pair up (peer QP {}, attempt {}): {} byte messages, {} per "
            "vector, row window {}, queue depths {}/{}{}",
            dev_->describe(), wire::qp_type_name(mine.qp_type), peer.qp_num, attempt + 1,
            msg_, row_msgs_, row_window_, depth_, sdepth_,
            staged_rows_ ? ", rows staged (consecutive gates share a slot)" : "");
  return DS4TP_OK;
}

// One full-size message each way. RDMA_POSTED makes sure the peer's
// receive is posted before our send (a UC send that finds none is lost,
// and some providers then drop that direction for good); RDMA_WARM tells
// each rank whether its own direction worked.
int RdmaTransport::warm_up(uint32_t attempt, bool &ok, Error &err) {
  const uint32_t bytes = uint32_t(std::min<uint64_t>(msg_, L_.big_staging / 2));
  uint8_t *in = base_ + L_.big_in;
  uint8_t *out = base_ + L_.big_out;
  auto pattern = [attempt](int rank, uint32_t i) {
    return uint8_t(i * 131u + uint32_t(rank) * 77u + attempt * 13u + (i >> 8));
  };
  for (uint32_t i = 0; i < bytes; i++) out[i] = pattern(rank_, i);
  std::memset(in, 0, bytes);

  Op op;
  op.step = "warm-up";
  if (int rc = post_run_recv(in, bytes, [attempt](uint32_t) { return warm_tag(attempt); }, op,
                             err))
    return rc;
  wire::RdmaPosted posted{attempt, 1};
  uint8_t pb[wire::kRdmaPostedPayload];
  wire::encode_rdma_posted(posted, pb);
  if (int rc = frame_send(wire::kFrameRdmaPosted, pb, sizeof pb, err)) return rc;
  if (int rc = frame_recv(wire::kFrameRdmaPosted, pb, sizeof pb, err)) return rc;
  if (int rc = wire::decode_rdma_posted(pb, sizeof pb, posted, err)) return rc;
  if (posted.attempt != attempt || posted.posted != 1)
    return err.set(DS4TP_EPROTO,
                   "rdma: RDMA_POSTED names attempt {} with {} receives; expected attempt {} "
                   "with 1",
                   posted.attempt, posted.posted, attempt);
  if (int rc = post_run_send(out, bytes, [attempt](uint32_t) { return warm_tag(attempt); }, op,
                             err))
    return rc;

  // Poll (without failing on a lost message) until both completions or
  // the warm-up deadline.
  uint64_t limit = tun_.warm_timeout_ns ? tun_.warm_timeout_ns : cfg_.gate_timeout_ns;
  Error werr;
  int wrc = wait_for(recv_posted_, send_posted_, op, werr, limit);
  bool got = recv_done_ == recv_posted_ && wrc == DS4TP_OK;
  if (got) {
    for (uint32_t i = 0; i < bytes; i++)
      if (in[i] != pattern(1 - rank_, i)) {
        got = false;
        break;
      }
  }
  bool sent = send_done_ == send_posted_;
  if (wrc == DS4TP_EPEERCLOSED) return err.set(wrc, "{}", werr.message);

  wire::RdmaWarm mine{attempt, (got ? wire::kWarmReceived : 0u) | (sent ? wire::kWarmSent : 0u),
                      bytes};
  uint8_t wb[wire::kRdmaWarmPayload];
  wire::encode_rdma_warm(mine, wb);
  if (int rc = frame_send(wire::kFrameRdmaWarm, wb, sizeof wb, err)) return rc;
  if (int rc = frame_recv(wire::kFrameRdmaWarm, wb, sizeof wb, err)) return rc;
  wire::RdmaWarm peer;
  if (int rc = wire::decode_rdma_warm(wb, sizeof wb, peer, err)) return rc;
  if (peer.attempt != attempt || peer.bytes != bytes)
    return err.set(DS4TP_EPROTO,
                   "rdma: RDMA_WARM names attempt {} with {} bytes; expected attempt {} with {}",
                   peer.attempt, peer.bytes, attempt, bytes);
  bool peer_got = peer.flags & wire::kWarmReceived;
  bool peer_sent = peer.flags & wire::kWarmSent;
  ok = got && sent && peer_got && peer_sent;
  if (!ok)
    err.set(DS4TP_EIO,
            "rdma: warm-up attempt {} failed: peer -> this rank {} ({}), this rank -> peer {}; "
            "{}",
            attempt + 1, got ? "worked" : "lost the message",
            wrc == DS4TP_OK ? (got ? "intact" : "corrupted") : werr.message,
            peer_got ? "worked" : "lost the message",
            (sent && peer_sent) ? "both sends completed"
                                : "a send failed to complete");
  return DS4TP_OK;
}

// ---------------------------------------------------------------------
// Completions

int RdmaTransport::handle(const Completion &c, const Op &op, Error &err) {
  if (c.wr_id & kSendBit) {
    if (c.status != 0)
      return err.set(DS4TP_EIO,
                     "rdma {}: a send work request failed: {} (status {}, vendor error 0x{:x}); "
                     "the queue pair is unusable",
                     op.str(), qp_->status_text(c.status), c.status, c.vendor_err);
    if (c.wr_id != (kSendBit | send_done_))
      return err.set(DS4TP_EIO, "rdma {}: send completion {} arrived while {} was next",
                     op.str(), c.wr_id & ~kSendBit, send_done_);
    send_done_++;
    return DS4TP_OK;
  }
  if (recv_done_ == recv_posted_ || c.wr_id != recv_done_)
    return err.set(DS4TP_EIO, "rdma {}: receive completion {} arrived while {} was next ({} posted)",
                   op.str(), c.wr_id, recv_done_, recv_posted_);
  if (c.status != 0)
    return err.set(DS4TP_EIO,
                   "rdma {}: a receive work request failed: {} (status {}, vendor error 0x{:x}); "
                   "the queue pair is unusable",
                   op.str(), qp_->status_text(c.status), c.status, c.vendor_err);
  const Expect &e = ring_[recv_done_ % ring_.size()];
  if (!c.has_imm || c.imm != e.imm)
    return err.set(DS4TP_EDESYNC,
                   "rdma {}: expected the peer's {} but its {} landed: the ranks called "
                   "different gates, or a message was lost on the connection",
                   op.str(), describe_tag(e.imm),
                   c.has_imm ? describe_tag(c.imm) : std::string("message without a tag"));
  if (c.bytes != e.bytes)
    return err.set(DS4TP_EDESYNC,
                   "rdma {}: the peer's {} carried {} bytes but {} were expected",
                   op.str(), describe_tag(e.imm), c.bytes, e.bytes);
  recv_done_++;
  return DS4TP_OK;
}

int RdmaTransport::wait_for(uint64_t want_recv, uint64_t want_send, const Op &op, Error &err,
                            uint64_t idle_ns) {
  if (idle_ns == 0) idle_ns = cfg_.gate_timeout_ns;
  Completion wc[kPollBatch];
  os::Waiter w(policy_, &watch_);
  uint64_t deadline = w.last_progress() + idle_ns;
  for (;;) {
    if (recv_done_ >= want_recv && send_done_ >= want_send) return DS4TP_OK;
    int n = qp_->poll(wc, kPollBatch, err);
    if (n < 0) {
      std::string why = err.message;
      return err.set(DS4TP_EIO, "rdma {}: polling the completion queue failed: {}", op.str(),
                     why);
    }
    if (n > 0) {
      for (int i = 0; i < n; i++)
        if (int rc = handle(wc[i], op, err)) return rc;
      w.progress();
      deadline = w.last_progress() + idle_ns;
      continue;
    }
    // Past the spin window: nap briefly, waking at once when either
    // socket reports the peer gone.
    int rc = w.idle(deadline, [&](uint64_t left) { watch_.nap(std::min(left, kNapNs)); });
    if (rc == DS4TP_EPEERCLOSED)
      return err.set(DS4TP_EPEERCLOSED,
                     "rdma {}: the peer closed the {} connection while this rank waited for "
                     "{} more receive(s) and {} send completion(s); the peer process has "
                     "probably exited",
                     op.str(), watch_.socket_name() ? watch_.socket_name() : "data",
                     want_recv > recv_done_ ? want_recv - recv_done_ : 0,
                     want_send > send_done_ ? want_send - send_done_ : 0);
    if (rc == DS4TP_ETIMEDOUT)
      return err.set(DS4TP_ETIMEDOUT,
                     "rdma {} timed out: nothing completed for {} ms while {} receive(s) and "
                     "{} send completion(s) were outstanding; the peer is stalled or not at "
                     "this gate, or a message was lost on the connection",
                     op.str(), idle_ns / 1000000,
                     want_recv > recv_done_ ? want_recv - recv_done_ : 0,
                     want_send > send_done_ ? want_send - send_done_ : 0);
  }
}

// ---------------------------------------------------------------------
// Shape changes

int RdmaTransport::barrier(const GateHeader &mine, uint64_t meet_ns, const Op &op, Error &err) {
  uint8_t sb[wire::kGateHeaderBytes], rb[wire::kGateHeaderBytes];
  wire::encode_gate_header(mine, sb);
  uint64_t deadline = now_ns() + meet_ns;
  int rc = net::write_all(data_.get(), sb, sizeof sb, deadline, "rdma barrier", err);
  if (rc == DS4TP_OK)
    rc = net::read_exact(data_.get(), rb, sizeof rb, deadline, "rdma barrier", err);
  if (rc == DS4TP_ETIMEDOUT)
    return err.set(rc,
                   "rdma {}: the peer did not reach this gate within {} ms (header barrier on "
                   "the data connection)",
                   op.str(), meet_ns / 1000000);
  if (rc != DS4TP_OK) {
    std::string why = err.message;
    return err.set(rc, "rdma {}: {}", op.str(), why);
  }
  GateHeader peer;
  if ((rc = wire::decode_gate_header(rb, sizeof rb, peer, err))) return rc;
  return wire::check_gate_header(mine, peer, err);
}

int RdmaTransport::drain(uint64_t upto, const Op &op, Error &err) {
  uint64_t n = upto - recv_done_;
  for (uint64_t i = 0; i < n; i++) {
    Expect &e = ring_[(recv_done_ + i) % ring_.size()];
    e.bytes = 0;
    e.imm = drain_tag(uint32_t(i));
  }
  if (int rc = post_sends(uint32_t(n), [](uint32_t k, SendWork &s) { s.imm = drain_tag(k); }, op,
                          err))
    return rc;
  if (int rc = wait_for(upto, send_posted_, op, err)) return rc;
  window_ = Window::Quiet;
  return DS4TP_OK;
}

// ---------------------------------------------------------------------
// Gates

int RdmaTransport::gate(uint32_t layer, uint32_t gate, uint32_t slot, uint64_t seq, Error &err) {
  Op op{uint16_t(GateKind::Row), layer, gate, seq, ""};
  if (window_ != Window::Rows || seq != row_next_) {
    if (window_ == Window::Rows) {
      // Seqs rise by one (the pair checks); anything else is a bug here.
      return err.set(DS4TP_EDESYNC, "rdma {}: the receive window expects seq {}", op.str(),
                     row_next_);
    }
    GateHeader h{uint16_t(GateKind::Row), layer, gate, seq, L_.vec_bytes};
    uint64_t first_idx = 0;
    int rc = change_shape(h, cfg_.gate_timeout_ns, op, [&] {
      first_idx = recv_posted_;
      for (uint64_t s = seq; s < seq + row_window_; s++)
        if (int r = post_row(s, op, err)) return r;
      return int(DS4TP_OK);
    }, err);
    if (rc) return rc;
    window_ = Window::Rows;
    row_first_seq_ = seq;
    row_first_idx_ = first_idx;
    row_posted_ = seq + row_window_ - 1;
    row_next_ = seq;
  }
  // Our data out; then keep the window full. With a window of 3 or more the
  // receive for seq+1 was already posted before this send, which is what
  // the peer needs (it can send seq+1 only after our seq arrived).
  const uint8_t *src = base_ + L_.out_vec(slot);
  if (int rc = post_run_send(src, L_.vec_bytes, [seq](uint32_t k) { return row_tag(seq, k); },
                             op, err))
    return rc;
  while (row_posted_ < seq + row_window_ - 1)
    if (int rc = post_row(++row_posted_, op, err)) return rc;
  uint64_t want = row_first_idx_ + (seq - row_first_seq_ + 1) * row_msgs_;
  if (int rc = wait_for(want, send_posted_, op, err)) return rc;
  if (staged_rows_)
    std::memcpy(base_ + L_.in_vec(slot), row_dst(seq), L_.vec_bytes);
  row_next_ = seq + 1;
  return DS4TP_OK;
}

int RdmaTransport::batch_gate(uint32_t index, uint32_t rows, uint64_t seq, Error &err) {
  Op op{uint16_t(GateKind::Batch), index, rows, seq, ""};
  const uint64_t vec = L_.vec_bytes;
  auto post_gate = [&](uint32_t idx, uint32_t nrows, uint64_t s) -> int {
    uint8_t *dst = base_ + L_.batch_in_gate(idx);
    for (uint32_t r = 0; r < nrows; r++) {
      uint32_t first = r * row_msgs_;
      if (int rc = post_run_recv(dst + r * L_.vec_stride, vec,
                                 [s, first](uint32_t k) { return batch_tag(s, first + k); }, op,
                                 err))
        return rc;
    }
    return int(DS4TP_OK);
  };
  uint64_t first_idx = 0;
  if (window_ == Window::Batch && index == pred_index_ && rows == pred_rows_ &&
      seq == pred_seq_) {
    first_idx = pred_idx_;  // posted by the previous batch gate
  } else {
    GateHeader h{uint16_t(GateKind::Batch), index, rows, seq,
                 uint64_t(rows - 1) * L_.vec_stride + vec};
    int rc = change_shape(h, cfg_.gate_timeout_ns, op, [&] {
      first_idx = recv_posted_;
      return post_gate(index, rows, seq);
    }, err);
    if (rc) return rc;
  }
  const uint64_t want = first_idx + uint64_t(rows) * row_msgs_;
  // Predict the next gate of the verify block and post its receives before
  // our data leaves: the peer can only send that gate after this one's data
  // arrived. A stride of 0 would land on rows the engine is about to read.
  window_ = Window::Quiet;
  int64_t stride = have_last_batch_ ? int64_t(index) - int64_t(last_batch_index_) : 1;
  int64_t next = int64_t(index) + stride;
  have_last_batch_ = true;
  last_batch_index_ = index;
  if (tun_.predict_batches && stride != 0 && next >= 0 && next < int64_t(L_.batch_gates)) {
    pred_index_ = uint32_t(next);
    pred_rows_ = rows;
    pred_seq_ = seq + 1;
    pred_idx_ = recv_posted_;
    if (int rc = post_gate(pred_index_, rows, pred_seq_)) return rc;
    window_ = Window::Batch;
  }
  const uint8_t *src = base_ + L_.batch_out_gate(index);
  for (uint32_t r = 0; r < rows; r++) {
    uint32_t first = r * row_msgs_;
    if (int rc = post_run_send(src + r * L_.vec_stride, vec,
                               [seq, first](uint32_t k) { return batch_tag(seq, first + k); },
                               op, err))
      return rc;
  }
  return wait_for(want, send_posted_, op, err);
}

int RdmaTransport::big_gate(uint32_t layer, uint64_t seq, const void *outp, void *inp,
                            uint64_t bytes, Error &err) {
  Op op{uint16_t(GateKind::Big), layer, 0, seq, ""};
  auto *out = static_cast<const uint8_t *>(outp);
  auto *in = static_cast<uint8_t *>(inp);
  auto inside = [&](const void *p) {
    auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base_);
    return a >= b && a - b <= L_.total && bytes <= L_.total - (a - b);
  };
  // Caller memory inside the registered slab moves without staging copies;
  // anything else goes through the big out/in staging halves.
  const bool direct = bytes > 0 && inside(out) && inside(in);
  const uint64_t H = direct ? uint64_t(direct_round_msgs_) * msg_ : round_bytes_;
  const uint64_t rounds = bytes == 0 ? 0 : (bytes + H - 1) / H;
  if (rounds > 0xFFFFFFFFull)
    return err.set(DS4TP_EINVAL, "rdma {}: {} bytes need more than 2^32 rounds", op.str(), bytes);
  auto round_len = [&](uint64_t r) { return std::min(H, bytes - r * H); };
  auto rdst = [&](uint64_t r) {
    return direct ? in + r * H : base_ + L_.big_in + (r & 1) * (L_.big_staging / 2);
  };
  auto ssrc = [&](uint64_t r) {
    return direct ? const_cast<uint8_t *>(out) + r * H
                  : base_ + L_.big_out + (r & 1) * (L_.big_staging / 2);
  };
  // Ring index after each round's receives, for the two rounds in flight.
  uint64_t round_end[2] = {0, 0};
  auto post_round = [&](uint64_t r) -> int {
    uint32_t rr = uint32_t(r);
    int rc = post_run_recv(rdst(r), round_len(r), [rr](uint32_t k) { return big_tag(rr, k); },
                           op, err);
    round_end[r & 1] = recv_posted_;
    return rc;
  };

  GateHeader h{uint16_t(GateKind::Big), layer, 0, seq, bytes};
  int rc = change_shape(h, cfg_.big_gate_timeout_ns, op, [&] {
    return rounds > 0 ? post_round(0) : int(DS4TP_OK);
  }, err);
  if (rc) return rc;
  window_ = Window::Quiet;

  for (uint64_t r = 0; r < rounds; r++) {
    if (r + 1 < rounds) {
      // Round r+1's receives go up now and the peer hears so at once, so
      // it can send r+1 as soon as it finished r.
      if ((rc = post_round(r + 1))) return rc;
      GateHeader credit{uint16_t(GateKind::Big), layer, uint32_t(r + 1), seq, bytes};
      uint8_t cb[wire::kGateHeaderBytes];
      wire::encode_gate_header(credit, cb);
      if ((rc = net::write_all(data_.get(), cb, sizeof cb, now_ns() + cfg_.gate_timeout_ns,
                               "rdma big gate credit", err)))
        return rc;
    }
    if (r > 0) {
      GateHeader want{uint16_t(GateKind::Big), layer, uint32_t(r), seq, bytes};
      uint8_t cb[wire::kGateHeaderBytes];
      if ((rc = net::read_exact(data_.get(), cb, sizeof cb, now_ns() + cfg_.gate_timeout_ns,
                                "rdma big gate credit", err)))
        return rc;
      GateHeader got;
      if ((rc = wire::decode_gate_header(cb, sizeof cb, got, err))) return rc;
      if ((rc = wire::check_gate_header(want, got, err))) return rc;
    }
    const uint64_t len = round_len(r);
    uint8_t *src = ssrc(r);
    if (!direct) std::memcpy(src, out + r * H, len);
    uint32_t rr = uint32_t(r);
    if ((rc = post_run_send(src, len, [rr](uint32_t k) { return big_tag(rr, k); }, op, err)))
      return rc;
    if ((rc = wait_for(round_end[r & 1], send_posted_, op, err))) return rc;
    if (!direct) std::memcpy(in + r * H, rdst(r), len);
  }
  return DS4TP_OK;
}

}  // namespace

std::unique_ptr<Transport> make_rdma_transport(Endpoint ep, const DataConfig &cfg,
                                               const Tuning &tuning,
                                               const slab::Schedule &schedule,
                                               const Logger &log) {
  return std::make_unique<RdmaTransport>(std::move(ep), cfg, tuning, schedule, log);
}

}  // namespace ds4tp::rdma
