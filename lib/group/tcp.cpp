// TCP mesh medium: direct one-shot over the group's tcp links
// (transport/tcp/mesh.hpp). Each contributor sends a 16-byte step header
// plus its bytes to every peer and reads every other contributor's; a
// step sent from the start of the group buffer puts its header in the
// room before it, so each link's message goes with one plain send.
#include "group/group.hpp"
#include "group/wire.hpp"
#include "transport/tcp/mesh.hpp"

namespace ds4tp::group {
namespace {

static_assert(tcp::Mesh::kMaxPeers >= kMaxRanks);
static_assert(tcp::Mesh::kRoom >= kStepHeaderBytes);

class TcpMedium final : public Medium {
 public:
  TcpMedium(std::vector<net::Fd> fds, int rank, size_t chunk, uint64_t timeout,
            const Waiting &wait, const uint8_t *roomy, std::vector<int> names)
      : rank_(rank), n_(int(fds.size())), roomy_(roomy),
        mesh_(std::move(fds), rank, chunk, timeout, wait.policy, wait.adaptive,
              std::move(names)) {}

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
  void abort(int, int) override { mesh_.abort(); }  // the heartbeat carries the verdict
  int culprit() const override { return mesh_.culprit(); }
  int transport() const override { return DS4TP_TRANSPORT_TCP; }
  uint64_t two_shot_bytes() const override { return two_shot_bytes_; }

 private:
  int run(uint64_t step, size_t bytes, int root, const uint8_t *const *src, const void **views,
          Error &err) {
    uint8_t own[kStepHeaderBytes];
    // From the group buffer's start the header goes in the room before it.
    uint8_t *hdr = src != nullptr && src[0] == roomy_ && src[n_ - 1] == roomy_
                       ? const_cast<uint8_t *>(roomy_) - kStepHeaderBytes
                       : own;
    encode_step_header(step, src != nullptr ? bytes : 0, hdr);
    const tcp::StepHeader h{hdr, kStepHeaderBytes, step, bytes, check_step_header};
    return mesh_.step(h, root, src, views, err);
  }

  int rank_;
  int n_;
  const uint8_t *roomy_;  // the group buffer (see tcp_medium)
  tcp::Mesh mesh_;
  uint64_t two_shot_bytes_ = two_shot_threshold(DS4TP_TRANSPORT_TCP);
};

}  // namespace

std::unique_ptr<Medium> tcp_medium(std::vector<net::Fd> fds, int rank, size_t chunk,
                                   uint64_t op_timeout_ns, const Waiting &wait,
                                   const uint8_t *roomy, std::vector<int> names) {
  return std::make_unique<TcpMedium>(std::move(fds), rank, chunk, op_timeout_ns, wait, roomy,
                                     std::move(names));
}

}  // namespace ds4tp::group
