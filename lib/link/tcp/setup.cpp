// The tcp descriptor: always available; the data connection bring-up
// opened is the transport (with rails: they open beside it, are measured,
// and big gates stripe over all of them), and a group's links are its mesh.
#include <algorithm>

#include "common/clock.hpp"
#include "link/descriptor.hpp"
#include "multipath/rail_share.hpp"
#include "multipath/standby.hpp"
#include "link/tcp/group_link.hpp"
#include "link/tcp/rails.hpp"
#include "link/tcp/striped.hpp"
#include "link/tcp/pair_link.hpp"
#include "wire/hello.hpp"

namespace ds4tp::link {

namespace {

void tcp_available(const Query &, Availability &out) {
  out.usable = true;
  out.why = "always available";
}

// The rails, open and measured.
struct Rails : State {
  std::vector<net::Fd> links;  // link 1.. (link 0 is the data connection)
  wire::RailPlan plan;
};

int tcp_setup(Connection &c, const Availability &, std::unique_ptr<State> &prepared,
              std::string &, Error &err) {
  if (c.rails.empty()) return DS4TP_OK;
  multipath::StandbySetup s;
  s.data_fd = c.data.get();
  s.rank = c.rank;
  s.cookie = c.cookie;
  s.deadline_ns = std::max(c.deadline_ns, now_ns() + c.frame_timeout_ns);
  s.log = c.log;
  s.rails = c.rails;
  auto r = std::make_unique<Rails>();
  std::string why_not;
  if (int rc = multipath::open_links(s, r->links, why_not, err)) return rc;
  if (r->links.empty()) return err.set(DS4TP_EUNSUPPORTED, "rails: {}", why_not);
  std::vector<int> fds{c.data.get()};
  for (auto &l : r->links) fds.push_back(l.get());
  if (int rc = tcp::plan_rails(c.rank, fds, s.deadline_ns, c.row_link, r->plan, err)) return rc;
  std::string split;
  for (int k = 0; k < r->plan.links; k++)
    split += fmt::format("{}link {} {} Mbit/s {}/1000", k ? ", " : "", k, r->plan.mbit[k],
                         r->plan.share[k]);
  c.log.info("rails: {} links ({}); big gates of {} KiB or more split in those shares, row "
             "gates on link {}",
             r->plan.links, split, kStripeMinBytes / 1024, r->plan.row_link);
  prepared = std::move(r);
  return DS4TP_OK;
}

std::unique_ptr<link::Link> tcp_make(Connection &c, std::unique_ptr<State> prepared) {
  auto *r = dynamic_cast<Rails *>(prepared.get());
  // Big gates under the striping size run on the row link: its plan.
  const int row_fd = r != nullptr && r->plan.row_link > 0 ? r->links[r->plan.row_link - 1].get()
                                                           : c.data.get();
  const char *bad = nullptr;
  tcp::BigPlan big = tcp::choose_big_plan(row_fd, c.rank, bad);
  if (bad != nullptr)
    c.log.warn("DS4TP_BIG_GATE={} is not duplex, alternate or auto: using auto", bad);
  c.log.debug("tcp big gates: {} ({})",
              big.mode == tcp::BigMode::Alternate ? "alternating rounds" : "full duplex", big.why);
  if (r == nullptr) return tcp::make_pair_link(std::move(c.data), c.data_config, big);
  std::vector<net::Fd> links;
  links.push_back(std::move(c.data));
  for (auto &l : r->links) links.push_back(std::move(l));
  return tcp::make_striped_link(std::move(links), r->plan, c.data_config, big, c.log);
}

int tcp_mesh_setup(const MeshConnection &, const Availability &, std::unique_ptr<State> &,
                   std::string &, Error &) {
  return DS4TP_OK;
}

std::unique_ptr<link::Link> tcp_mesh_make(const MeshConnection &c, std::vector<net::Fd> fds,
                                        std::unique_ptr<State>) {
  return std::make_unique<tcp::Mesh>(std::move(fds), c.rank, c.chunk, c.timeout_ns, c.policy,
                                     c.adaptive, c.names);
}

}  // namespace

const Descriptor kTcp{"tcp",          "TCP",         DS4TP_TRANSPORT_TCP, wire::kCapTcp, false,
                      tcp_available,  tcp_setup,     tcp_make,
                      tcp_mesh_setup, tcp_mesh_make};

}  // namespace ds4tp::link
