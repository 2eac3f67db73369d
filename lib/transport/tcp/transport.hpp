// TCP data plane: one dedicated socket, every payload preceded by a gate
// header, both directions driven at once on a non-blocking socket so two
// ranks writing large payloads simultaneously can never deadlock. The
// socket is a two-member tcp::Mesh (mesh.hpp): a gate is one of its
// steps, the loop a group's steps run too.
#pragma once

#include <memory>

#include "net/socket.hpp"
#include "transport/tcp/big_exchange.hpp"
#include "transport/transport.hpp"

namespace ds4tp {

// Takes ownership of the connected data socket `fd`; big gates move as
// `big` says (big_exchange.hpp). `link` names the socket in messages (a
// string literal: a rails pair's row link may be "rail 1 link").
std::unique_ptr<Transport> make_tcp_transport(net::Fd fd, const DataConfig &cfg,
                                              const tcp::BigPlan &big,
                                              const char *link = "data connection");

}  // namespace ds4tp
