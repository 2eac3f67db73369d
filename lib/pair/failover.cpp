// The pair's standby link: opened at bring-up beside an rdma or shm
// transport or a tcp pair's rails, and the failover transport that moves
// to it (multipath/failover.hpp).
#include "pair/pair.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "link/descriptor.hpp"
#include "multipath/failover.hpp"
#include "multipath/standby.hpp"

namespace ds4tp {

int Pair::add_standby(const link::Connection &c, net::Fd primary_data, Error &err) {
  namespace mp = ds4tp::multipath;
  if (!primary_data.valid())
    return err.set(DS4TP_EIO, "cannot duplicate the data connection for the standby set-up: {}",
                   std::strerror(errno));
  mp::StandbySetup s;
  s.data_fd = primary_data.get();
  s.rank = rank();
  s.cookie = c.cookie;
  s.deadline_ns = std::max(c.deadline_ns, now_ns() + ms_to_ns(opt_.hello_timeout_ms));
  s.log = log_;
  std::vector<net::Fd> links;
  std::string why_not;
  if (int rc = mp::open_links(s, links, why_not, err)) return rc;
  if (links.empty()) {
    log_.warn("no failover: the standby tcp link could not be opened: {}", why_not);
    return DS4TP_OK;
  }
  mp::FailoverConfig fc;
  fc.data = c.data_config;
  fc.rank = rank();
  fc.primary_kind = transport();
  fc.control_fd = control_.get();
  fc.log = log_;
  fc.name_lost_links = (peer_.caps & wire::kCapLostLinks) != 0;
  fc.sync_rails = (peer_.caps & wire::kCapRailSync) != 0;
  fc.drop_primary_at = opt_.failover_drill;  // `ds4tp pair --fail-primary-after N`
  fc.switched = [this](int transport) {
    transport_kind_.store(transport, std::memory_order_release);
    failovers_.fetch_add(1, std::memory_order_relaxed);
  };
  log_.info("failover on: a standby tcp link is open beside {}", link_->name());
  link_ = mp::make_failover_link(std::move(link_), std::move(primary_data),
                                           std::move(links[0]), fc);
  return DS4TP_OK;
}

}  // namespace ds4tp
