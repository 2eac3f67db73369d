// One queue pair's ordered traffic: the rdma link layer that a pair's
// transport (transport.cpp: receives posted straight into the slab) and a
// group's mesh (mesh.cpp: a ring of receives per peer) both drive. It
// splits runs at the negotiated message size, posts in batches within the
// queues' depths, and takes completions in the order the queue pair
// promises (queue_pair.hpp), each checked for its status and its place
// before its owner sees it. What a receive must carry (its tag, its
// length) and how to wait (os::Waiter, PeerWatch) stay with the owner.
// Errors word the link's own operation; the owner puts its gate or step
// in front.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "common/error.hpp"
#include "link/rdma/queue_pair.hpp"

namespace ds4tp::rdma {

constexpr uint64_t kSendBit = 1ull << 63;     // in a send's wr_id
constexpr int kPostBatch = 32;                // work requests per post call (stack array)
constexpr int kPollBatch = 32;                // completions per poll call
constexpr uint64_t kNapNs = 50'000;           // one nap after the spin window
constexpr uint64_t kGoneGraceNs = 2'000'000;  // completions still polled after a peer hang-up

class QpLink {
 public:
  std::unique_ptr<QueuePair> qp;
  uint32_t msg = 0;     // the message size both ends accept
  uint32_t rdepth = 0;  // receives either end may have posted (the smaller queue)
  uint32_t sdepth = 0;  // sends in flight (the smaller queue)
  // Work requests posted and completed; receive i has wr_id i, send i
  // kSendBit | i.
  uint64_t recv_posted = 0, recv_done = 0, send_posted = 0, send_done = 0;

  uint32_t messages(uint64_t bytes) const {
    return bytes == 0 ? 0 : uint32_t((bytes + msg - 1) / msg);
  }
  // The length of message k of a `bytes` run (the last may be short).
  uint32_t piece(uint64_t k, uint64_t bytes) const {
    return uint32_t(std::min<uint64_t>(msg, bytes - k * msg));
  }
  uint64_t send_room() const { return sdepth - (send_posted - send_done); }
  void reset_counters() { recv_posted = recv_done = send_posted = send_done = 0; }

  // Posts receives recv_posted .. recv_posted + n - 1; fill(k, w) sets
  // w.addr and w.bytes of the run's k-th (w.wr_id is set already).
  template <typename Fill>
  int post_recvs(uint64_t n, Fill fill, Error &err) {
    if (recv_posted - recv_done + n > rdepth)
      return err.set(DS4TP_EIO, "{} more receives would exceed the queue depth {} ({} posted)",
                     n, rdepth, recv_posted - recv_done);
    RecvWork w[kPostBatch];
    for (uint64_t k = 0; k < n;) {
      int m = 0;
      for (; m < kPostBatch && k < n; m++, k++) {
        w[m] = RecvWork{};
        w[m].wr_id = recv_posted + uint64_t(m);
        fill(k, w[m]);
      }
      if (int rc = qp->post_recv(w, size_t(m), err)) return posting_failed(rc, err);
      recv_posted += uint64_t(m);
    }
    return DS4TP_OK;
  }

  // Posts the run's sends from its `done`-th on, as many as the send
  // queue has room for, and adds them to `done`; fill(k, w) sets w.addr,
  // w.bytes and w.imm of the run's k-th.
  template <typename Fill>
  int post_sends(uint64_t n, uint64_t &done, Fill fill, Error &err) {
    SendWork w[kPostBatch];
    while (done < n && send_room() > 0) {
      int m = 0;
      for (; m < kPostBatch && done + uint64_t(m) < n && uint64_t(m) < send_room(); m++) {
        w[m] = SendWork{};
        w[m].wr_id = kSendBit | (send_posted + uint64_t(m));
        fill(done + uint64_t(m), w[m]);
      }
      if (int rc = qp->post_send(w, size_t(m), err)) return posting_failed(rc, err);
      send_posted += uint64_t(m);
      done += uint64_t(m);
    }
    return DS4TP_OK;
  }

  // Polls once. Send completions are counted; each receive completion,
  // once its status and place are checked, counts as done (its receive
  // has left the queue, so take may post another in its place) and goes
  // to take(c), which judges what it carries (an error there stops the
  // poll). Returns the completions seen (0: none yet), or an error.
  template <typename Take>
  int poll(Take take, Error &err) {
    Completion wc[kPollBatch];
    const int n = qp->poll(wc, kPollBatch, err);
    if (n < 0) return err.set(DS4TP_EIO, "polling the completion queue failed: {}", err.message);
    for (int i = 0; i < n; i++) {
      if (int rc = check(wc[i], err)) return rc;
      if (wc[i].wr_id & kSendBit) {
        send_done++;
        continue;
      }
      recv_done++;
      if (int rc = take(wc[i])) return rc;
    }
    return n;
  }

 private:
  int check(const Completion &c, Error &err) const;
  static int posting_failed(int rc, Error &err);
};

}  // namespace ds4tp::rdma
