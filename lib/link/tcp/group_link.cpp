#include "link/tcp/group_link.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "talk/peer_state.hpp"
#include "link/tcp/gate_stream.hpp"

namespace ds4tp::tcp {
namespace {

bool raised(const void *ctx) {
  return static_cast<const std::atomic<bool> *>(ctx)->load(std::memory_order_acquire);
}

}  // namespace

Mesh::Mesh(std::vector<net::Fd> fds, int rank, size_t chunk, uint64_t timeout_ns,
           const os::WaitPolicy &policy, bool adaptive, std::vector<int> names)
    : fds_(std::move(fds)), rank_(rank), n_(int(fds_.size())), timeout_(timeout_ns),
      staging_(size_t(n_) * (kRoom + chunk)), chunk_(chunk), policy_(policy),
      names_(std::move(names)) {
  os::set_spin(policy_, budget_, policy.spin_ns, adaptive);  // keeps policy.yield_ns
  policy_.clock_every = 8;  // each idle round is a few system calls already
  for (auto &f : fds_)
    if (f.valid()) net::set_nonblocking(f.get());
}

int Mesh::step(Step &s, Error &err) {
  if (pair_ != nullptr && s.gate != nullptr && s.watch == nullptr) return gate_step(s, err);
  return run(s, err);
}

int Mesh::run(Step &s, Error &err) {
  if (aborted()) return err.set(DS4TP_EFAILED, "group failed: marked failed");
  // A pair's gate: its landings, deadlines, watch and End (pair/gates.cpp).
  const bool gate = s.gate != nullptr;
  const uint64_t progress_ns = s.progress_ns != 0 ? s.progress_ns : timeout_;
  Peer peers[kMaxMembers];
  int pending = 0;
  // Every rank is heard at every step, even in a rooted one: a rank
  // without bytes sends its header alone, so no step completes on a rank
  // while another has given up on the group.
  for (int r = 0; r < n_; r++) {
    s.views[r] = nullptr;
    if (r == rank_) continue;
    peers[r].send = peers[r].recv = true;
    peers[r].body_out = s.out_to(r);
    peers[r].body_in = s.in_from(r);
    if (s.sizes_out != nullptr) s.encode(s, peers[r].body_out, peers[r].hdr);
    pending += 2;
  }
  if (s.src != nullptr) s.views[rank_] = s.src[rank_];
  // The waiter (and its clock read) starts at the first round that does
  // not finish the step: a step whose bytes are there at once (the usual
  // case) never reads the clock. A gate's waiter starts at the gate's own
  // clock read, and a gate's passes that begin right after a read date
  // their progress at it.
  os::PeerWatch own;
  os::PeerWatch *watch = s.watch != nullptr ? s.watch : &own;
  if (s.watch == nullptr) own.watch_flag(raised, &aborted_);
  std::optional<os::Waiter> w;
  uint64_t deadline = 0, began = 0;
  bool heard = false;  // some bytes came from a peer
  // Every member is in the step (each sent some of it), or a gate's peer
  // is known to be in it: the arrival wait gives way to the progress one.
  bool met = false;
  s.seen_ns = 0;
  while (pending > 0) {
    bool moved = false;
    const bool heard_before = heard;
    for (int r = 0; r < n_; r++) {
      Peer &p = peers[r];
      if (p.send) {  // first: the peer may be waiting for these bytes already
        if (int rc = pump_send(s, s.src ? s.src[r] : nullptr, r, p, moved, err))
          return fail(rc, r);
        if (!p.send) pending--;
      }
      if (p.recv) {
        if (int rc = pump_recv(s, r, p, moved, err)) return fail(rc, r);
        heard = heard || p.got > 0;
        if (!p.recv) {
          pending--;
          if (s.sizes_in != nullptr ? p.body_in > 0 : s.root < 0 || r == s.root)
            s.views[r] = s.dst != nullptr ? s.dst[r] : landing(r);
        }
      }
    }
    const bool first_heard = heard && !heard_before;
    const bool met_before = met;
    if (!met) {
      met = true;
      for (int r = 0; r < n_ && met; r++)
        met = r == rank_ || peers[r].got > 0 ||
              (s.in_call != nullptr && s.in_call(s.in_call_ctx, r));
    }
    if (moved) count_moved();
    if (pending == 0) {
      if (gate && first_heard) s.seen_ns = link::kSeenAtEnd;
      if (gate && w) w->progress_at_last_read();  // no clock read: the stats read the end
      break;
    }
    if (!w) {
      w.emplace(policy_, watch, 0, s.start_ns);
      if (gate && moved) w->progress_at_last_read();
      began = s.start_ns != 0 ? s.start_ns : w->now();
    } else if (moved) {
      w->progress();
    }
    if (gate && first_heard) s.seen_ns = w->last_progress();
    if (moved || deadline == 0 || met != met_before)  // every member in: progress from now
      deadline = s.arrival_ns == 0 || met
                     ? os::deadline_after(met != met_before && !moved ? w->now() : w->last_progress(),
                                          progress_ns)
                     : os::deadline_after(began, s.arrival_ns);
    if (moved) continue;
    // A gate's peer whose heartbeats say it entered this gate (or passed
    // it) has sent its bytes: their loss is told by the progress deadline.
    if (gate && !met && s.peer != nullptr && s.peer->peer_in_gate(s.gate->kind, s.gate->seq)) {
      met = true;
      deadline = os::deadline_after(w->now(), progress_ns);
    }
    int perr = 0;
    const int rc = w->idle(deadline, [&](uint64_t left) { perr = block(peers, left); });
    if (perr == 0 && rc == DS4TP_OK) continue;
    int late = 0;  // the first member the step still waits on
    while (late < n_ && !peers[late].send && !peers[late].recv) late++;
    if (gate) {
      using How = link::End::How;
      const Peer &p = peers[late];
      s.end = {perr != 0 ? How::kIo : rc == DS4TP_ETIMEDOUT ? How::kTimeout : How::kWatch, perr,
               met, p.sent, p.got};
      return fail(perr != 0 ? DS4TP_EIO : rc == DS4TP_ETIMEDOUT ? rc : watch->code(), late);
    }
    if (perr != 0) return fail(err.set(DS4TP_EIO, "poll: {}", std::strerror(perr)));
    if (rc == DS4TP_ETIMEDOUT && s.arrival_ns != 0 && !met) {
      while (late < n_ && (late == rank_ || peers[late].got > 0 ||
                           (s.in_call != nullptr && s.in_call(s.in_call_ctx, late))))
        late++;
      return fail(err.set(DS4TP_ETIMEDOUT, "step {}: rank {} did not reach it within {} ms "
                          "(peer_arrival_timeout_ms; it was alive all along)",
                          s.number, name(late), s.arrival_ns / 1'000'000),
                  late);
    }
    if (rc == DS4TP_ETIMEDOUT) {
      return fail(err.set(DS4TP_ETIMEDOUT, "step {}: rank {} made no progress within {} ms",
                          s.number, name(late), progress_ns / 1'000'000),
                  late);
    }
    if (rc != DS4TP_OK) return err.set(DS4TP_EFAILED, "group failed: marked failed");
  }
  return DS4TP_OK;
}

void Mesh::abort(int, int) {
  aborted_.store(true, std::memory_order_release);
  for (auto &f : fds_)
    if (f.valid()) ::shutdown(f.get(), SHUT_RDWR);
}

// Sleeps in poll() on the links still moving, in slices so the abort flag
// is read while blocked. An errno value when poll() failed, else 0.
int Mesh::block(const Peer *peers, uint64_t left_ns) {
  pollfd pf[kMaxMembers];
  int np = 0;
  for (int r = 0; r < n_; r++) {
    const Peer &p = peers[r];
    if (p.send || p.recv)
      pf[np++] = {fds_[r].get(), short((p.send ? POLLOUT : 0) | (p.recv ? POLLIN : 0)), 0};
  }
  const uint64_t ms = left_ns / 1'000'000 + 1;
  const int slice = ms < uint64_t(link::kLivenessSliceMs) ? int(ms) : link::kLivenessSliceMs;
  if (poll(pf, nfds_t(np), slice) < 0 && errno != EINTR) return errno;
  return 0;
}

// Reads what rank r's socket holds of this step: header and body in one
// call, into the header room and the landing after it.
int Mesh::pump_recv(Step &s, int r, Peer &p, bool &moved, Error &err) {
  const size_t total = s.size + p.body_in;
  uint8_t *body = s.dst != nullptr ? s.dst[r] : landing(r);
  uint8_t *hdr = (s.dst == nullptr || s.room ? body : landing(r)) - s.size;
  while (p.recv) {
    const ssize_t k = net::recv_stream(fds_[r].get(), hdr, s.size, body, p.got, total);
    if (k == 0) return lost(s, r, p, 0, err);
    if (k < 0) {
      if (retry_later(errno)) return DS4TP_OK;
      return lost(s, r, p, errno, err);
    }
    const bool hdr_done = p.got < s.size && p.got + size_t(k) >= s.size;
    p.got += size_t(k);
    moved = true;
    if (hdr_done)
      if (int rc = s.gate != nullptr ? wire::check_peer_gate_header(*s.gate, hdr, err)
                                     : s.check(hdr, s, p.body_in, name(r), err))
        return rc;
    if (p.got == total) p.recv = false;
  }
  return DS4TP_OK;
}

int Mesh::pump_send(Step &s, const uint8_t *src, int r, Peer &p, bool &moved,
                    Error &err) {
  const size_t total = s.size + p.body_out;
  while (p.send) {
    const uint8_t *hdr = s.sizes_out != nullptr ? p.hdr : s.header_for(p.body_out);
    const ssize_t k = net::send_stream(fds_[r].get(), hdr, s.size, src, p.sent, total);
    if (k < 0) {
      if (retry_later(errno)) return DS4TP_OK;
      return lost(s, r, p, errno, err);
    }
    p.sent += size_t(k);
    moved = true;
    if (p.sent == total) p.send = false;
  }
  return DS4TP_OK;
}

int Mesh::lost(Step &s, int r, const Peer &p, int e, Error &err) {
  if (s.gate != nullptr) {
    using How = link::End::How;
    s.end = {e == 0 ? How::kClosed : How::kIo, e, p.got > 0, p.sent, p.got};
    return e == 0 || e == EPIPE || e == ECONNRESET || e == ENOTCONN ? DS4TP_EPEERCLOSED
                                                                   : DS4TP_EIO;
  }
  if (e == 0)
    return err.set(DS4TP_EPEERCLOSED, "rank {} closed its connection (step {})", name(r),
                   s.number);
  return err.set(DS4TP_EPEERCLOSED, "rank {}: {} (step {})", name(r), std::strerror(e), s.number);
}

}  // namespace ds4tp::tcp
