// What a pair's failover (failover.hpp) asks of a primary whose links can
// outlive it: a tcp pair's rails (tcp/striped*) and an rdma pair's rails
// (rdma/rails.cpp). Kept apart from link::Link: a link carries steps, and
// these calls only serve the failover that wraps it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/error.hpp"
#include "link/link.hpp"
#include "net/socket.hpp"

namespace ds4tp::multipath {

class Survivor {
 public:
  virtual ~Survivor() = default;
  // A failover left this link for good: shuts down the connections it
  // owns beyond the data connection that the peer's waits watch, so those
  // waits end. No step follows.
  virtual void give_up() {}
  // Which tcp rails over_standby keeps: none; those no gate left bytes on
  // (neither rank was in a striped big gate); or every live one, after
  // the ranks trade what each wrote on them in the unfinished gate and
  // read the rest of the peer's (wire::RailSync over the standby).
  enum class KeepRails { None, Clean, Sync };
  // After give_up(), once both ranks resumed on the standby (a connected
  // tcp link): a link over it and the rails of this one still fit to
  // carry gates (as `keep` says), their indexes here in `kept`; null where
  // none is left (those not kept are shut down), or null with `err` set
  // where the rail counts failed (the standby is then shut down: the
  // failover fails). `rank` 0 is the leader.
  virtual std::unique_ptr<link::Link> over_standby(net::Fd &, int, KeepRails, std::vector<int> &,
                                                   Error &) {
    return nullptr;
  }
  // The links the last failed gate found lost (bit k: link k, 0 the
  // primary): an error completion on them, or only they owing when the
  // progress deadline passed; 0 where the loss names no link.
  virtual uint32_t lost_links() const { return 0; }
  // After give_up(), once both ranks resumed on the standby: this kind of
  // link made again over its other links (the standby its data
  // connection), without those in `lost` (never link 0), their indexes
  // here in `kept`; null where it cannot. Its bind brings the links up
  // again, as at bring-up.
  virtual std::unique_ptr<link::Link> remake_without(net::Fd &, uint32_t, std::vector<int> &) {
    return nullptr;
  }
};

}  // namespace ds4tp::multipath
