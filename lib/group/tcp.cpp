// TCP mesh medium: direct one-shot. Each contributor sends a 16-byte step
// header plus its bytes to every peer, and reads every other
// contributor's header and bytes into a per-rank staging buffer, all in
// one loop over non-blocking sockets so large steps cannot deadlock on
// full socket buffers. Each staging buffer has room for the header right
// before it, so a peer's step lands with one plain recv (a two-piece
// recvmsg costs more per call, and the wait polls with it). A step sent
// from the start of the group buffer does the same on the sending side.
// It waits like the shm medium (wait_budget).
// A failure shuts every socket down, so the peers see this rank leave
// (group-wide failure); a peer that closes fails the step with
// EPEERCLOSED naming it. Staging is allocated once, at set-up.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/clock.hpp"
#include "group/group.hpp"
#include "group/wire.hpp"
#include "os/os.hpp"

namespace ds4tp::group {
namespace {

class TcpMedium final : public Medium {
 public:
  TcpMedium(std::vector<net::Fd> fds, int rank, size_t chunk, uint64_t timeout, int64_t spin,
            const uint8_t *roomy)
      : fds_(std::move(fds)), rank_(rank), n_(int(fds_.size())), timeout_(timeout), roomy_(roomy),
        staging_(size_t(n_) * (kRoom + chunk)), chunk_(chunk), wait_(wait_budget(n_, spin)) {
    for (auto &f : fds_)
      if (f.valid()) net::set_nonblocking(f.get());
  }

  int exchange(uint64_t step, const void *mine, size_t bytes, int root, const void **views,
               Error &err) override {
    const uint8_t *src[kMaxRanks];
    for (int r = 0; r < n_; r++) src[r] = static_cast<const uint8_t *>(mine);
    return run(step, bytes, root, mine != nullptr ? src : nullptr, views, err);
  }

  int exchange_segments(uint64_t step, const void *mine, size_t seg, const void **views,
                        Error &err) override {
    const uint8_t *src[kMaxRanks];
    for (int r = 0; r < n_; r++) src[r] = static_cast<const uint8_t *>(mine) + size_t(r) * seg;
    int rc = run(step, seg, -1, src, views, err);
    views[rank_] = src[rank_];
    return rc;
  }

  void done(uint64_t) override {}

  void abort(int) override {
    aborted_.store(true, std::memory_order_release);
    for (auto &f : fds_)
      if (f.valid()) ::shutdown(f.get(), SHUT_RDWR);
  }

  int transport() const override { return DS4TP_TRANSPORT_TCP; }
  uint64_t two_shot_bytes() const override { return two_shot_bytes_; }

 private:
  struct Peer {
    size_t sent = 0, got = 0;
    bool send = false, recv = false;
  };
  static constexpr size_t kRoom = 64;  // before each landing: header room, alignment kept
  static_assert(kRoom >= kStepHeaderBytes);

  // Where rank r's bytes of a step land; its header goes just before.
  uint8_t *landing(int r) { return staging_.data() + size_t(r) * (kRoom + chunk_) + kRoom; }

  // Sends src[r] (bytes) to every peer r when src is set, receives
  // `bytes` from every peer (or only root) into staging. Every socket is
  // tried at once (the peers are usually there already), then again while
  // the wait budget spins or yields, and only then does poll() sleep.
  int run(uint64_t step, size_t bytes, int root, const uint8_t *const *src, const void **views,
          Error &err) {
    if (aborted_.load(std::memory_order_acquire))
      return err.set(DS4TP_EFAILED, "group failed: marked failed");
    uint8_t own[kStepHeaderBytes];
    // From the group buffer's start the header goes in the room before it.
    uint8_t *hdr = src != nullptr && src[0] == roomy_ && src[n_ - 1] == roomy_
                       ? const_cast<uint8_t *>(roomy_) - kStepHeaderBytes
                       : own;
    encode_step_header(step, bytes, hdr);
    Peer peers[kMaxRanks];
    int pending = 0;
    for (int r = 0; r < n_; r++) {
      views[r] = nullptr;
      if (r == rank_) continue;
      peers[r].send = src != nullptr;
      peers[r].recv = root < 0 || r == root;
      pending += peers[r].send + peers[r].recv;
    }
    if (src != nullptr) views[rank_] = src[rank_];
    // The clock starts at the first round that does not finish the step:
    // a step whose bytes are there at once (the usual case) never reads it.
    // Progress moves the deadline: a slow link that keeps moving is not a
    // rank that stopped.
    uint64_t deadline = 0, last = 0;
    uint32_t rounds = 0;
    while (pending > 0) {
      bool moved = false;
      for (int r = 0; r < n_; r++) {
        Peer &p = peers[r];
        if (p.send) {  // first: the peer may be waiting for these bytes already
          if (int rc = pump_send(step, hdr, src[r], bytes, r, p, moved, err)) return fail(rc);
          if (!p.send) pending--;
        }
        if (p.recv) {
          if (int rc = pump_recv(step, bytes, r, p, moved, err)) return fail(rc);
          if (!p.recv) {
            pending--;
            views[r] = landing(r);
          }
        }
      }
      if (pending == 0) break;
      if (aborted_.load(std::memory_order_acquire))
        return err.set(DS4TP_EFAILED, "group failed: marked failed");
      if (moved) rounds = 0;
      // The clock every 8th idle round: each round is a few system calls.
      if (moved || (++rounds & 7) == 1) {
        const uint64_t now = now_ns();
        if (deadline == 0 || moved) deadline = now + timeout_;
        if (moved || last == 0) last = now;
        if (now >= deadline)
          return fail(err.set(DS4TP_ETIMEDOUT, "step {}: {} made no progress within {} ms", step,
                              first_pending(peers), timeout_ / 1'000'000));
        phase_ = now - last < wait_.spin_ns ? 0 : now - last < wait_.spin_ns + wait_.yield_ns ? 1 : 2;
      }
      if (phase_ == 0) {
        os::cpu_relax();
      } else if (phase_ == 1) {
        os::yield_thread();
      } else {
        pollfd pf[kMaxRanks];
        int np = 0;
        for (int r = 0; r < n_; r++) {
          const Peer &p = peers[r];
          if (p.send || p.recv)
            pf[np++] = {fds_[r].get(), short((p.send ? POLLOUT : 0) | (p.recv ? POLLIN : 0)), 0};
        }
        const uint64_t now = now_ns();
        const int ms = now >= deadline ? 0 : int((deadline - now) / 1'000'000) + 1;
        if (poll(pf, nfds_t(np), ms) < 0 && errno != EINTR)
          return fail(err.set(DS4TP_EIO, "poll: {}", std::strerror(errno)));
      }
    }
    return DS4TP_OK;
  }

  static std::string first_pending(const Peer *peers) {
    for (int r = 0; r < kMaxRanks; r++)
      if (peers[r].send || peers[r].recv) return fmt::format("rank {}", r);
    return "a rank";
  }

  // Reads what rank r's socket holds of this step: header and bytes in
  // one call, into the header room and the landing after it.
  int pump_recv(uint64_t step, size_t bytes, int r, Peer &p, bool &moved, Error &err) {
    const size_t total = kStepHeaderBytes + bytes;
    uint8_t *hdr = landing(r) - kStepHeaderBytes;
    while (p.recv) {
      const ssize_t k = ::recv(fds_[r].get(), hdr + p.got, total - p.got, MSG_DONTWAIT);
      if (k == 0)
        return err.set(DS4TP_EPEERCLOSED, "rank {} closed its connection (step {})", r, step);
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return DS4TP_OK;
        return err.set(DS4TP_EPEERCLOSED, "rank {}: {} (step {})", r, std::strerror(errno), step);
      }
      const bool hdr_done = p.got < kStepHeaderBytes && p.got + size_t(k) >= kStepHeaderBytes;
      p.got += size_t(k);
      moved = true;
      if (hdr_done)
        if (int rc = check_step_header(hdr, step, bytes, r, err)) return rc;
      if (p.got == total) p.recv = false;
    }
    return DS4TP_OK;
  }

  int pump_send(uint64_t step, const uint8_t *hdr, const uint8_t *src, size_t bytes, int r,
                Peer &p, bool &moved, Error &err) {
    const size_t total = kStepHeaderBytes + bytes;
    while (p.send) {
      const ssize_t k = net::send_stream(fds_[r].get(), hdr, kStepHeaderBytes, src, p.sent, total);
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return DS4TP_OK;
        return err.set(DS4TP_EPEERCLOSED, "rank {}: {} (step {})", r, std::strerror(errno), step);
      }
      p.sent += size_t(k);
      moved = true;
      if (p.sent == total) p.send = false;
    }
    return DS4TP_OK;
  }

  int fail(int rc) {
    abort(rank_);
    return rc;
  }

  std::vector<net::Fd> fds_;
  int rank_;
  int n_;
  uint64_t timeout_;
  const uint8_t *roomy_;  // the group buffer (see tcp_medium)
  std::vector<uint8_t> staging_;
  size_t chunk_;
  std::atomic<bool> aborted_{false};
  WaitBudget wait_;
  int phase_ = 0;  // of the current wait: 0 spin, 1 yield, 2 poll
  uint64_t two_shot_bytes_ = two_shot_threshold(DS4TP_TRANSPORT_TCP);
};

}  // namespace

std::unique_ptr<Medium> tcp_medium(std::vector<net::Fd> fds, int rank, size_t chunk,
                                   uint64_t op_timeout_ns, int64_t spin_ns,
                                   const uint8_t *roomy) {
  return std::make_unique<TcpMedium>(std::move(fds), rank, chunk, op_timeout_ns, spin_ns, roomy);
}

}  // namespace ds4tp::group
