#include "multipath/failover.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <vector>

#include "common/clock.hpp"
#include "talk/peer_state.hpp"
#include "multipath/rail_share.hpp"
#include "multipath/resume_wait.hpp"
#include "link/gate_step.hpp"
#include "multipath/survivor.hpp"
#include "link/tcp/big_exchange.hpp"
#include "link/tcp/pair_link.hpp"
#include "link/tcp/striped.hpp"
#include "wire/failover.hpp"

namespace ds4tp::multipath {
namespace {

using wire::GateHeader;
using wire::GateKind;

// One gate, enough to name it and to send its partial again.
struct Call {
  uint16_t kind = 0;  // 0: none
  uint32_t a = 0, b = 0;
  uint64_t seq = 0;
  const uint8_t *out = nullptr;  // this rank's partial (slab, or a big gate's caller memory)
  uint8_t *in = nullptr;         // where the peer's lands
  uint64_t bytes = 0;            // the payload each way

  static Call of(const link::Step &s) {
    const GateHeader &g = *s.gate;
    return {g.kind, g.layer, g.aux, g.seq, s.src[1], s.dst[1], s.body};
  }
  GateHeader header() const { return {kind, a, kind == uint16_t(GateKind::Big) ? 0 : b, seq, bytes}; }
};

std::string describe(const GateHeader &h) {
  if (h.kind == 0) return "none";
  if (h.kind == uint16_t(GateKind::Batch))
    return fmt::format("batch gate (index {}, rows {}, seq {})", h.layer, h.aux, h.seq);
  if (h.kind == uint16_t(GateKind::Big))
    return fmt::format("big gate (layer {}, seq {}, {} bytes)", h.layer, h.seq, h.bytes);
  return fmt::format("gate (layer {}, gate {}, seq {})", h.layer, h.aux, h.seq);
}

// Where a primary without rails (shm, a plain rdma link) has no survivor.
Survivor kNoSurvivor;

class FailoverLink final : public link::Link {
 public:
  FailoverLink(std::unique_ptr<link::Link> primary, net::Fd primary_data, net::Fd standby,
                    const FailoverConfig &cfg)
      : primary_(std::move(primary)), primary_data_(std::move(primary_data)),
        standby_(std::move(standby)), cfg_(cfg), live_(primary_.get()) {
    auto *sv = dynamic_cast<Survivor *>(primary_.get());
    survivor_ = sv != nullptr ? sv : &kNoSurvivor;
    std::vector<LinkInfo> links;
    rails_ = primary_->links(links);
    lost_name_ = std::string(primary_->name()) + (rails_ ? " rails" : " link");
  }

  const char *name() const override { return live_->name(); }
  int kind() const override { return live_->kind(); }
  void abort(int, int) override {}  // as a pair's link: the pair's latch ends it

  int bind(uint8_t *base, const slab::Layout &layout, Error &err) override {
    if (broken_) return refuse(err);
    base_ = base;
    layout_ = layout;
    return live_->bind(base, layout, err);
  }
  void unbind() override {
    live_->unbind();
    base_ = nullptr;
  }
  uint8_t *shared_memory() override { return primary_->shared_memory(); }
  const std::atomic<uint64_t> *setup_retries() const override {
    return primary_->setup_retries();
  }
  bool links(std::vector<LinkInfo> &out) const override {
    if (remade_) return remade_links(out);
    const size_t first = out.size();
    // Rails report their own (rdma's only while attached: then as they
    // were when the primary failed).
    if (!primary_->links(out) && !before_.empty()) {
      out.insert(out.end(), before_.begin(), before_.end());
    } else if (out.size() == first) {
      LinkInfo p;
      p.transport = cfg_.primary_kind;
      p.role = DS4TP_LINK_DATA;
      out.push_back(p);
    }
    for (size_t i = first; i < out.size(); i++) {
      if (tcp_ || broken_) out[i].state = -1;
      if (tcp_) out[i].row = false;
    }
    LinkInfo s;
    s.transport = DS4TP_TRANSPORT_TCP;
    s.role = DS4TP_LINK_STANDBY;
    s.state = broken_ ? -1 : tcp_ ? 1 : 0;
    s.row = tcp_ != nullptr;
    // Rails kept beside the standby: as the transport over both says
    // (its link 0 the standby, link j the rail kept_[j - 1]).
    std::vector<LinkInfo> now;
    if (tcp_ != nullptr && tcp_->links(now)) {
      s.row = now[0].row;
      s.share = now[0].share;
      for (size_t j = 1; j < now.size(); j++) {
        LinkInfo &l = out[first + size_t(kept_[j - 1])];
        l.state = broken_ ? -1 : now[j].state;
        l.row = now[j].row;
        l.share = now[j].share;
      }
    }
    out.push_back(s);
    return true;
  }

  int step(link::Step &s, Error &err) override {
    if (s.gate == nullptr)
      return err.set(DS4TP_EINVAL, "a group's step is not a gate of a pair's failover link");
    const Call c = Call::of(s);
    if (broken_) return refuse(err);
    if (dropping()) return fail_over(s, c, dropped(err), err, Await::Arrival);
    return after(s, c, live_->step(s, err), err);
  }

 private:
  // The test hook's gate count; one compare when it is off.
  bool dropping() { return cfg_.drop_primary_at != 0 && !tcp_ && ++gates_ == cfg_.drop_primary_at; }
  // After a failover that did not help: the primary is detached and no
  // standby carries the pair (the pair has latched the failure already).
  int refuse(Error &err) const {
    return err.set(DS4TP_EFAILED, "the {} failed and so did the failover{}: the pair cannot "
                   "go on",
                   lost_name_, remade_ ? " over the other rdma links" : " to the standby tcp link");
  }
  int dropped(Error &err) const {
    return err.set(DS4TP_EIO, "the {} {} given up on request (DS4TP_FAILOVER_DRILL, a "
                   "failover drill)",
                   lost_name_, rails_ ? "were" : "was");
  }

  int after(link::Step &s, const Call &c, int rc, Error &err) {
    if (rc == DS4TP_OK) {
      done_ = c;
      return rc;
    }
    // A caller's mistake is not the link's; a failed standby ends the pair.
    if (tcp_ || rc == DS4TP_EINVAL || rc == DS4TP_ESTATE) return rc;
    const talk::PeerState *ps = cfg_.data.peer;
    if (rc != DS4TP_ETIMEDOUT) return fail_over(s, c, rc, err, Await::Arrival);
    // A silent peer is no link's fault. A peer that entered or completed
    // this gate (its heartbeats say so) lost its data on the way: the link
    // failed. Otherwise the peer may be in the gate with the same loss, its
    // heartbeat not yet here, or not at it: it gets one progress deadline
    // to take the standby too.
    if (ps != nullptr && ps->silent()) return rc;
    const bool there = ps != nullptr && ps->peer_in_gate(c.kind, c.seq);
    return fail_over(s, c, rc, err, there ? Await::Arrival : Await::Progress);
  }

  // This rank's partial of the last completed gate is where it was: the
  // gate in flight did not reuse its region (a big gate's is the caller's:
  // never assumed kept).
  bool holds_done(const Call &c) const {
    if (done_.kind == uint16_t(GateKind::Row) || done_.kind == uint16_t(GateKind::Batch))
      return !(c.kind == done_.kind && c.out == done_.out);
    return false;
  }

  // The gate in flight run again on the links just taken, from a fresh
  // clock read (the caller's step, whose regions are still the gate's).
  int run_again(link::Step &s, Error &err) {
    s.start_ns = now_ns();
    s.watch = nullptr;
    return tcp_->step(s, err);
  }

  // The gate the behind rank is in, sent again by the rank ahead (which
  // already has the behind rank's partial: it lands in scratch memory),
  // as one big gate both ranks name alike.
  int catch_up(const Call &gate, bool ahead, Error &err) {
    std::vector<uint8_t> scratch(ahead ? gate.bytes : 0);
    link::GateStep g;
    g.big(gate.a, gate.seq, gate.out, ahead ? scratch.data() : gate.in, gate.bytes);
    g.waits(cfg_.data, now_ns());
    return tcp_->step(g.s, err);
  }

  // How long the peer's resume is waited for: as a gate waits for a peer
  // to arrive, or one progress deadline (a peer that may not be in a gate).
  enum class Await { Arrival, Progress };
  int fail_over(link::Step &s, const Call &c, int rc, Error &err, Await await);
  // The transport that carries the pair from now on: the primary made
  // again without the lost links where both ranks named only rails of it
  // (`lost`), else tcp over the standby and the rails kept beside it.
  // 0, or the error of the rail counts (`why` says it).
  int take_standby(uint32_t lost, Survivor::KeepRails keep, std::string &why);
  // links() once the primary was made again: its links as they were,
  // those kept as they are now, the others lost; the standby its data
  // connection.
  bool remade_links(std::vector<LinkInfo> &out) const;
  int await_resume(uint64_t limit_ns, wire::Resume &peer, std::string &why) {
    return read_resume(standby_.get(), cfg_.control_fd, cfg_.data.peer, limit_ns, peer, why);
  }

  std::unique_ptr<link::Link> primary_;
  Survivor *survivor_;  // the primary's rails, or kNoSurvivor
  net::Fd primary_data_;
  net::Fd standby_;
  FailoverConfig cfg_;
  link::Link *live_;
  bool rails_ = false;     // the primary is a tcp pair's rails
  std::string lost_name_;  // the primary in messages: "rdma link", "tcp rails"
  std::unique_ptr<link::Link> tcp_;  // once failed over
  std::vector<int> kept_;           // the primary's rails that tcp_ runs on too
  bool remade_ = false;             // tcp_ is the primary made again without lost links
  std::vector<LinkInfo> before_;    // the primary's links when it failed
  Call done_;                       // the last completed gate
  uint64_t gates_ = 0;              // the test hook's count
  bool broken_ = false;             // a failover failed: nothing carries the pair
  uint8_t *base_ = nullptr;
  slab::Layout layout_;
};

int FailoverLink::fail_over(link::Step &s, const Call &c, int rc, Error &err, Await await) {
  const std::string lost = err.message;
  auto give_up = [&](const std::string &why, int code = 0) {
    broken_ = true;
    std::vector<int> none;  // rails too: nothing carries the pair
    net::Fd unused;
    Error ignored;
    (void)survivor_->over_standby(unused, cfg_.rank, Survivor::KeepRails::None, none, ignored);
    // The peer's waits on the standby (its resume, the rail counts) end at once.
    ::shutdown(standby_.get(), SHUT_RDWR);
    return err.set(code != 0 ? code : rc, "{}; failover to the standby tcp link failed: {}", lost,
                   why);
  };
  // A peer that gave up first has its resume here already: this rank's
  // primary error is then only the peer leaving. Looked at before this
  // rank shuts its primary down, so a peer that only follows this rank
  // (its resume comes after that) is never taken for the first.
  pollfd pf{standby_.get(), POLLIN, 0};
  const bool followed = ::poll(&pf, 1, 0) == 1 && (pf.revents & POLLIN) != 0;
  // Which links this rank's gate found lost (rdma rails; from its own
  // evidence, so a rank that only follows may name them too).
  const uint32_t lost_here = survivor_->lost_links();
  before_.clear();
  (void)primary_->links(before_);

  // Nothing of the primary lands in the slab from now on, and the peer's
  // primary waits see its data connection go.
  primary_->unbind();
  survivor_->give_up();
  ::shutdown(primary_data_.get(), SHUT_RDWR);
  wire::Resume mine;
  mine.in_flight = c.header();
  mine.done = done_.header();
  mine.holds_done = holds_done(c);
  mine.lost_links = cfg_.name_lost_links ? uint8_t(lost_here) : 0;
  mine.reason = followed ? "it left the link only after this rank did"
                         : lost.substr(0, wire::kResumeReasonMax);
  uint8_t b[wire::kResumeBytes];
  wire::encode_resume(mine, b);
  Error se;
  // A peer that is gone shows as such on the read below.
  (void)net::write_all(standby_.get(), b, sizeof b, now_ns() + cfg_.data.gate_timeout_ns,
                       "failover resume", se);
  wire::Resume peer;
  std::string why;
  // A peer that cannot see this rank shut the primary down (a FIN behind
  // unread bytes, where poll() has no POLLRDHUP) leaves its gate at its own
  // progress deadline, counted from its last progress, which may come just
  // after this rank's: one more row gate deadline covers it.
  const bool big = c.kind == uint16_t(GateKind::Big);
  const uint64_t limit = (await == Await::Arrival ? cfg_.data.arrival(big)
                          : big                   ? cfg_.data.big_gate_timeout_ns
                                                  : cfg_.data.gate_timeout_ns) +
                         cfg_.data.gate_timeout_ns;
  if (await_resume(limit, peer, why) != DS4TP_OK) return give_up(why);

  const bool same = peer.in_flight == mine.in_flight;
  const bool ahead = !same && mine.done.kind != 0 && peer.in_flight == mine.done;
  const bool behind = !same && !ahead && peer.done.kind != 0 && peer.done == mine.in_flight;
  // A desync on both ranks, whichever saw it first (the other may only
  // have seen the data connection close).
  if (!same && !ahead && !behind)
    return give_up(fmt::format("the ranks are at different gates: this rank at {} (last "
                               "completed {}), the peer at {} (last completed {})",
                               describe(mine.in_flight), describe(mine.done),
                               describe(peer.in_flight), describe(peer.done)),
                   DS4TP_EDESYNC);
  if (ahead && !mine.holds_done)
    return give_up(fmt::format("this rank completed {} but the peer did not, and this rank no "
                               "longer holds its partial of that gate",
                               describe(mine.done)));
  if (behind && !peer.holds_done)
    return give_up(fmt::format("the peer completed {} but this rank did not, and the peer no "
                               "longer holds its partial of that gate",
                               describe(peer.done)));

  // Rails stay beside the standby where no gate was moving bytes on them:
  // neither rank was in a striped big gate. Otherwise they may hold
  // shares unread: ranks that both trade rail counts read them out first.
  auto striped = [](const GateHeader &h) {
    return h.kind == uint16_t(GateKind::Big) && h.bytes >= kStripeMinBytes;
  };
  const bool clean = !striped(mine.in_flight) && !striped(peer.in_flight);
  const uint32_t lost_links = uint32_t(mine.lost_links | peer.lost_links);
  using KeepRails = Survivor::KeepRails;
  const KeepRails keep = clean            ? KeepRails::Clean
                         : cfg_.sync_rails ? KeepRails::Sync
                                           : KeepRails::None;
  if (int krc = take_standby(lost_links, keep, why)) return give_up(why, krc);
  if (int arc = tcp_->bind(base_, layout_, err)) {
    broken_ = true;
    if (!remade_) return arc;
    // Closed at once, so a peer still in the set-up frames leaves them.
    tcp_.reset();
    return err.set(arc, "{}; failover to {} over the other links failed: {}", lost,
                   primary_->name(), err.message);
  }
  live_ = tcp_.get();
  const std::string from =
      ahead    ? fmt::format("{}, which the peer never received, then {}", describe(mine.done),
                             describe(mine.in_flight))
      : behind ? describe(mine.in_flight) + ", which the peer completed"
               : describe(mine.in_flight);
  std::string what = lost_name_, onto = "the standby tcp link";
  if (remade_) {
    what = "rdma rail";
    for (int k = 1; k < wire::kMaxLinks; k++)
      if ((lost_links >> k & 1u) != 0) what += fmt::format(" {}", k);
    onto = fmt::format("{} over the other links", primary_->name());
  }
  if (followed)
    cfg_.log.warn("{} lost at {}, as the peer found: {}; resuming over {} from {}", what,
                  describe(mine.in_flight), peer.reason, onto, from);
  else
    cfg_.log.warn("{} lost at {}: {}; resuming over {} from {} (the peer: {})", what,
                  describe(mine.in_flight), lost, onto, from, peer.reason);
  if (cfg_.switched) cfg_.switched(remade_ ? cfg_.primary_kind : DS4TP_TRANSPORT_TCP);

  // The gate run again failing on the links just taken: nothing carries
  // the pair (a peer that gave up on them shut them down).
  if (ahead || behind) {
    if (int crc = catch_up(ahead ? done_ : c, ahead, err)) {
      broken_ = true;
      return crc;
    }
  }
  if (behind) {
    // The peer sent this gate's partial above and took ours.
    done_ = c;
    s.seen_ns = 0;
    return DS4TP_OK;
  }
  const int rrc = run_again(s, err);
  s.seen_ns = 0;
  if (rrc == DS4TP_OK) done_ = c;
  broken_ = rrc != DS4TP_OK;
  return rrc;
}

int FailoverLink::take_standby(uint32_t lost, Survivor::KeepRails keep, std::string &why) {
  kept_.clear();
  if (lost != 0 && (lost & 1u) == 0) tcp_ = survivor_->remake_without(standby_, lost, kept_);
  remade_ = tcp_ != nullptr;
  if (remade_) return DS4TP_OK;
  Error e;
  tcp_ = survivor_->over_standby(standby_, cfg_.rank, keep, kept_, e);
  if (tcp_ != nullptr) return DS4TP_OK;
  if (e.code != DS4TP_OK) {
    why = e.message;
    return e.code;
  }
  const char *bad = nullptr;
  const tcp::BigPlan plan = tcp::choose_big_plan(standby_.get(), cfg_.rank, bad);
  tcp_ = tcp::make_pair_link(std::move(standby_), cfg_.data, plan, "standby link");
  return DS4TP_OK;
}

bool FailoverLink::remade_links(std::vector<LinkInfo> &out) const {
  const size_t first = out.size();
  for (LinkInfo l : before_) {
    l.state = -1;
    l.row = false;
    l.share = 0;
    out.push_back(l);
  }
  // The made-again transport's link 0 is the primary, its link j the old
  // link kept_[j - 1]; one link alone lists none.
  // Nothing carries the pair where making the links again failed.
  std::vector<LinkInfo> now;
  const bool carried = !broken_ && tcp_ != nullptr;
  if (carried && !tcp_->links(now)) {
    LinkInfo p = before_.empty() ? LinkInfo{} : before_[0];
    p.share = 0;
    p.row = true;
    now.push_back(p);
  }
  for (size_t j = 0; j < now.size() && j <= kept_.size(); j++) {
    const size_t at = first + (j == 0 ? 0 : size_t(kept_[j - 1]));
    if (at >= out.size()) break;
    out[at].state = 1;
    out[at].row = now[j].row;
    out[at].share = now[j].share;
    out[at].rate_mbit = now[j].rate_mbit;
    out[at].rtt_us = now[j].rtt_us;
  }
  LinkInfo s;
  s.transport = DS4TP_TRANSPORT_TCP;
  s.role = DS4TP_LINK_STANDBY;
  s.state = broken_ ? -1 : 1;  // the data connection of the links made again
  s.row = false;
  out.push_back(s);
  return true;
}

}  // namespace

std::unique_ptr<link::Link> make_failover_link(std::unique_ptr<link::Link> primary,
                                                   net::Fd primary_data, net::Fd standby,
                                                   const FailoverConfig &cfg) {
  return std::make_unique<FailoverLink>(std::move(primary), std::move(primary_data),
                                             std::move(standby), cfg);
}

}  // namespace ds4tp::multipath
