// The rdma links of one group rank: a queue pair to every other rank, set
// up over the group's tcp links, and the same step as tcp::Mesh (this
// rank's message to each peer, each peer's message to this rank) moved as
// two-sided sends with immediates, over one QpLink per peer (qp_link.hpp:
// the queue-pair link a pair's rdma gates run on too).
//
// Set-up (open): every link trades a status (wire/rdma_frames.hpp: 'R',
// this end can run rdma; 'N' and why it cannot) and, where the peer can,
// RDMA_INFO (link/rdma/setup_link.hpp framing). Where both ends can,
// the queue pair is connected and this rank's whole receive ring for that
// peer is posted. open() reports whether every link of this rank came up;
// the group decides for all ranks (a rank that could not, and everyone
// then runs tcp over the same links, which hold no unread bytes), and the
// first sends go only after that decision, so no send can find a receive
// missing (Apple's UC loses those).
//
// Data path: a step's message (header + body) is split into sends of the
// link's message size (at most 16 KiB on Apple's UC profile), each tagged
// (kind, step, index) in its immediate. Each peer's messages land in a
// ring of 2 x ceil((header + chunk) / message) receives: a rank is at most
// one step ahead of any peer (each step hears every rank), so two steps'
// messages always find a posted receive; each is copied into that peer's
// landing (views point there) and its receive posted again at once. A
// completion of the next step, polled early, waits for that step. A tag
// or length out of place (a message lost on UC) is EDESYNC naming the
// rank; a completion error EIO with the provider's words.
//
// The tcp links stay open: their hang-up ends a wait with EPEERCLOSED
// naming the rank, and abort() shuts them down so the peers see this rank
// leave. Every wait has the step deadline, counted from the last progress.
// One thread steps at a time; abort() may come from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "net/socket.hpp"
#include "os/spin_budget.hpp"
#include "os/wait.hpp"
#include "link/link.hpp"
#include "link/descriptor.hpp"
#include "link/rdma/qp_link.hpp"

namespace ds4tp::rdma {

// This rank's end of the group's mesh as bring-up left it (its tcp links,
// chunk, step deadline, wait policy, names, set-up deadline), and our cap
// on one message.
struct MeshConfig : link::MeshConnection {
  explicit MeshConfig(const link::MeshConnection &c) : MeshConnection(c) {}
  uint32_t max_msg = 64 * 1024;  // our cap on one message (min with device and peer)
};

// Immediate of a group message: kind 6 in bits 31..28, the step's low 12
// bits, the message's index in the step (16 bits).
constexpr uint32_t kTagGroupKind = 6;
uint32_t group_tag(uint64_t step, uint32_t index);

using link::kRoom;
using link::Step;

class Mesh final : public link::Link {
 public:
  ~Mesh() override;

  // Over cfg.fds (borrowed). `dev`: this rank's opened device, or null when it has none (`none_why`
  // says why; the peers still learn it). OK with `out` set when every
  // link is up; OK with `out` null and `why` set when some link cannot
  // run rdma; an error when a link itself failed (closed, garbled).
  static int open(std::unique_ptr<Device> dev, const std::string &none_why,
                  const MeshConfig &cfg, std::unique_ptr<Mesh> &out, std::string &why,
                  Error &err);

  // Once the group runs rdma: the tcp links, kept for the mesh's life.
  void adopt(std::vector<net::Fd> fds);

  const char *name() const override { return "rdma"; }
  int kind() const override { return DS4TP_TRANSPORT_RDMA; }
  // link::Link: abort() shuts the tcp links down.
  int step(Step &s, Error &err) override;
  void abort(int culprit = -1, int code = 0) override;
  int culprit() const override { return culprit_ < 0 ? -1 : name(culprit_); }
  // "fake RC, 16384 byte messages": for logs.
  std::string describe() const;
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

 private:
  struct Link;
  Mesh(std::unique_ptr<Device> dev, int rank, int n, const MeshConfig &cfg);
  int name(int r) const { return cfg_.names.empty() ? r : cfg_.names[size_t(r)]; }
  int setup(const std::vector<int> &fds, std::string &why, Error &err);
  int prepare_local(std::string &why, Error &err);
  int post_ring(Link &l, uint64_t count, Error &err);
  int pump(const Step &h, int r, bool &moved, Error &err);
  int take(const Step &h, int r, const Completion &c, Error &err);

  std::unique_ptr<Device> dev_;
  int rank_, n_;
  MeshConfig cfg_;
  std::vector<Link> links_;
  std::unique_ptr<uint8_t, void (*)(void *)> region_;  // registered: send staging, rings
  size_t region_bytes_ = 0, staging_bytes_ = 0;
  bool registered_ = false;
  std::vector<uint8_t> landing_;  // per member: kRoom + chunk
  std::vector<net::Fd> fds_;
  std::atomic<bool> aborted_{false};  // culprit_: a member index
  os::WaitPolicy policy_;
  os::SpinBudget budget_;
};

}  // namespace ds4tp::rdma
