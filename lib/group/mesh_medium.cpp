// The mesh medium: a group's steps over a backend's mesh
// (transport/mesh_link.hpp: the tcp links, or rdma queue pairs over them),
// the same steps over any. Each contributor sends a 16-byte step header
// plus its bytes to every peer and reads every other contributor's; a
// step sent from the start of the group buffer puts its header in the
// room before it, so over tcp each link's message goes with one plain send.
#include "group/group.hpp"
#include "group/wire.hpp"

namespace ds4tp::group {
namespace {

using transport::MeshLink;
static_assert(MeshLink::kMaxPeers >= kMaxRanks && MeshLink::kRoom >= kStepHeaderBytes);

class MeshMedium final : public Medium {
 public:
  MeshMedium(std::unique_ptr<MeshLink> mesh, int transport, int rank, int n,
             const uint8_t *roomy, const MeshCrossovers &x)
      : rank_(rank), n_(n), transport_(transport), roomy_(roomy), mesh_(std::move(mesh)),
        two_shot_bytes_(x.two_shot_bytes), ring_bytes_(ring_for(x.ring_bytes, n)) {}

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

  int shift(uint64_t step, const void *mine, size_t bytes, int to, int from, const void **views,
            Error &err) override {
    const uint8_t *src[kMaxRanks] = {};
    src[to] = static_cast<const uint8_t *>(mine);
    uint8_t alone[kStepHeaderBytes];
    encode_step_header(step, 0, alone);
    return run(step, bytes, from, src, views, err, alone);
  }

  void done(uint64_t) override {}
  void count_progress_in(std::atomic<uint64_t> *word) override { mesh_->count_progress_in(word); }
  void abort(int, int) override { mesh_->abort(); }  // the heartbeat carries the verdict
  int culprit() const override { return mesh_->culprit(); }
  int transport() const override { return transport_; }
  uint64_t two_shot_bytes() const override { return two_shot_bytes_; }
  uint64_t ring_bytes() const override { return ring_bytes_; }

 private:
  int run(uint64_t step, size_t bytes, int root, const uint8_t *const *src, const void **views,
          Error &err, const uint8_t *alone = nullptr) {
    uint8_t own[kStepHeaderBytes];
    // From the group buffer's start the header goes in the room before it.
    uint8_t *hdr = src != nullptr && src[0] == roomy_ && src[n_ - 1] == roomy_
                       ? const_cast<uint8_t *>(roomy_) - kStepHeaderBytes
                       : own;
    encode_step_header(step, src != nullptr ? bytes : 0, hdr);
    const transport::StepHeader h{hdr, kStepHeaderBytes, step, bytes, check_step_header, alone};
    return mesh_->step(h, root, src, views, err);
  }

  int rank_;
  int n_;
  int transport_;
  const uint8_t *roomy_;  // the group buffer (see mesh_medium)
  std::unique_ptr<MeshLink> mesh_;
  uint64_t two_shot_bytes_;
  uint64_t ring_bytes_;
};

}  // namespace

std::unique_ptr<Medium> mesh_medium(std::unique_ptr<transport::MeshLink> mesh, int transport,
                                    int rank, int n, const uint8_t *roomy,
                                    const MeshCrossovers &x) {
  return std::make_unique<MeshMedium>(std::move(mesh), transport, rank, n, roomy, x);
}

}  // namespace ds4tp::group
