// An rdma pair's rails (ds4tp_options.rdma_rails): each rail its own port,
// registration and queue pair beside the primary's. At attach each rail's
// queue pair is traded and connected like the primary's, then every link
// moves a sample each way: on a rail that sample is its warm-up, so a
// rail whose cable joins other ports (crossed) or none is named there,
// on both ranks, instead of hanging a later gate. The leader turns the
// samples' rates and round trips into the plan (rail_share.hpp) and sends
// it on the data connection; the worker takes it as it is.
//
// Row and batch gates run on one link, whose receive windows and drains
// are the pair's ordering: the primary, or a rail whose round trip is
// clearly shorter (under 3/4 of the primary's) where both ranks offer
// kCapRailRows. A rail lost in a striped gate fails the gate;
// the failover (multipath/failover.hpp) learns which link from
// lost_links(), and where both ranks named only rails, makes the
// transport again without them (remake_without) over the standby tcp
// link, so the pair goes on over rdma; a lost primary goes to tcp.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/clock.hpp"
#include "multipath/rail_share.hpp"
#include "link/rdma/probe.hpp"
#include "link/rdma/setup_link.hpp"
#include "link/rdma/pair_link_impl.hpp"

namespace ds4tp::rdma {

bool parse_rail(const std::string &text, ProbeRequest &req) {
  req = ProbeRequest{};
  const size_t c1 = text.find(':');
  req.device = text.substr(0, c1);
  if (req.device.empty()) return false;
  if (c1 == std::string::npos) return true;
  const size_t c2 = text.find(':', c1 + 1);
  auto number = [](const std::string &s, long lo, long hi, int &out) {
    char *end = nullptr;
    const long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != 0 || v < lo || v > hi) return false;
    out = int(v);
    return true;
  };
  if (!number(text.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1), 1,
              255, req.port))
    return false;
  return c2 == std::string::npos || number(text.substr(c2 + 1), 0, 65535, req.gid_index);
}

int open_rail(const std::string &text, int index, std::vector<std::unique_ptr<Device>> &out,
              Error &err) {
  ProbeRequest req;
  if (!parse_rail(text, req))
    return err.set(DS4TP_EINVAL, "rdma rail {}: '{}' is not device[:port[:gid_index]]", index,
                   text);
  const ProbeResult found = probe(req);
  if (!found.usable)
    return err.set(DS4TP_EUNSUPPORTED, "rdma rail {} ({}): {}", index, text, found.reason);
  std::unique_ptr<Device> dev;
  if (int rc = open_device(req, found, dev, err))
    return err.set(rc, "rdma rail {} ({}): {}", index, text, err.message);
  out.push_back(std::move(dev));
  return DS4TP_OK;
}

std::string WindowLink::rail_name(int k) const {
  if (user(k) == 0) return "";
  return fmt::format(" on rail {} ({})", user(k), device(k).describe());
}

std::string WindowLink::link_name(int k) const {
  if (user(k) == 0) return fmt::format("the primary ({})", device(k).describe());
  return rail_name(k).substr(4);
}

std::string WindowLink::owing(const uint64_t *rail_recv) {
  std::string s;
  for (int k = 1; rail_recv != nullptr && k <= int(rails_.size()); k++) {
    const QpLink &l = link(k);
    const uint64_t recv = rail_recv[k - 1] - std::min(l.recv_done, rail_recv[k - 1]);
    if (recv > 0 || l.send_done < l.send_posted)
      s += fmt::format("{} {} receive(s) and {} send(s) on {}", s.empty() ? "" : ",", recv,
                       l.send_posted - l.send_done, link_name(k));
  }
  return s.empty() ? s : " (of them" + s + ")";
}

bool WindowLink::links(std::vector<LinkInfo> &out) const {
  if (rails_.empty() || plan_.links == 0) return false;
  for (int u = 0; u < plan_.links; u++) {  // in the user's order
    const int k = user(u);
    LinkInfo l;
    l.transport = DS4TP_TRANSPORT_RDMA;
    l.role = u == 0 ? DS4TP_LINK_DATA : DS4TP_LINK_RAIL;
    l.row = k == 0;
    l.share = plan_.share[k];
    l.rate_mbit = plan_.mbit[k];
    l.rtt_us = plan_.rtt_us[k];
    out.push_back(l);
  }
  return true;
}

std::unique_ptr<lk::Link> WindowLink::remake_without(net::Fd &standby, uint32_t lost,
                                                         std::vector<int> &kept) {
  // Link 0, or a link this pair does not have (both ranks have as many):
  // nothing to go on with.
  if (rails_.empty() || (lost & 1u) != 0 || (lost >> (1 + rails_.size())) != 0 ||
      dev_ == nullptr)
    return nullptr;
  // `lost` and `kept` are in the user's order: rail u is link user(u).
  auto device_at = [&](int u) -> std::unique_ptr<Device> & {
    const int k = user(u);
    return k == 0 ? dev_ : rails_[size_t(k - 1)].dev;
  };
  Endpoint ep;
  std::string gone;
  for (int u = 1; u <= int(rails_.size()); u++) {
    if ((lost >> u & 1u) != 0) {
      gone += fmt::format("{}rail {} ({})", gone.empty() ? "" : ", ", u,
                          device_at(u)->describe());
      continue;
    }
    kept.push_back(u);
    ep.rails.push_back(std::move(device_at(u)));
  }
  log_.warn("rdma: going on without {}: the primary and {} rail(s) are brought up again, the "
            "standby tcp link their data connection",
            gone, ep.rails.size());
  ep.device = std::move(device_at(0));
  ep.rail_rows = rail_rows_;
  ep.row_link = pinned_row_;
  ep.link = make_socket_setup_link(standby.get());
  ep.data = std::move(standby);
  ep.control_fd = control_fd_;
  ep.rank = rank_;
  return make_pair_link(std::move(ep), cfg_, tun_, sched_, log_);
}

int WindowLink::attach_rails(Error &err) {
  const int links = 1 + int(rails_.size());
  uint32_t mbit[wire::kMaxLinks] = {};
  uint64_t rtt[wire::kMaxLinks] = {};
  const uint64_t limit = warm_limit_ns();
  const uint32_t attempts = std::max(1u, std::min(tun_.setup_attempts, wire::kMaxSetupAttempt));
  // Each rail's queue pair, then its sample, which is its warm-up: a UC
  // rail whose sample was lost is made again, as the primary is (both
  // ranks read the same verdicts, so they retry together).
  for (int k = 1; k < links; k++) {
    for (uint32_t a = 0;; a++) {
      bool ok = false;
      if (int rc = attach_rail(k, err)) return rc;
      if (int rc = sample_link(k, mbit[k], ok, err)) return rc;
      if (ok) break;
      if (link(k).qp->local_info().qp_type != wire::kQpUc || a + 1 >= attempts)
        return DS4TP_EIO;  // err names the rail and what was lost
      setup_retries_.fetch_add(1, std::memory_order_relaxed);
      log_.warn("rdma rail {}: sample attempt {} failed ({}); making its queue pair again", k,
                a + 1, err.message);
      err.clear();
    }
  }
  bool ok = false;
  if (int rc = sample_link(0, mbit[0], ok, err)) return rc;
  if (!ok) return DS4TP_EIO;
  for (int k = 0; k < links; k++)
    if (int rc = ping_link(k, limit, rtt[k], err)) return rc;
  if (int rc = trade_plan(mbit, rtt, err)) return rc;
  if (plan_.row_link != 0) adopt_row_link(plan_.row_link);
  stripe_round_ = striped_round();
  std::string shares;
  for (int u = 0; u < links; u++) {
    const int k = user(u);
    shares += fmt::format("{}{} {}/1000 ({} Mbit/s, {} us)", u ? ", " : "",
                          device(k).describe(), plan_.share[k], plan_.mbit[k], plan_.rtt_us[k]);
  }
  log_.info("rdma rails: big gates of {} KiB or more split in rounds of {} KiB: {}; row and "
            "batch gates on {}",
            kStripeMinBytes / 1024, stripe_round_ / 1024, shares, link_name(0));
  return DS4TP_OK;
}

void WindowLink::adopt_row_link(int r) {
  Rail &x = rails_[size_t(r - 1)];
  std::swap(dev_, x.dev);
  std::swap(qpl_, x.q);
  std::swap(ring_, x.ring);
  std::swap(registered_, x.registered);
  std::swap(rkey_, x.rkey);
  std::swap(plan_.share[0], plan_.share[r]);
  std::swap(plan_.mbit[0], plan_.mbit[r]);
  std::swap(plan_.rtt_us[0], plan_.rtt_us[r]);
  row_ = r;
  size_row_link();  // trade_plan checked that its queues hold the windows
  have_last_batch_ = false;
}

uint64_t WindowLink::striped_round() const {
  // Every link's part of a round must fit a quarter of its receive queue
  // and its send queue. A link's part is about the round times its share;
  // the 4 KiB rounding may give the last link up to 4 KiB per other link
  // more, in a short last round too, so that much is kept spare.
  const int links = plan_.links;
  auto cap = [&](int k) {
    const QpLink &l = link(k);
    return uint64_t(std::max(1u, std::min(l.rdepth / 4, l.sdepth))) * l.msg;
  };
  const uint64_t spare = uint64_t(links - 1) * 4096;
  uint64_t h = L_.big_staging / 2;
  for (int k = 0; k < links; k++)
    if (plan_.share[k] > 0 && cap(k) > spare)
      h = std::min(h, (cap(k) - spare) * 1000 / plan_.share[k]);
  h = std::max<uint64_t>(h / 4096 * 4096, 4096);
  auto fits = [&](uint64_t round) {
    for (int k = 0; k < links; k++) {
      uint64_t off = 0, len = 0;
      stripe_range(plan_, round, k, off, len);
      if (len + spare > cap(k)) return false;
    }
    return true;
  };
  while (h > 4096 && !fits(h)) h -= 4096;
  return h;
}

int WindowLink::attach_rail(int k, Error &err) {
  Rail &r = rails_[size_t(k - 1)];
  r.q.qp.reset();
  r.q.reset_counters();
  if (!r.registered) {
    if (int rc = r.dev->register_memory(base_, L_.total, r.rkey, err))
      return err.set(rc, "rdma rail {}: registering the slab with {} failed: {}", k,
                     r.dev->describe(), err.message);
    r.registered = true;
  }
  QpRequest req;
  req.uc_only = qpl_.qp->local_info().qp_type == wire::kQpUc;  // as the primary ended up
  req.send_depth = tun_.send_depth;
  req.recv_depth = tun_.recv_depth;
  req.max_msg = tun_.max_msg;
  if (int rc = r.dev->create_qp(req, r.q.qp, err))
    return err.set(rc, "rdma rail {}: {}", k, err.message);
  wire::RdmaInfo mine = r.q.qp->local_info();
  mine.attempt = uint32_t(k);
  mine.slab_addr = reinterpret_cast<uintptr_t>(base_);
  mine.slab_bytes = L_.total;
  mine.rkey = r.rkey;
  wire::RdmaInfo peer;
  if (int rc = trade<wire::kRdmaInfoPayload>(wire::kFrameRdmaInfo, mine, peer,
                                             wire::encode_rdma_info, wire::decode_rdma_info, err))
    return rc;
  if (peer.attempt != uint32_t(k) || peer.qp_type != mine.qp_type)
    return err.set(DS4TP_EUNSUPPORTED,
                   "rdma rail {}: this rank made an {} queue pair for it, the peer an {} one for "
                   "its rail {}",
                   k, wire::qp_type_name(mine.qp_type), wire::qp_type_name(peer.qp_type),
                   peer.attempt);
  r.q.msg = std::min({mine.max_msg, peer.max_msg, tun_.max_msg});
  r.q.rdepth = std::min(mine.recv_depth, peer.recv_depth);
  r.q.sdepth = std::min(mine.send_depth, peer.send_depth);
  if (r.q.rdepth < 8)
    return err.set(DS4TP_EUNSUPPORTED, "rdma rail {} ({}): a receive queue depth of {} is too "
                   "small for a rail (at least 8)", k, r.dev->describe(), r.q.rdepth);
  r.ring.assign(r.q.rdepth + 1, Expect{});
  if (int rc = r.q.qp->connect(peer, err))
    return err.set(rc, "rdma rail {} ({}): {}", k, r.dev->describe(), err.message);
  wire::RdmaReady ready{uint32_t(k)};
  return trade<wire::kRdmaReadyPayload>(wire::kFrameRdmaReady, ready, ready,
                                        wire::encode_rdma_ready, wire::decode_rdma_ready, err);
}

int WindowLink::sample_link(int k, uint32_t &mbit, bool &ok, Error &err) {
  const QpLink &l = link(k);
  const uint64_t bytes = std::min<uint64_t>(
      {L_.big_staging / 2, uint64_t(std::min(l.rdepth / 2, l.sdepth)) * l.msg, 4u << 20});
  Crossing c;
  if (int rc = cross(k, uint32_t(k), 0x100u + uint32_t(k), bytes, "rail sample", c, err))
    return rc;
  mbit = uint32_t(std::max<uint64_t>(1, bytes * 8 * 1000 / c.ns));  // bits/us = Mbit/s
  // Nothing of the sample may stay posted: gates count from zero.
  if ((ok = c.ok())) {
    link(k).reset_counters();
    return DS4TP_OK;
  }
  const char *in = c.got ? "worked" : c.waited ? "corrupted" : "lost";
  const char *out = c.peer_got ? "worked" : "lost";
  const std::string why = c.why.empty() ? "" : "; " + c.why;
  if (k == 0)
    err.set(DS4TP_EIO, "rdma: the primary link's sample did not cross (peer -> this rank {}, "
            "this rank -> peer {}{})", in, out, why);
  else
    err.set(DS4TP_EIO,
            "rdma rail {} ({}): its sample did not cross (peer -> this rank {}, this rank -> "
            "peer {}{}): its cable joins other ports than the peer's rail {} (the ranks list "
            "their rails in another order than they are cabled: crossed), or it is down",
            k, rails_[size_t(k - 1)].dev->describe(), in, out, why, k);
  return DS4TP_OK;  // not an error here: the caller decides (a UC rail is made again)
}

int WindowLink::wait_link(int k, uint64_t want_recv, const Op &op, uint64_t limit_ns,
                             Error &err) {
  if (k == 0) return wait_for(want_recv, qpl_.send_posted, op, err, limit_ns);
  // Only rail k owes receives: the others' wants are where they stand
  // (wait_for leaves rails not made yet alone).
  uint64_t rail_recv[wire::kMaxLinks] = {};
  for (int j = 1; j <= int(rails_.size()); j++) rail_recv[j - 1] = link(j).recv_posted;
  rail_recv[k - 1] = want_recv;
  return wait_for(qpl_.recv_posted, qpl_.send_posted, op, err, limit_ns, 0, rail_recv);
}

int WindowLink::ping_link(int k, uint64_t limit_ns, uint64_t &rtt_ns, Error &err) {
  constexpr uint32_t kPings = 4, kBytes = 64;
  Op op;
  op.step = "rail ping";
  QpLink &l = link(k);
  auto t = [k](uint32_t) { return warm_tag(0x200u + uint32_t(k)); };
  const uint64_t first = l.recv_posted;
  for (uint32_t i = 0; i < kPings; i++)
    if (int rc = post_run_recv(k, base_ + L_.big_in + i * kBytes, kBytes, t, op, err)) return rc;
  wire::RdmaPosted posted{uint32_t(k), kPings};
  if (int rc = trade<wire::kRdmaPostedPayload>(wire::kFrameRdmaPosted, posted, posted,
                                               wire::encode_rdma_posted,
                                               wire::decode_rdma_posted, err))
    return rc;
  // The leader sends and times until the worker's answer lands; the
  // worker answers each ping as it lands.
  rtt_ns = UINT64_MAX;
  for (uint32_t i = 0; i < kPings; i++) {
    const uint64_t t0 = now_ns();
    if (rank_ != 0)
      if (int rc = wait_link(k, first + i + 1, op, limit_ns, err)) return rc;
    if (int rc = post_rail_send(k, base_ + L_.big_out, kBytes, t, op, err)) return rc;
    if (rank_ == 0) {
      if (int rc = wait_link(k, first + i + 1, op, limit_ns, err)) return rc;
      rtt_ns = std::min(rtt_ns, now_ns() - t0);
    }
  }
  if (int rc = wait_link(k, l.recv_posted, op, limit_ns, err)) return rc;
  l.reset_counters();
  return DS4TP_OK;
}

int WindowLink::trade_plan(const uint32_t *mbit, const uint64_t *rtt, Error &err) {
  const int links = 1 + int(rails_.size());
  const uint64_t deadline = now_ns() + tun_.setup_timeout_ns;
  if (rank_ != 0) {
    if (int rc = receive_rail_plan(data_.get(), links, deadline, plan_, err)) return rc;
    const int r = plan_.row_link;
    if (r != 0 && !rows_may_move_to(r))
      return err.set(DS4TP_EPROTO,
                     "rdma rails: the leader's plan runs row gates on rail {} ({}), which this "
                     "rank {}",
                     r, device(r).describe(),
                     rail_rows_ ? "cannot: its queues do not hold the row windows"
                                : "did not agree to");
    return DS4TP_OK;
  }
  share_rails(mbit, rtt, links, plan_);
  // Row gates move to a rail only for a clearly shorter round trip: a
  // near tie is noise, and the primary is where the user put them.
  int r = plan_.row_link;
  if (r != 0 && rtt[r] * 4 >= rtt[0] * 3) r = 0;
  r = pin_row_link(links, r, pinned_row_);
  if (r != 0 && !rows_may_move_to(r)) r = 0;
  plan_.row_link = uint16_t(r);
  return send_rail_plan(data_.get(), plan_, deadline, err);
}

}  // namespace ds4tp::rdma
