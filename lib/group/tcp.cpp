// TCP mesh medium: direct one-shot. Each contributor sends a 16-byte step
// header plus its bytes to every peer, and reads every other
// contributor's header and bytes into a per-rank staging buffer, all in
// one poll loop so large steps cannot deadlock on full socket buffers.
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
  TcpMedium(std::vector<net::Fd> fds, int rank, size_t chunk, uint64_t timeout)
      : fds_(std::move(fds)), rank_(rank), n_(int(fds_.size())), timeout_(timeout),
        staging_(size_t(n_) * chunk), chunk_(chunk) {
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
  // Sends src[r] (bytes) to every peer r when src is set, receives
  // `bytes` from every peer (or only root) into staging; one poll loop.
  int run(uint64_t step, size_t bytes, int root, const uint8_t *const *src, const void **views,
          Error &err) {
    if (aborted_.load(std::memory_order_acquire))
      return err.set(DS4TP_EFAILED, "group failed: marked failed");
    uint8_t hdr[kStepHeaderBytes];
    encode_step_header(step, bytes, hdr);
    struct Peer {
      size_t sent = 0, got = 0;
      bool send = false, recv = false;
      uint8_t in_hdr[kStepHeaderBytes];
    } peers[kMaxRanks];
    int pending = 0;
    for (int r = 0; r < n_; r++) {
      views[r] = nullptr;
      if (r == rank_) continue;
      peers[r].send = src != nullptr;
      peers[r].recv = root < 0 || r == root;
      pending += peers[r].send + peers[r].recv;
    }
    if (src != nullptr) views[rank_] = src[rank_];
    const size_t total = kStepHeaderBytes + bytes;
    const uint64_t deadline = now_ns() + timeout_;
    pollfd pf[kMaxRanks];
    int who[kMaxRanks];
    while (pending > 0) {
      int np = 0;
      for (int r = 0; r < n_; r++) {
        Peer &p = peers[r];
        if (!p.send && !p.recv) continue;
        pf[np] = {fds_[r].get(), short((p.send ? POLLOUT : 0) | (p.recv ? POLLIN : 0)), 0};
        who[np++] = r;
      }
      uint64_t now = now_ns();
      if (now >= deadline) return fail(err.set(DS4TP_ETIMEDOUT, "step {}: rank {} made no progress within {} ms", step, who[0], timeout_ / 1'000'000));
      int rc = poll(pf, nfds_t(np), int((deadline - now) / 1'000'000) + 1);
      if (rc < 0 && errno != EINTR)
        return fail(err.set(DS4TP_EIO, "poll: {}", std::strerror(errno)));
      if (aborted_.load(std::memory_order_acquire))
        return err.set(DS4TP_EFAILED, "group failed: marked failed");
      for (int i = 0; rc > 0 && i < np; i++) {
        const int r = who[i];
        Peer &p = peers[r];
        const int fd = fds_[r].get();
        if (p.recv && (pf[i].revents & (POLLIN | POLLHUP | POLLERR))) {
          uint8_t *dst = staging_.data() + size_t(r) * chunk_;
          for (;;) {
            ssize_t k;
            if (p.got < kStepHeaderBytes)
              k = ::recv(fd, p.in_hdr + p.got, kStepHeaderBytes - p.got, 0);
            else
              k = ::recv(fd, dst + (p.got - kStepHeaderBytes), total - p.got, 0);
            if (k == 0)
              return fail(err.set(DS4TP_EPEERCLOSED, "rank {} closed its connection (step {})", r, step));
            if (k < 0) {
              if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
              return fail(err.set(DS4TP_EPEERCLOSED, "rank {}: {} (step {})", r, std::strerror(errno), step));
            }
            bool hdr_done = p.got < kStepHeaderBytes && p.got + size_t(k) >= kStepHeaderBytes;
            p.got += size_t(k);
            if (hdr_done) {
              int drc = check_step_header(p.in_hdr, step, bytes, r, err);
              if (drc != DS4TP_OK) return fail(drc);
            }
            if (p.got == total) {
              p.recv = false;
              pending--;
              views[r] = dst;
              break;
            }
          }
        }
        if (p.send && (pf[i].revents & (POLLOUT | POLLERR | POLLHUP))) {
          for (;;) {
            iovec iov[2];
            int cnt = 0;
            if (p.sent < kStepHeaderBytes) iov[cnt++] = {hdr + p.sent, kStepHeaderBytes - p.sent};
            size_t off = p.sent > kStepHeaderBytes ? p.sent - kStepHeaderBytes : 0;
            if (bytes > off) iov[cnt++] = {const_cast<uint8_t *>(src[r]) + off, bytes - off};
            ssize_t k = os::sendv_nosignal(fd, iov, cnt);
            if (k < 0) {
              if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
              return fail(err.set(DS4TP_EPEERCLOSED, "rank {}: {} (step {})", r, std::strerror(errno), step));
            }
            p.sent += size_t(k);
            if (p.sent == total) {
              p.send = false;
              pending--;
              break;
            }
          }
        }
      }
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
  std::vector<uint8_t> staging_;
  size_t chunk_;
  std::atomic<bool> aborted_{false};
  uint64_t two_shot_bytes_ = two_shot_threshold(DS4TP_TRANSPORT_TCP);
};

}  // namespace

std::unique_ptr<Medium> tcp_medium(std::vector<net::Fd> fds, int rank, size_t chunk,
                                   uint64_t op_timeout_ns) {
  return std::make_unique<TcpMedium>(std::move(fds), rank, chunk, op_timeout_ns);
}

}  // namespace ds4tp::group
