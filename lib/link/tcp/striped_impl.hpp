// The striped transport's class (striped.hpp), shared by its two halves:
// striped.cpp (the striped big gate) and striped_links.cpp (links leaving:
// a rail dropped after a gate it lost, the rails kept when the pair fails
// over to its standby). Internal to tcp/.
#pragma once

#include <fcntl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "common/test_hooks.hpp"
#include "os/wait.hpp"
#include "multipath/rail_share.hpp"
#include "multipath/survivor.hpp"
#include "link/tcp/pair_link.hpp"
#include "link/tcp/striped.hpp"

namespace ds4tp::tcp {

using wire::GateHeader;
using wire::GateKind;

// Rail k in messages (0: the data connection, or the standby that took
// its place): the socket a row gate failed on is named.
inline const char *link_name(int k, bool standby) {
  static const char *const kNames[wire::kMaxLinks] = {
      "data connection", "rail 1 link", "rail 2 link", "rail 3 link",
      "rail 4 link",     "rail 5 link", "rail 6 link", "rail 7 link"};
  return k == 0 && standby ? "standby link" : kNames[k];
}

class StripedLink final : public link::Link, public multipath::Survivor {
 public:
  // `kept`: the rail numbers of links 1.., where a failover kept them
  // beside the standby (link 0); empty: link k is rail k.
  StripedLink(std::vector<net::Fd> links, const wire::RailPlan &plan, const DataConfig &cfg,
                   const BigPlan &big, const Logger &log, const std::vector<int> &kept)
      : plan_(plan), cfg_(cfg), big_(big), log_(log), standby_(!kept.empty()) {
    for (size_t k = 1; k < links.size(); k++) rail_[k] = standby_ ? kept[k - 1] : int(k);
    for (auto &l : links) fds_.push_back(l.get());
    // The row link's socket goes to its tcp transport; the rest stay here.
    row_ = make_pair_link(std::move(links[plan.row_link]), cfg, big,
                          link_name(rail_[plan.row_link], standby_));
    for (size_t k = 0; k < links.size(); k++)
      if (links[k].valid()) {
        net::set_nonblocking(links[k].get());
        net::tune_data_socket(links[k].get());
        owned_[k] = std::move(links[k]);
      }
    os::set_spin(policy_, budget_, 0, false);  // multi-MiB gates: block at once
    policy_.tally = cfg_.tally;
    policy_.grace_ns = 2'000'000;  // after a hang-up, bytes sent before it still drain
    if (!standby_) cut_at_ = test_hooks().cut_striped_after;  // tests only
  }

  const char *name() const override { return "tcp"; }
  int kind() const override { return DS4TP_TRANSPORT_TCP; }
  bool links(std::vector<LinkInfo> &out) const override {
    for (int k = 0; k < plan_.links; k++) {
      LinkInfo l;
      l.transport = DS4TP_TRANSPORT_TCP;
      l.role = k == 0 ? DS4TP_LINK_DATA : DS4TP_LINK_RAIL;
      l.state = dead_[k] ? -1 : 1;
      l.row = k == plan_.row_link;
      l.share = plan_.share[k];
      l.rate_mbit = plan_.mbit[k];
      l.rtt_us = plan_.rtt_us[k];
      out.push_back(l);
    }
    return true;
  }
  int bind(uint8_t *base, const slab::Layout &layout, Error &err) override {
    base_ = base;
    layout_ = layout;
    return row_->bind(base, layout, err);
  }
  void unbind() override { row_->unbind(); }
  void abort(int, int) override {}  // as a pair's link: the pair's latch ends it
  // Link 0 and the row link: every wait of a gate in progress watches
  // one of them. The other rails stay up for over_standby().
  void give_up() override {
    for (int k : {0, int(plan_.row_link)})
      if (fds_[size_t(k)] >= 0) ::shutdown(fds_[size_t(k)], SHUT_RDWR);
  }
  std::unique_ptr<link::Link> over_standby(net::Fd &standby, int rank, KeepRails keep,
                                           std::vector<int> &kept, Error &err) override;

  // Row, batch and small big gates run on the row link; big gates of
  // kStripeMinBytes or more split over every link.
  int step(link::Step &s, Error &err) override {
    if (s.gate == nullptr)
      return err.set(DS4TP_EINVAL, "a group's step is not a gate of a pair's tcp rails");
    if (s.gate->kind != uint16_t(GateKind::Big) || s.body < kStripeMinBytes)
      return row_->step(s, err);
    s.seen_ns = 0;
    return striped(s.gate->layer, s.gate->seq, s.src[1], s.dst[1], s.body, s.start_ns, err);
  }

 private:
  int striped(uint32_t layer, uint64_t seq, const uint8_t *out, uint8_t *in, uint64_t bytes,
              uint64_t started, Error &err);
  // The rails a failover may keep: up, not the row link, not lost.
  uint16_t keepable() const {
    uint16_t m = 0;
    for (int k = 1; k < plan_.links; k++)
      if (!dead_[k] && !lost_[k] && k != plan_.row_link && owned_[k].valid()) m |= 1u << k;
    return m;
  }
  // After a gate that recovered link k: later gates leave it out, its
  // share going to link 0, and row gates move to link 0 if they ran on it.
  void drop_link(int k);

  wire::RailPlan plan_;
  DataConfig cfg_;
  BigPlan big_;
  Logger log_;
  bool dead_[wire::kMaxLinks] = {};
  bool lost_[wire::kMaxLinks] = {};  // found lost in a gate that then failed
  // Bytes written and read on each rail since these links began: what a
  // failover's rail counts trade (rail_sync.hpp).
  uint64_t wrote_[wire::kMaxLinks] = {}, read_[wire::kMaxLinks] = {};
  uint64_t cut_at_ = 0;  // the test hook (0: off)
  uint8_t *base_ = nullptr;
  slab::Layout layout_;
  bool standby_;                      // link 0 is the standby (a failover kept these rails)
  int rail_[wire::kMaxLinks] = {};  // link k's rail number, for messages
  std::vector<int> fds_;  // by link (-1 once dropped); the row link's is row_'s
  std::unique_ptr<link::Link> row_;
  net::Fd owned_[wire::kMaxLinks];  // by link, but the row link's
  os::WaitPolicy policy_;
  os::SpinBudget budget_;
};

}  // namespace ds4tp::tcp
