#include "link/rdma/qp_link.hpp"

namespace ds4tp::rdma {

// One in error leaves the queue pair in error for good (its status, in the
// provider's words, says why); one out of order means the queue pair broke
// its promise, or a bug here.
int QpLink::check(const Completion &c, Error &err) const {
  const bool send = (c.wr_id & kSendBit) != 0;
  if (c.status != 0)
    return err.set(DS4TP_EIO,
                   "a {} work request failed: {} (status {}, vendor error 0x{:x}); the queue "
                   "pair is unusable",
                   send ? "send" : "receive", qp->status_text(c.status), c.status, c.vendor_err);
  if (send && c.wr_id != (kSendBit | send_done))
    return err.set(DS4TP_EIO, "send completion {} arrived while {} was next",
                   c.wr_id & ~kSendBit, send_done);
  if (!send && (recv_done == recv_posted || c.wr_id != recv_done))
    return err.set(DS4TP_EIO, "receive completion {} arrived while {} was next ({} posted)",
                   c.wr_id, recv_done, recv_posted);
  return DS4TP_OK;
}

int QpLink::posting_failed(int, Error &err) {
  return err.set(DS4TP_EIO, "posting work requests failed: {}", err.message);
}

}  // namespace ds4tp::rdma
