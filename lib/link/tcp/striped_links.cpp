// Links leaving a tcp pair's striped set (striped_impl.hpp): a rail lost
// in a gate that completed over link 0, and the rails kept beside the
// standby when the pair fails over (the rail counts of rail_sync.hpp
// where a striped gate was in flight).
#include <algorithm>

#include "common/clock.hpp"
#include "link/tcp/rail_sync.hpp"
#include "link/tcp/striped_impl.hpp"

namespace ds4tp::tcp {

void StripedLink::drop_link(int k) {
  plan_.share[0] = uint16_t(plan_.share[0] + plan_.share[k]);
  plan_.share[k] = 0;
  dead_[k] = true;
  ::shutdown(fds_[size_t(k)], SHUT_RDWR);
  log_.warn("rails: link {} lost in a big gate, which completed over {}; later big gates "
            "split over the other links",
            rail_[k], standby_ ? "the standby link" : "link 0");
  if (k != plan_.row_link) {
    fds_[size_t(k)] = -1;  // owned_ keeps it until the end; nothing uses it again
    return;
  }
  const int dup = ::fcntl(fds_[0], F_DUPFD_CLOEXEC, 0);
  if (dup < 0) {  // the row gates stay on the lost link: the next fails the rails over
    log_.warn("rails: row gates cannot move to link 0: {}", std::strerror(errno));
    return;
  }
  plan_.row_link = 0;
  row_ = make_pair_link(net::Fd(dup), cfg_, big_);  // closes link k's socket
  fds_[size_t(k)] = -1;
  Error e;
  if (base_ != nullptr && row_->bind(base_, layout_, e) != DS4TP_OK)
    log_.warn("rails: row gates on link 0: {}", e.message);
  log_.warn("rails: row and batch gates move to link 0");
}

// The rails but link 0 and the row link (lost, or whose stream the
// failover cut) that no gate left dirty, or that the rail counts brought
// to a gate's start, with the standby as the new link 0. Both ranks hold
// the same plan and keep the same links, so both split alike: shares from
// the rates and round trips measured at bring-up (the standby's: link
// 0's, the path it shares).
std::unique_ptr<link::Link> StripedLink::over_standby(net::Fd &standby, int rank,
                                                          KeepRails keep, std::vector<int> &kept,
                                                          Error &err) {
  kept.clear();
  uint16_t keeping = keep == KeepRails::None ? 0 : keepable();
  if (keep == KeepRails::Sync) {
    RailCounts c;
    c.links = plan_.links;
    c.keepable = keeping;
    std::copy(wrote_, wrote_ + c.links, c.sent);
    std::copy(read_, read_ + c.links, c.got);
    std::string why, read;
    uint64_t dropped[wire::kMaxLinks] = {};
    if (int rc = sync_rails(standby.get(), fds_.data(), c, cfg_.big_gate_timeout_ns, keeping,
                            dropped, why, err)) {
      // Where the counts stopped is unknown: the standby cannot carry
      // gates, and shutting it down ends the peer's counts at once.
      ::shutdown(standby.get(), SHUT_RDWR);
      err.set(rc, "{} on the standby link", err.message);
      return nullptr;
    }
    if (!why.empty()) log_.warn("rails: not kept beside the standby link{}", why);
    for (int k = 1; k < plan_.links; k++)
      if ((keeping >> k & 1u) != 0)
        read += fmt::format("{}link {} {}", read.empty() ? "" : ", ", k, dropped[k]);
    if (!read.empty())
      log_.info("rails: the peer's bytes of the unfinished gate read out ({} bytes)", read);
  }
  std::vector<net::Fd> links(1);
  uint32_t mbit[wire::kMaxLinks] = {plan_.mbit[0]};
  uint64_t rtt[wire::kMaxLinks] = {uint64_t(plan_.rtt_us[0]) * 1000};
  for (int k = 1; k < plan_.links; k++) {
    if (dead_[k] || k == plan_.row_link || !owned_[k].valid()) continue;
    if ((keeping >> k & 1u) == 0) {
      ::shutdown(owned_[k].get(), SHUT_RDWR);
      continue;
    }
    mbit[links.size()] = plan_.mbit[k];
    rtt[links.size()] = uint64_t(plan_.rtt_us[k]) * 1000;
    kept.push_back(k);
    links.push_back(std::move(owned_[k]));
    fds_[size_t(k)] = -1;  // the new transport's now
  }
  if (links.size() < 2) return nullptr;
  links[0] = std::move(standby);
  wire::RailPlan plan;
  share_rails(mbit, rtt, int(links.size()), plan);
  // Row gates on the standby, as without kept rails: a kept rail lost
  // later is then recovered over it, never the pair's end.
  plan.row_link = 0;
  const char *bad = nullptr;
  const BigPlan big = choose_big_plan(links[0].get(), rank, bad);
  std::string which;
  for (size_t j = 0; j < kept.size(); j++)
    which += fmt::format("{}{} ({}/1000)", j ? ", " : "", kept[j], plan.share[j + 1]);
  log_.warn("rails: link{} {} kept beside the standby link ({}/1000), which carries the row "
            "gates", kept.size() > 1 ? "s" : "", which, plan.share[0]);
  return std::make_unique<StripedLink>(std::move(links), plan, cfg_, big, log_, kept);
}

}  // namespace ds4tp::tcp
