#include "link/tcp/rail_sync.hpp"

#include <algorithm>
#include <vector>

#include "common/clock.hpp"
#include "net/socket.hpp"

namespace ds4tp::tcp {

namespace {

int trade(int fd, const wire::RailSync &mine, wire::RailSync &peer, uint64_t deadline_ns,
          Error &err) {
  uint8_t b[wire::kRailSyncBytes];
  wire::encode_rail_sync(mine, b);
  if (int rc = net::write_all(fd, b, sizeof b, deadline_ns, "rail counts", err)) return rc;
  if (int rc = net::read_exact(fd, b, sizeof b, deadline_ns, "rail counts", err)) return rc;
  if (int rc = wire::decode_rail_sync(b, sizeof b, peer, err)) return rc;
  if (peer.stage != mine.stage || peer.links != mine.links)
    return err.set(DS4TP_EPROTO, "rail counts: the peer sent stage {} for {} links, this rank "
                   "stage {} for {}",
                   peer.stage, peer.links, mine.stage, mine.links);
  return DS4TP_OK;
}

// Reads and drops `bytes` from `fd`.
int drop_bytes(int fd, uint64_t bytes, uint64_t deadline_ns, Error &err) {
  std::vector<uint8_t> scratch(std::min<uint64_t>(bytes, 1u << 16));
  for (uint64_t left = bytes; left > 0;) {
    const size_t n = size_t(std::min<uint64_t>(left, scratch.size()));
    if (int rc = net::read_exact(fd, scratch.data(), n, deadline_ns, "the unfinished gate's "
                                 "bytes", err))
      return rc;
    left -= n;
  }
  return DS4TP_OK;
}

}  // namespace

int sync_rails(int standby_fd, const int *fds, const RailCounts &mine, uint64_t timeout_ns,
               uint16_t &kept, uint64_t *read_out, std::string &why, Error &err) {
  kept = 0;
  std::fill(read_out, read_out + wire::kMaxLinks, 0);
  wire::RailSync out, peer;
  out.links = uint16_t(mine.links);
  out.keep = mine.keepable;
  std::copy(mine.sent, mine.sent + mine.links, out.sent);
  if (int rc = trade(standby_fd, out, peer, now_ns() + timeout_ns, err)) return rc;
  const uint64_t read_by = now_ns() + timeout_ns / 2;
  uint16_t ready = 0;
  for (int k = 1; k < mine.links; k++) {
    if ((mine.keepable & peer.keep) >> k & 1u) {
      const uint64_t owed = peer.sent[k] - std::min(peer.sent[k], mine.got[k]);
      Error e;
      if (peer.sent[k] < mine.got[k])
        why += fmt::format("; rail {}: this rank read {} bytes, the peer wrote {}", k,
                           mine.got[k], peer.sent[k]);
      else if (drop_bytes(fds[k], owed, read_by, e) != DS4TP_OK)
        why += fmt::format("; rail {}: {}", k, e.message);
      else {
        ready |= uint16_t(1u << k);
        read_out[k] = owed;
      }
    } else if ((mine.keepable >> k & 1u) != 0) {
      why += fmt::format("; rail {}: lost on the peer", k);
    }
  }
  wire::RailSync done;
  done.stage = 2;
  done.links = out.links;
  done.keep = ready;
  if (int rc = trade(standby_fd, done, peer, now_ns() + timeout_ns, err)) return rc;
  for (int k = 1; k < mine.links; k++)
    if ((ready >> k & 1u) != 0 && (peer.keep >> k & 1u) == 0)
      why += fmt::format("; rail {}: the peer could not read it out", k);
  kept = ready & peer.keep;
  return DS4TP_OK;
}

}  // namespace ds4tp::tcp
