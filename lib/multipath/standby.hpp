// A pair's extra tcp links beside its data connection, opened at
// bring-up: the standby link beside a primary that is not tcp (rdma,
// shm), idle until the primary fails (failover.hpp), or the rails of a
// tcp pair, which stripe its big gates (tcp/rails.hpp).
//
// The leader listens (the standby: on the address its data connection
// arrived at; rails: on every address, one port) and offers the port on
// the data connection; the worker dials (the standby: the address it
// reached the leader at; rails: each address of its list, in order) and
// proves each link with the pair cookie and the link's index, as the data
// connection was proven; a connection without them is dropped. A rail
// that reaches the leader at another rail's address means the two ranks
// list their rails in another order: named, on both ranks
// (wire/failover.hpp has the messages).
//
// Blocking, bounded by `deadline_ns`; runs on the connecting thread while
// both ranks are in step on the data connection (right after the
// transport's set-up, before its first gate).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "net/socket.hpp"

namespace ds4tp::multipath {

struct StandbySetup {
  int data_fd = -1;  // the pair's data connection; borrowed
  int rank = 0;      // 0 leader
  uint64_t cookie = 0;
  uint64_t deadline_ns = 0;
  Logger log;
  // Rails: the leader's IPv4 address of each link, in order, as both ranks
  // list them. Empty: one standby link.
  std::vector<std::string> rails;
};

// DS4TP_OK with `out` holding the links (one, or one per rail); DS4TP_OK
// with `out` empty and `why_not` set when a rank could not listen or
// dial, or the rails are listed in another order (both ranks learn the
// same reason); an error when the data connection itself failed.
int open_links(const StandbySetup &s, std::vector<net::Fd> &out, std::string &why_not,
               Error &err);

}  // namespace ds4tp::multipath
