#include "link/rdma/pair_link_impl.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <poll.h>
#include <sys/socket.h>

#include "common/clock.hpp"
#include "multipath/rail_share.hpp"
#include "wire/gate_header.hpp"
#include "talk/peer_state.hpp"

namespace ds4tp::rdma {

// ---------------------------------------------------------------------
// Completions

int WindowLink::expected(int k, const Completion &c, Error &err) {
  const std::vector<Expect> &expect = ring(k);
  const Expect &e = expect[c.wr_id % expect.size()];
  if (!c.has_imm || c.imm != e.imm)
    return err.set(DS4TP_EDESYNC,
                   "expected the peer's {} but its {} landed: the ranks called different "
                   "gates, or a message was lost on the connection",
                   describe_tag(e.imm),
                   c.has_imm ? describe_tag(c.imm) : std::string("message without a tag"));
  if (c.bytes != e.bytes)
    return err.set(DS4TP_EDESYNC, "the peer's {} carried {} bytes but {} were expected",
                   describe_tag(e.imm), c.bytes, e.bytes);
  return DS4TP_OK;
}

int WindowLink::poll_link(int k, Error &err) {
  const int n = link(k).poll([&](const Completion &c) { return expected(k, c, err); }, err);
  if (n < 0 && user(k) > 0) return err.set(n, "{}: {}", rail_name(k).substr(1), err.message);
  return n;
}

int WindowLink::wait_for(uint64_t want_recv, uint64_t want_send, const Op &op, Error &err,
                            uint64_t idle_ns, uint64_t meet_ns, const uint64_t *rail_recv) {
  // A big gate's waits have its own deadline, as over tcp and shm.
  if (idle_ns == 0)
    idle_ns = op.kind == uint16_t(GateKind::Big) ? cfg_.big_gate_timeout_ns : cfg_.gate_timeout_ns;
  const talk::PeerState *ps = cfg_.peer;
  bool met = ps == nullptr || meet_ns <= idle_ns;
  os::Waiter w(policy_, &watch_, 0, take_gate_start());
  uint64_t deadline = os::deadline_after(w.last_progress(), met ? idle_ns : meet_ns);
  const int links = rail_recv != nullptr ? 1 + int(rails_.size()) : 1;
  // Receives and sends still owed, over every link waited on.
  // Rails not made yet (attach makes them one by one) owe nothing.
  auto owed = [&](uint64_t &recv, uint64_t &send) {
    recv = want_recv > qpl_.recv_done ? want_recv - qpl_.recv_done : 0;
    send = want_send > qpl_.send_done ? want_send - qpl_.send_done : 0;
    for (int k = 1; k < links; k++) {
      const QpLink &l = link(k);
      if (!l.qp) continue;
      recv += rail_recv[k - 1] > l.recv_done ? rail_recv[k - 1] - l.recv_done : 0;
      send += l.send_posted - l.send_done;
    }
  };
  auto received = [&] {
    uint64_t n = 0;
    for (int k = 0; k < links; k++) n += link(k).recv_done;
    return n;
  };
  const uint64_t recv_at_start = received();
  // lost_links(): the rails still owing once nothing moved for half the
  // deadline while the primary owes nothing (a primary owing too may as
  // well mean a stalled peer). Also when the peer leaves first: the rank
  // whose rail went quiet may be the one that follows. (Each gate starts
  // with none named: GateStart.)
  // A wait on link 0 alone (a row, batch or small big gate) names it
  // where the peer's heartbeats put it in this gate: its message was
  // posted and never came. (Link 0 a rail: the pair goes on without it.)
  auto name_stuck_rails = [&] {
    const bool primary_owes = want_recv > qpl_.recv_done || want_send > qpl_.send_done;
    if (!met || now_ns() - w.last_progress() < idle_ns / 2) return;
    if (links == 1 && primary_owes && op.kind != 0 && ps != nullptr &&
        ps->peer_in_gate(op.kind, op.seq))
      name_lost(0);
    if (primary_owes) return;
    for (int k = 1; k < links; k++) {
      const QpLink &l = link(k);
      if (l.qp && (rail_recv[k - 1] > l.recv_done || l.send_posted > l.send_done))
        name_lost(k);
    }
  };
  for (;;) {
    uint64_t recv_left = 0, send_left = 0;
    owed(recv_left, send_left);
    if (recv_left == 0 && send_left == 0) return DS4TP_OK;
    int n = 0;
    for (int k = 0; k < links && n >= 0; k++) {
      if (!link(k).qp) continue;
      const int got = poll_link(k, err);
      if (got < 0) name_lost(k);
      n = got < 0 ? got : n + got;
    }
    if (n < 0) return err.set(n, "rdma {}: {}", op.str(), err.message);
    if (n > 0) {
      w.progress();
      met = met || received() > recv_at_start;
      deadline = met ? w.last_progress() + idle_ns : deadline;
      continue;
    }
    // A peer that entered or completed this gate (its heartbeats say so)
    // is there: from now on, a lost message is told by the progress deadline.
    if (!met && ps->peer_in_gate(op.kind, op.seq)) {
      met = true;
      deadline = w.now() + idle_ns;
    }
    // Past the spin window: nap briefly, waking at once when either
    // socket reports the peer gone.
    int rc = w.idle(deadline, [&](uint64_t left) { watch_.nap(std::min(left, kNapNs)); });
    if (rc == DS4TP_EPEERCLOSED && watch_.silent())
      return err.set(DS4TP_ETIMEDOUT,
                     "rdma {}: {} (this rank waited for {} more receive(s) and {} send "
                     "completion(s))",
                     op.str(), watch_.why(), recv_left, send_left);
    if (rc == DS4TP_EPEERCLOSED) {
      name_stuck_rails();
      return err.set(DS4TP_EPEERCLOSED,
                     "rdma {}: the peer closed the {} connection while this rank waited for "
                     "{} more receive(s) and {} send completion(s); the peer process has "
                     "probably exited",
                     op.str(), watch_.socket_name() ? watch_.socket_name() : "data", recv_left,
                     send_left);
    }
    if (rc == DS4TP_ETIMEDOUT && !met) return not_reached(op, meet_ns, err);
    if (rc == DS4TP_ETIMEDOUT) {
      name_stuck_rails();
      return err.set(DS4TP_ETIMEDOUT,
                     "rdma {} timed out: nothing completed for {} ms while {} receive(s) and "
                     "{} send completion(s) were outstanding{}; the peer is stalled or not at "
                     "this gate, or a message was lost on the connection",
                     op.str(), idle_ns / 1000000, recv_left, send_left, owing(rail_recv));
    }
  }
}

int WindowLink::not_reached(const Op &op, uint64_t meet_ns, Error &err) {
  return err.set(DS4TP_ETIMEDOUT,
                 "rdma {}: {}, but it never reached this gate in {} ms "
                 "(peer_arrival_timeout_ms, at least the gate's progress deadline)",
                 op.str(), cfg_.peer->where_peer_is(), meet_ns / 1000000);
}

// ---------------------------------------------------------------------
// Shape changes

int WindowLink::barrier(const GateHeader &mine, bool big, const Op &op, Error &err) {
  uint8_t sb[wire::kGateHeaderBytes], rb[wire::kGateHeaderBytes];
  wire::encode_gate_header(mine, sb);
  const int fd = data_.get();
  const uint64_t meet_ns = cfg_.arrival(big);
  os::Waiter w(policy_, &watch_, 0, take_gate_start());
  const uint64_t deadline = os::deadline_after(w.last_progress(), meet_ns);
  size_t sent = 0, got = 0;
  while (sent < sizeof sb || got < sizeof rb) {
    const size_t before = sent + got;
    int e = net::send_until_blocked(fd, sb, sizeof sb, sent);
    if (e == 0 && got < sizeof rb) {
      ssize_t n = ::recv(fd, rb + got, sizeof rb - got, MSG_DONTWAIT);
      if (n == 0)
        return err.set(DS4TP_EPEERCLOSED,
                       "rdma {}: the peer closed the data connection at the header barrier",
                       op.str());
      if (n > 0) got += size_t(n);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) e = errno;
    }
    if (e != 0)
      return err.set(e == EPIPE || e == ECONNRESET ? DS4TP_EPEERCLOSED : DS4TP_EIO,
                     "rdma {}: the data connection failed at the header barrier: {}", op.str(),
                     std::strerror(e));
    if (sent + got != before) {
      w.progress();
      continue;
    }
    const short events = short((got < sizeof rb ? POLLIN : 0) | (sent < sizeof sb ? POLLOUT : 0));
    int rc = w.idle(deadline, [&](uint64_t) {
      pollfd p{fd, events, 0};
      // In slices, so the peer's liveness verdict is read while blocked.
      ::poll(&p, 1, std::min(ms_left(deadline), kLivenessSliceMs));
    });
    if (rc == DS4TP_EPEERCLOSED && watch_.silent())
      return err.set(DS4TP_ETIMEDOUT, "rdma {}: {} (at the header barrier)", op.str(),
                     watch_.why());
    if (rc == DS4TP_EPEERCLOSED)
      return err.set(DS4TP_EPEERCLOSED, "rdma {}: the peer {} at the header barrier", op.str(),
                     watch_.why());
    if (rc == DS4TP_ETIMEDOUT && cfg_.peer != nullptr && got == 0)
      return not_reached(op, meet_ns, err);
    if (rc == DS4TP_ETIMEDOUT)
      return err.set(rc,
                     "rdma {}: the peer did not reach this gate within {} ms (header barrier on "
                     "the data connection)",
                     op.str(), meet_ns / 1000000);
  }
  return wire::check_peer_gate_header(mine, rb, err);
}

int WindowLink::drain(uint64_t upto, const Op &op, Error &err) {
  uint64_t n = upto - qpl_.recv_done;
  for (uint64_t i = 0; i < n; i++) {
    Expect &e = ring_[(qpl_.recv_done + i) % ring_.size()];
    e.bytes = 0;
    e.imm = drain_tag(uint32_t(i));
  }
  if (int rc = post_sends(uint32_t(n), [](uint32_t k, SendWork &s) { s.imm = drain_tag(k); }, op,
                          err))
    return rc;
  if (int rc = wait_for(upto, qpl_.send_posted, op, err)) return rc;
  window_ = Window::Quiet;
  return DS4TP_OK;
}

// ---------------------------------------------------------------------
// Gates

int WindowLink::row(uint32_t layer, uint32_t gate, uint32_t slot, uint64_t seq,
                        uint64_t start_ns, Error &err) {
  GateStart start(gate_start_, lost_, start_ns);
  Op op{uint16_t(GateKind::Row), layer, gate, seq, ""};
  if (window_ != Window::Rows || seq != row_next_) {
    if (window_ == Window::Rows) {
      // Seqs rise by one (the pair checks); anything else is a bug here.
      return err.set(DS4TP_EDESYNC, "rdma {}: the receive window expects seq {}", op.str(),
                     row_next_);
    }
    GateHeader h{uint16_t(GateKind::Row), layer, gate, seq, L_.vec_bytes};
    uint64_t first_idx = 0;
    int rc = change_shape(h, op, [&] {
      first_idx = qpl_.recv_posted;
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
  if (int rc = wait_for(want, qpl_.send_posted, op, err, 0, cfg_.arrival(false))) return rc;
  if (staged_rows_)
    std::memcpy(base_ + L_.in_vec(slot), row_dst(seq), L_.vec_bytes);
  row_next_ = seq + 1;
  return DS4TP_OK;
}

int WindowLink::batch(uint32_t index, uint32_t rows, uint64_t seq, uint64_t start_ns,
                              Error &err) {
  GateStart start(gate_start_, lost_, start_ns);
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
    int rc = change_shape(h, op, [&] {
      first_idx = qpl_.recv_posted;
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
    pred_idx_ = qpl_.recv_posted;
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
  return wait_for(want, qpl_.send_posted, op, err, 0, cfg_.arrival(false));
}

int WindowLink::big(uint32_t layer, uint64_t seq, const void *outp, void *inp,
                            uint64_t bytes, uint64_t start_ns, Error &err) {
  GateStart start(gate_start_, lost_, start_ns);
  Op op{uint16_t(GateKind::Big), layer, 0, seq, ""};
  auto *out = static_cast<const uint8_t *>(outp);
  auto *in = static_cast<uint8_t *>(inp);
  auto inside = [&](const void *p) {
    auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base_);
    return a >= b && a - b <= L_.total && bytes <= L_.total - (a - b);
  };
  // Caller memory inside the registered slab moves without staging copies;
  // anything else goes through the big out/in staging halves. The round
  // size is the same either way: the peer, whose buffers may lie
  // elsewhere, posts and credits rounds of the same size.
  const bool direct = bytes > 0 && inside(out) && inside(in);
  // Staged rounds go through both staging regions: a buffer there would be
  // overwritten under its copy.
  auto in_staging = [&](const void *p) {
    return slab::ranges_overlap(p, bytes, base_ + L_.big_in, L_.big_staging) ||
           slab::ranges_overlap(p, bytes, base_ + L_.big_out, L_.big_staging);
  };
  if (!direct && (in_staging(out) || in_staging(in)))
    return err.set(DS4TP_EINVAL,
                   "rdma {}: a buffer overlaps the slab's big staging regions, which this gate "
                   "goes through (the other buffer is outside the slab); pass other memory, or "
                   "both buffers inside the slab",
                   op.str());
  // A striped gate splits each round across every link by the plan's
  // shares (rail_share.hpp); rounds, credits and staging stay as they are.
  const bool striped = !rails_.empty() && bytes >= kStripeMinBytes;
  const int links = striped ? 1 + int(rails_.size()) : 1;
  const uint64_t H = striped ? stripe_round_ : round_bytes_;
  const uint64_t rounds = bytes == 0 ? 0 : (bytes + H - 1) / H;
  if (rounds > 0xFFFFFFFFull)
    return err.set(DS4TP_EINVAL, "rdma {}: {} bytes need more than 2^32 rounds", op.str(), bytes);
  auto round_len = [&](uint64_t r) { return std::min(H, bytes - r * H); };
  auto part = [&](uint64_t r, int k, uint64_t &off, uint64_t &len) {
    off = 0;
    len = round_len(r);
    if (striped) stripe_range(plan_, len, k, off, len);
  };
  auto rdst = [&](uint64_t r) {
    return direct ? in + r * H : base_ + L_.big_in + (r & 1) * (L_.big_staging / 2);
  };
  auto ssrc = [&](uint64_t r) {
    return direct ? const_cast<uint8_t *>(out) + r * H
                  : base_ + L_.big_out + (r & 1) * (L_.big_staging / 2);
  };
  // Each link's ring index after each round's receives, for the two
  // rounds in flight.
  uint64_t round_end[2][wire::kMaxLinks] = {};
  auto post_round = [&](uint64_t r) -> int {
    const uint32_t rr = uint32_t(r);
    for (int k = 0; k < links; k++) {
      uint64_t off = 0, len = 0;
      part(r, k, off, len);
      if (int rc = post_run_recv(k, rdst(r) + off, len,
                                 [rr](uint32_t m) { return big_tag(rr, m); }, op, err))
        return rc;
      round_end[r & 1][k] = link(k).recv_posted;
    }
    return int(DS4TP_OK);
  };

  GateHeader h{uint16_t(GateKind::Big), layer, 0, seq, bytes};
  int rc = change_shape(h, op, [&] {
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
      if ((rc = net::write_all(data_.get(), cb, sizeof cb, now_ns() + cfg_.big_gate_timeout_ns,
                               "rdma big gate credit", err)))
        return rc;
    }
    if (r > 0) {
      GateHeader want{uint16_t(GateKind::Big), layer, uint32_t(r), seq, bytes};
      uint8_t cb[wire::kGateHeaderBytes];
      if ((rc = net::read_exact(data_.get(), cb, sizeof cb, now_ns() + cfg_.big_gate_timeout_ns,
                                "rdma big gate credit", err)))
        return rc;
      GateHeader got;
      if ((rc = wire::decode_gate_header(cb, sizeof cb, got, err))) return rc;
      if ((rc = wire::check_gate_header(want, got, err))) return rc;
    }
    const uint64_t len = round_len(r);
    uint8_t *src = ssrc(r);
    if (!direct) std::memcpy(src, out + r * H, len);
    const uint32_t rr = uint32_t(r);
    auto tag = [rr](uint32_t m) { return big_tag(rr, m); };
    for (int k = links - 1; k >= 1; k--) {  // the rails first: they carry the most
      uint64_t off = 0, part_len = 0;
      part(r, k, off, part_len);
      if ((rc = post_rail_send(k, src + off, part_len, tag, op, err))) return rc;
    }
    uint64_t off0 = 0, len0 = 0;
    part(r, 0, off0, len0);
    if ((rc = post_run_send(src + off0, len0, tag, op, err))) return rc;
    if ((rc = wait_for(round_end[r & 1][0], qpl_.send_posted, op, err, 0, 0,
                       striped ? &round_end[r & 1][1] : nullptr)))
      return rc;
    if (!direct) std::memcpy(in + r * H, rdst(r), len);
  }
  return DS4TP_OK;
}

std::unique_ptr<link::Link> make_pair_link(Endpoint ep, const DataConfig &cfg,
                                               const Tuning &tuning,
                                               const slab::Schedule &schedule,
                                               const Logger &log) {
  return std::make_unique<WindowLink>(std::move(ep), cfg, tuning, schedule, log);
}

}  // namespace ds4tp::rdma
