// Plain IPv4 endpoints for the group's rendezvous and data links: a
// listening socket, a dialler that retries until the peer listens, and a
// non-blocking accept. Every socket it makes is non-blocking.
#pragma once

#include <cstdint>
#include <string>

#include "common/error.hpp"
#include "net/socket.hpp"

namespace ds4tp::net {

// Binds `host` ("" or "0.0.0.0": every address; a name is resolved) and
// `port` (0: any), listens, and sets `bound` to the port it got.
int listen_tcp(const std::string &host, int port, Fd &out, int &bound, Error &err);

// Dials until connected or `deadline_ns` (the peer may not listen yet);
// the socket is tuned for data (tune_data_socket).
int dial_tcp(const std::string &host, int port, uint64_t deadline_ns, Fd &out, Error &err);

// Takes one pending connection of listening socket `lfd` without waiting:
// DS4TP_OK with `out` tuned for data and the peer's address and port, or
// DS4TP_OK with `out` left invalid when none is pending, or DS4TP_EIO
// naming the errno (EMFILE included: the caller may close one and retry).
int accept_tcp(int lfd, Fd &out, std::string &host, int &port, Error &err);

}  // namespace ds4tp::net
