// The rdma pair link's bind: the slab registered, the queue pair, the
// RDMA_INFO/READY frames and the warm-up (pair_link.hpp).
#include "link/rdma/pair_link_impl.hpp"

namespace ds4tp::rdma {

using wire::GateHeader;
using wire::GateKind;

// ---------------------------------------------------------------------
// Set-up

int WindowLink::bind(uint8_t *base, const slab::Layout &layout, Error &err) {
  unbind();
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
    unbind();
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
    // Rails come up once the primary is (attach_rails retries a UC rail
    // itself; anything else failing there fails the attach).
    if (rc == DS4TP_OK && !rails_.empty()) rc = attach_rails(err);
    if (rc == DS4TP_OK) return DS4TP_OK;
    qpl_.qp.reset();
    if (!retry || a + 1 == attempts) {
      unbind();
      return rc;
    }
    setup_retries_.fetch_add(1, std::memory_order_relaxed);
    log_.warn("rdma: set-up attempt {} failed ({}); recreating the queue pair", a + 1,
              err.message);
    err.clear();
  }
  unbind();
  return err.set(DS4TP_EIO, "rdma: set-up failed");
}

int WindowLink::setup_attempt(uint32_t attempt, bool &uc_only, bool &retry, Error &err) {
  QpRequest req;
  req.uc_only = uc_only;
  req.send_depth = tun_.send_depth;
  req.recv_depth = tun_.recv_depth;
  req.max_msg = tun_.max_msg;
  if (int rc = dev_->create_qp(req, qpl_.qp, err)) return rc;
  reset_counters();

  wire::RdmaInfo mine = qpl_.qp->local_info();
  mine.attempt = attempt;
  mine.slab_addr = reinterpret_cast<uintptr_t>(base_);
  mine.slab_bytes = L_.total;
  mine.rkey = rkey_;
  wire::RdmaInfo peer;
  if (int rc = trade<wire::kRdmaInfoPayload>(wire::kFrameRdmaInfo, mine, peer,
                                             wire::encode_rdma_info, wire::decode_rdma_info, err))
    return rc;
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

  qpl_.msg = std::min({mine.max_msg, peer.max_msg, tun_.max_msg});
  qpl_.rdepth = std::min(mine.recv_depth, peer.recv_depth);
  qpl_.sdepth = std::min(mine.send_depth, peer.send_depth);
  row_window_ = std::max(3u, tun_.row_window);
  // Everything that follows is computed from values both ranks share, so
  // both make the same decisions.
  size_row_link();
  if (!rows_fit(qpl_))
    return err.set(DS4TP_EUNSUPPORTED,
                   "rdma: a receive queue depth of {} cannot hold twice {} receives (a {}-gate "
                   "window or two {}-row batch gates of {} messages per {} byte vector at a {} "
                   "byte message size); raise the maximum message size or the queue depth",
                   qpl_.rdepth, armed_receives(qpl_), row_window_, L_.batch_rows, row_msgs_,
                   L_.vec_bytes, qpl_.msg);
  ring_.assign(qpl_.rdepth + 1, Expect{});
  have_last_batch_ = false;

  if (int rc = qpl_.qp->connect(peer, err)) return rc;
  wire::RdmaReady ready{attempt};
  if (int rc = trade<wire::kRdmaReadyPayload>(wire::kFrameRdmaReady, ready, ready,
                                              wire::encode_rdma_ready, wire::decode_rdma_ready, err))
    return rc;
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
            qpl_.msg, row_msgs_, row_window_, qpl_.rdepth, qpl_.sdepth,
            staged_rows_ ? ", rows staged (consecutive gates share a slot)" : "");
  return DS4TP_OK;
}

// The pattern both ranks write and check: `rank`'s byte i (the primary's
// warm-up, where the tag is the attempt, as it has always been).
static uint8_t crossing_pattern(uint32_t attempt, uint32_t tag, int rank, uint64_t i) {
  const uint32_t seed = attempt * 13u + (tag == attempt ? 0u : tag * 29u);
  return uint8_t(i * 131u + uint64_t(rank) * 77u + seed + (i >> 8));
}

// RDMA_POSTED makes sure the peer's receives are posted before our sends
// (a UC send that finds none is lost, and some providers then drop that
// direction for good); RDMA_WARM tells each rank how its own direction
// went.
int WindowLink::cross(int k, uint32_t attempt, uint32_t tag, uint64_t bytes, const char *step,
                         Crossing &c, Error &err) {
  QpLink &l = link(k);
  uint8_t *in = base_ + L_.big_in;
  uint8_t *out = base_ + L_.big_out;
  for (uint64_t i = 0; i < bytes; i++) out[i] = crossing_pattern(attempt, tag, rank_, i);
  std::memset(in, 0, bytes);
  Op op;
  op.step = step;
  auto t = [tag](uint32_t) { return warm_tag(tag); };
  const uint32_t n = l.messages(bytes);
  if (int rc = post_run_recv(k, in, bytes, t, op, err)) return rc;
  wire::RdmaPosted posted{attempt, n};
  if (int rc = trade<wire::kRdmaPostedPayload>(wire::kFrameRdmaPosted, posted, posted,
                                               wire::encode_rdma_posted,
                                               wire::decode_rdma_posted, err))
    return rc;
  if (posted.attempt != attempt || posted.posted != n)
    return err.set(DS4TP_EPROTO,
                   "rdma: RDMA_POSTED names attempt {} with {} receives; expected attempt {} "
                   "with {}",
                   posted.attempt, posted.posted, attempt, n);
  const uint64_t t0 = now_ns();
  if (int rc = post_rail_send(k, out, bytes, t, op, err)) return rc;
  // Wait (a lost message is not an error here) for both directions.
  Error werr;
  const int wrc = wait_link(k, l.recv_posted, op, warm_limit_ns(), werr);
  c.ns = std::max<uint64_t>(now_ns() - t0, 1000);
  if (wrc == DS4TP_EPEERCLOSED) return err.set(wrc, "{}", werr.message);
  c.waited = wrc == DS4TP_OK;
  c.why = wrc == DS4TP_OK ? "" : werr.message;
  c.got = c.waited;
  for (uint64_t i = 0; c.got && i < bytes; i++)
    c.got = in[i] == crossing_pattern(attempt, tag, 1 - rank_, i);
  c.sent = l.send_done == l.send_posted;
  wire::RdmaWarm mine{attempt,
                      (c.got ? wire::kWarmReceived : 0u) | (c.sent ? wire::kWarmSent : 0u),
                      uint32_t(bytes)};
  wire::RdmaWarm peer;
  if (int rc = trade<wire::kRdmaWarmPayload>(wire::kFrameRdmaWarm, mine, peer,
                                             wire::encode_rdma_warm, wire::decode_rdma_warm, err))
    return rc;
  if (peer.attempt != attempt || peer.bytes != uint32_t(bytes))
    return err.set(DS4TP_EPROTO,
                   "rdma: RDMA_WARM names attempt {} with {} bytes; expected attempt {} with {}",
                   peer.attempt, peer.bytes, attempt, bytes);
  c.peer_got = (peer.flags & wire::kWarmReceived) != 0;
  c.peer_sent = (peer.flags & wire::kWarmSent) != 0;
  return DS4TP_OK;
}

// One full-size message each way.
int WindowLink::warm_up(uint32_t attempt, bool &ok, Error &err) {
  Crossing c;
  if (int rc = cross(0, attempt, attempt, std::min<uint64_t>(qpl_.msg, L_.big_staging / 2),
                     "warm-up", c, err))
    return rc;
  ok = c.ok();
  if (!ok)
    err.set(DS4TP_EIO,
            "rdma: warm-up attempt {} failed: peer -> this rank {} ({}), this rank -> peer {}; "
            "{}",
            attempt + 1, c.got ? "worked" : "lost the message",
            c.waited ? (c.got ? "intact" : "corrupted") : c.why,
            c.peer_got ? "worked" : "lost the message",
            (c.sent && c.peer_sent) ? "both sends completed" : "a send failed to complete");
  return DS4TP_OK;
}

}  // namespace ds4tp::rdma
