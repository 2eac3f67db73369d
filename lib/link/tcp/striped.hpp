// A tcp pair over rails (rails.hpp): row and batch gates on the plan's row
// link, as the tcp transport runs them; each big gate split across every
// link by the plan's shares, all links moving at once, each share a gate
// stream of its own (its gate header's aux is the link's index, its bytes
// the share's), so a share that arrives on the wrong link is EDESYNC.
// Big gates under kStripeMinBytes (rail_share.hpp) stay on the row link.
//
// A rail lost mid big gate (an error on it, or nothing moved on it for a
// gate deadline while it still owed bytes) is recovered on link 0: both
// ranks send their share of it again there, the gate completes, and
// later gates leave that link out (row gates move to link 0 if they ran
// on it). Each striped gate ends with an acknowledgement each way on link
// 0, so no rank leaves a gate whose share its peer may still need. Link 0
// itself lost fails the gate as a data connection would; a failover then
// keeps the rails it can beside the standby (over_standby: where a
// striped gate was in flight, once the ranks traded what each wrote on
// them, rail_sync.hpp).
#pragma once

#include <memory>
#include <vector>

#include "common/log.hpp"
#include "net/socket.hpp"
#include "link/tcp/big_exchange.hpp"
#include "link/link.hpp"
#include "link/data_config.hpp"
#include "wire/failover.hpp"

namespace ds4tp::tcp {

// Takes the links (links[k]: link k of the plan, 0 the data connection).
std::unique_ptr<link::Link> make_striped_link(std::vector<net::Fd> links,
                                                  const wire::RailPlan &plan,
                                                  const DataConfig &cfg, const BigPlan &big,
                                                  const Logger &log);


}  // namespace ds4tp::tcp
