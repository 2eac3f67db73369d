// The pair's standby link: a second tcp connection, opened at bring-up
// beside a primary that is not tcp (rdma, shm), idle until the primary
// fails (failover.hpp). The leader listens on the address its data
// connection arrived at (port 0), offers the port on the data connection,
// and the worker dials the address it reached the leader at; the worker
// proves the link with the pair cookie, as the data connection was
// proven, and a connection without it is dropped (wire/failover.hpp has
// the four messages).
//
// Blocking, bounded by `deadline_ns`; runs on the connecting thread while
// both ranks are in step on the data connection (right after the
// primary's set-up, before its first gate).
#pragma once

#include <cstdint>
#include <string>

#include "common/error.hpp"
#include "common/log.hpp"
#include "net/socket.hpp"

namespace ds4tp::transport {

struct StandbySetup {
  int data_fd = -1;  // the pair's data connection; borrowed
  int rank = 0;      // 0 leader
  uint64_t cookie = 0;
  uint64_t deadline_ns = 0;
  Logger log;
};

// DS4TP_OK with `out` connected; DS4TP_OK with `out` invalid and
// `why_not` set when a rank could not listen or dial (both ranks learn
// the same reason); an error when the data connection itself failed.
int open_standby(const StandbySetup &s, net::Fd &out, std::string &why_not, Error &err);

}  // namespace ds4tp::transport
