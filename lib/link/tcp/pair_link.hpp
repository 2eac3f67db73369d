// A tcp pair's link: the data connection as a two-member tcp::Mesh
// (mesh.hpp), this rank member 0 and the peer member 1. Every payload is
// preceded by its gate header, both directions driven at once on a
// non-blocking socket so two ranks writing large payloads simultaneously
// can never deadlock: a gate is one step of the loop a group's steps run
// too. A pair's gate gets the pair's watch (the socket, the peer's
// liveness), its big gates may alternate (big_exchange.hpp), and its
// failures are worded as gates' (pair_gates.cpp).
#pragma once

#include <memory>

#include "link/link.hpp"
#include "net/socket.hpp"
#include "link/tcp/big_exchange.hpp"
#include "link/data_config.hpp"

namespace ds4tp::tcp {

// Takes ownership of the connected data socket `fd`; big gates move as
// `big` says (big_exchange.hpp). `what` names the socket in messages (a
// string literal: a rails pair's row link may be "rail 1 link").
std::unique_ptr<link::Link> make_pair_link(net::Fd fd, const DataConfig &cfg, const BigPlan &big,
                                           const char *what = "data connection");

}  // namespace ds4tp::tcp
