// The tcp links of one group rank: a connected socket to every other rank
// (the full mesh bring-up opened), and one step over them: this rank's
// message to each peer and each peer's message to this rank, all moved in
// one loop over non-blocking sockets so large steps cannot deadlock on
// full socket buffers. Each message is a step header (the caller's bytes,
// checked by the caller's function once whole) and a body.
//
// Each peer's message lands in a staging buffer of the mesh with room for
// the header right before it, so it arrives with one plain recv (a
// two-piece recvmsg costs more per call, and the wait polls with it). A
// message sent from a buffer with such room (the group buffer) goes with
// one plain send as well.
//
// Waiting goes through os::Waiter with the caller's policy; a step's
// deadline counts from the last bytes moved, so a slow link that keeps
// moving is not a stopped rank. A failed step leaves the links up: the
// caller first tells the others why (the group's heartbeat), then
// abort() shuts every socket down, so the peers see this rank leave; a
// peer that closes fails the step with EPEERCLOSED naming it. Staging is
// allocated once, here. One thread steps at a time; abort() may come from
// any thread.
//
// A pair's tcp gates are steps of a two-member mesh (pair_link.hpp): the
// same loop, with the gate's landings, deadlines and watch.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.hpp"
#include "net/socket.hpp"
#include "os/spin_budget.hpp"
#include "os/wait.hpp"
#include "link/link.hpp"
#include "link/tcp/big_exchange.hpp"
#include "link/data_config.hpp"

namespace ds4tp::tcp {

using link::kMaxMembers;
using link::kRoom;
using link::Step;

class Mesh final : public link::Link {
 public:
  // `fds[r]`: the socket to member r (invalid at `rank`). `chunk`: the
  // largest body. `policy.budget` is ignored: adaptive is the mesh's own.
  // `names[r]`: the rank number member r has in errors and culprit()
  // (a mesh of some of a group's ranks); empty: r itself.
  Mesh(std::vector<net::Fd> fds, int rank, size_t chunk, uint64_t timeout_ns,
       const os::WaitPolicy &policy, bool adaptive, std::vector<int> names = {});

  const char *name() const override { return "tcp"; }
  int kind() const override { return DS4TP_TRANSPORT_TCP; }
  // link::Link; a header in the kRoom before src[r] goes with its body in
  // one plain send. A step without its own deadlines waits `timeout_ns`.
  int step(Step &s, Error &err) override;
  void abort(int culprit = -1, int code = 0) override;
  int culprit() const override { return culprit_ < 0 ? -1 : name(culprit_); }
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // The link to member r.
  int socket(int r) const { return fds_[size_t(r)].get(); }

 private:
  friend std::unique_ptr<link::Link> make_pair_link(net::Fd, const DataConfig &, const BigPlan &,
                                                    const char *);
  // A pair's link (pair_link.hpp): its deadlines and liveness, its big
  // gates' plan, and its socket's name in messages.
  struct PairGates {
    DataConfig cfg;
    BigPlan big;
    const char *what;
  };
  // One step's loop; a pair's gate goes through gate_step (pair_gates.cpp).
  int run(Step &s, Error &err);
  int gate_step(Step &s, Error &err);
  int closed(const wire::GateHeader &m, uint64_t got, uint64_t total, Error &err) const;
  struct Peer {
    size_t sent = 0, got = 0;
    size_t body_out = 0, body_in = 0;
    bool send = false, recv = false;
    uint8_t hdr[kRoom];  // its header, where members get different sizes
  };
  int name(int r) const { return names_.empty() ? r : names_[size_t(r)]; }
  uint8_t *landing(int r) { return staging_.data() + size_t(r) * (kRoom + chunk_) + kRoom; }
  int pump_recv(Step &s, int r, Peer &p, bool &moved, Error &err);
  int pump_send(Step &s, const uint8_t *src, int r, Peer &p, bool &moved, Error &err);
  int block(const Peer *peers, uint64_t left_ns);
  // Link r failed (closed: e == 0): the group's words, or a gate's End.
  int lost(Step &s, int r, const Peer &p, int e, Error &err);

  std::vector<net::Fd> fds_;
  int rank_;
  int n_;
  uint64_t timeout_;
  std::vector<uint8_t> staging_;
  size_t chunk_;
  std::atomic<bool> aborted_{false};  // culprit_: a member index (the step's thread only)
  os::WaitPolicy policy_;
  os::SpinBudget budget_;
  std::vector<int> names_;
  std::unique_ptr<PairGates> pair_;  // a pair's link; null in a group's mesh
};

}  // namespace ds4tp::tcp
