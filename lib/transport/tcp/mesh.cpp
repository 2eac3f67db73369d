#include "transport/tcp/mesh.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "talk/peer_state.hpp"
#include "transport/tcp/gate_stream.hpp"
#include "transport/transport.hpp"

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

int Mesh::step(const StepHeader &h, int root, const uint8_t *const *src, const void **views,
               Error &err) {
  if (aborted()) return err.set(DS4TP_EFAILED, "group failed: marked failed");
  transport::GateStep *const g = h.gate;
  Peer peers[kMaxPeers];
  int pending = 0;
  // Every rank is heard at every step, even in a rooted one: a rank
  // without bytes sends its header alone, so no step completes on a rank
  // while another has given up on the group.
  for (int r = 0; r < n_; r++) {
    views[r] = nullptr;
    if (r == rank_) continue;
    peers[r].send = peers[r].recv = true;
    peers[r].body_out = src != nullptr && src[r] != nullptr ? h.body : 0;
    peers[r].body_in = root < 0 || r == root ? h.body : 0;
    pending += 2;
  }
  if (src != nullptr) views[rank_] = src[rank_];
  // The waiter (and its clock read) starts at the first round that does
  // not finish the step: a step whose bytes are there at once (the usual
  // case) never reads the clock. A gate's waiter starts at the gate's own
  // clock read, and a gate's passes that begin right after a read date
  // their progress at it.
  os::PeerWatch own;
  os::PeerWatch *watch = g != nullptr ? g->watch : &own;
  if (g == nullptr) own.watch_flag(raised, &aborted_);
  std::optional<os::Waiter> w;
  uint64_t deadline = 0;
  bool heard = false;  // some bytes came from a peer (a gate's arrival wait ends)
  bool met = false;    // heard, or a gate's peer is known to be in it
  if (g != nullptr) g->seen_ns = 0;
  while (pending > 0) {
    bool moved = false;
    const bool heard_before = heard;
    for (int r = 0; r < n_; r++) {
      Peer &p = peers[r];
      if (p.send) {  // first: the peer may be waiting for these bytes already
        if (int rc = pump_send(h, src ? src[r] : nullptr, r, p, moved, err)) return fail(rc, r);
        if (!p.send) pending--;
      }
      if (p.recv) {
        if (int rc = pump_recv(h, r, p, moved, err)) return fail(rc, r);
        heard = heard || p.got > 0;
        if (!p.recv) {
          pending--;
          if (root < 0 || r == root) views[r] = g != nullptr ? g->dst[r] : landing(r);
        }
      }
    }
    const bool first_heard = heard && !heard_before;
    met = met || heard;
    if (moved) count_moved();
    if (pending == 0) {
      if (g != nullptr && first_heard) g->seen_ns = Transport::kSeenAtEnd;
      if (g != nullptr && w) w->progress_at_last_read();  // no clock read: the stats read the end
      break;
    }
    if (!w) {
      w.emplace(policy_, watch, 0, g != nullptr ? g->start_ns : 0);
      if (g != nullptr && moved) w->progress_at_last_read();
    } else if (moved) {
      w->progress();
    }
    if (g != nullptr && first_heard) g->seen_ns = w->last_progress();
    if (moved || deadline == 0)
      deadline = g == nullptr ? os::deadline_after(w->last_progress(), timeout_)
                 : met        ? os::deadline_after(w->last_progress(), g->progress_ns)
                              : os::deadline_after(g->start_ns, g->meet_ns);
    if (moved) continue;
    // A gate's peer whose heartbeats say it entered this gate (or passed
    // it) has sent its bytes: their loss is told by the progress deadline.
    if (g != nullptr && !met && g->peer != nullptr &&
        g->peer->peer_in_gate(g->mine->kind, g->mine->seq)) {
      met = true;
      deadline = os::deadline_after(w->now(), g->progress_ns);
    }
    int perr = 0;
    const int rc = w->idle(deadline, [&](uint64_t left) { perr = block(peers, left); });
    if (perr == 0 && rc == DS4TP_OK) continue;
    int late = 0;  // the first member the step still waits on
    while (late < n_ && !peers[late].send && !peers[late].recv) late++;
    if (g != nullptr) {
      using How = transport::StepEnd::How;
      const Peer &p = peers[late];
      g->end = {perr != 0 ? How::kIo : rc == DS4TP_ETIMEDOUT ? How::kTimeout : How::kWatch, perr,
                met, p.sent, p.got};
      return fail(perr != 0 ? DS4TP_EIO : rc == DS4TP_ETIMEDOUT ? rc : watch->code(), late);
    }
    if (perr != 0) return fail(err.set(DS4TP_EIO, "poll: {}", std::strerror(perr)));
    if (rc == DS4TP_ETIMEDOUT) {
      return fail(err.set(DS4TP_ETIMEDOUT, "step {}: rank {} made no progress within {} ms",
                          h.step, name(late), timeout_ / 1'000'000),
                  late);
    }
    if (rc != DS4TP_OK) return err.set(DS4TP_EFAILED, "group failed: marked failed");
  }
  return DS4TP_OK;
}

void Mesh::abort() {
  aborted_.store(true, std::memory_order_release);
  for (auto &f : fds_)
    if (f.valid()) ::shutdown(f.get(), SHUT_RDWR);
}

// Sleeps in poll() on the links still moving, in slices so the abort flag
// is read while blocked. An errno value when poll() failed, else 0.
int Mesh::block(const Peer *peers, uint64_t left_ns) {
  pollfd pf[kMaxPeers];
  int np = 0;
  for (int r = 0; r < n_; r++) {
    const Peer &p = peers[r];
    if (p.send || p.recv)
      pf[np++] = {fds_[r].get(), short((p.send ? POLLOUT : 0) | (p.recv ? POLLIN : 0)), 0};
  }
  const uint64_t ms = left_ns / 1'000'000 + 1;
  const int slice = ms < uint64_t(kLivenessSliceMs) ? int(ms) : kLivenessSliceMs;
  if (poll(pf, nfds_t(np), slice) < 0 && errno != EINTR) return errno;
  return 0;
}

// Reads what rank r's socket holds of this step: header and body in one
// call, into the header room and the landing after it.
int Mesh::pump_recv(const StepHeader &h, int r, Peer &p, bool &moved, Error &err) {
  const size_t total = h.size + p.body_in;
  const transport::GateStep *g = h.gate;
  uint8_t *body = g != nullptr ? g->dst[r] : landing(r);
  uint8_t *hdr = (g == nullptr || g->room ? body : landing(r)) - h.size;
  while (p.recv) {
    const ssize_t k = net::recv_stream(fds_[r].get(), hdr, h.size, body, p.got, total);
    if (k == 0) return lost(h, r, p, 0, err);
    if (k < 0) {
      if (retry_later(errno)) return DS4TP_OK;
      return lost(h, r, p, errno, err);
    }
    const bool hdr_done = p.got < h.size && p.got + size_t(k) >= h.size;
    p.got += size_t(k);
    moved = true;
    if (hdr_done)
      if (int rc = g != nullptr ? wire::check_peer_gate_header(*g->mine, hdr, err)
                                : h.check(hdr, h.step, p.body_in, name(r), err))
        return rc;
    if (p.got == total) p.recv = false;
  }
  return DS4TP_OK;
}

int Mesh::pump_send(const StepHeader &h, const uint8_t *src, int r, Peer &p, bool &moved,
                    Error &err) {
  const size_t total = h.size + p.body_out;
  while (p.send) {
    const ssize_t k =
        net::send_stream(fds_[r].get(), h.for_body(p.body_out), h.size, src, p.sent, total);
    if (k < 0) {
      if (retry_later(errno)) return DS4TP_OK;
      return lost(h, r, p, errno, err);
    }
    p.sent += size_t(k);
    moved = true;
    if (p.sent == total) p.send = false;
  }
  return DS4TP_OK;
}

int Mesh::lost(const StepHeader &h, int r, const Peer &p, int e, Error &err) {
  if (transport::GateStep *g = h.gate) {
    using How = transport::StepEnd::How;
    g->end = {e == 0 ? How::kClosed : How::kIo, e, p.got > 0, p.sent, p.got};
    return e == 0 || e == EPIPE || e == ECONNRESET || e == ENOTCONN ? DS4TP_EPEERCLOSED
                                                                   : DS4TP_EIO;
  }
  if (e == 0)
    return err.set(DS4TP_EPEERCLOSED, "rank {} closed its connection (step {})", name(r),
                   h.step);
  return err.set(DS4TP_EPEERCLOSED, "rank {}: {} (step {})", name(r), std::strerror(e), h.step);
}

int Mesh::fail(int rc, int culprit) {
  if (culprit >= 0) culprit_ = culprit;
  return rc;
}

}  // namespace ds4tp::tcp
