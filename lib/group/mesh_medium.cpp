// Mesh media: direct one-shot over the group's tcp links
// (transport/tcp/mesh.hpp) or its rdma queue pairs (transport/rdma/mesh.hpp),
// the same steps over either. Each contributor sends a 16-byte step
// header plus its bytes to every peer and reads every other contributor's;
// a step sent from the start of the group buffer puts its header in the
// room before it, so over tcp each link's message goes with one plain send.
#include "group/group.hpp"
#include "group/wire.hpp"
#include "transport/rdma/mesh.hpp"
#include "transport/tcp/mesh.hpp"

namespace ds4tp::group {
namespace {

static_assert(tcp::Mesh::kMaxPeers >= kMaxRanks && rdma::Mesh::kMaxPeers >= kMaxRanks);
static_assert(tcp::Mesh::kRoom >= kStepHeaderBytes && rdma::Mesh::kRoom >= kStepHeaderBytes);

template <class Mesh, int kTransport>
class MeshMedium final : public Medium {
 public:
  MeshMedium(std::unique_ptr<Mesh> mesh, int rank, int n, const uint8_t *roomy,
             const MeshCrossovers &x)
      : rank_(rank), n_(n), roomy_(roomy), mesh_(std::move(mesh)),
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
  void abort(int, int) override { mesh_->abort(); }  // the heartbeat carries the verdict
  int culprit() const override { return mesh_->culprit(); }
  int transport() const override { return kTransport; }
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
  const uint8_t *roomy_;  // the group buffer (see tcp_medium)
  std::unique_ptr<Mesh> mesh_;
  uint64_t two_shot_bytes_;
  uint64_t ring_bytes_;
};

}  // namespace

std::unique_ptr<Medium> tcp_medium(std::vector<net::Fd> fds, int rank, size_t chunk,
                                   uint64_t op_timeout_ns, const Waiting &wait,
                                   const uint8_t *roomy, const MeshCrossovers &x,
                                   std::vector<int> names) {
  const int n = int(fds.size());
  auto mesh = std::make_unique<tcp::Mesh>(std::move(fds), rank, chunk, op_timeout_ns, wait.policy,
                                          wait.adaptive, std::move(names));
  return std::make_unique<MeshMedium<tcp::Mesh, DS4TP_TRANSPORT_TCP>>(std::move(mesh), rank, n,
                                                                       roomy, x);
}

std::unique_ptr<Medium> rdma_medium(std::unique_ptr<rdma::Mesh> mesh, std::vector<net::Fd> fds,
                                    int rank, const uint8_t *roomy, const MeshCrossovers &x) {
  const int n = int(fds.size());
  mesh->adopt(std::move(fds));
  return std::make_unique<MeshMedium<rdma::Mesh, DS4TP_TRANSPORT_RDMA>>(std::move(mesh), rank, n,
                                                                         roomy, x);
}

}  // namespace ds4tp::group
