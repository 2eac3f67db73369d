// Connection bring-up on libuv: the leader accepts connections with a
// deadline and drops any that do not complete a valid hello in time; the
// worker dials with a retry timer. Both end with two connected sockets:
// the control connection (hello, later frames) and the data connection
// (gates), tied together by the leader's pair cookie.
//
// Blocking: run() drives a private uv loop until done or the deadline.
// Not thread-safe; one bring-up per pair.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "auth/key.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "net/socket.hpp"
#include "wire/hello.hpp"

namespace ds4tp::connect {

struct BringupConfig {
  int role = 0;  // ds4tp_role
  std::string host;  // leader: listen address; worker: leader address
  int port = 0;
  int connect_timeout_ms = 60000;
  int hello_timeout_ms = 2000;
  // Pre-shared key; empty = no authentication. With a key the hello becomes
  // a mutual HMAC challenge-response (docs/PROTOCOL.md 1.4) and the peer
  // must hold the same key.
  auth::Key key;
};

// Judges a peer's valid hello: DS4TP_OK to go on, or a fatal code with the
// reason in `err` (identity mismatch, role clash, transport impossible).
// Both ranks run the same judgement on each other's hello.
using HelloJudge = std::function<int(const wire::Preamble &, const wire::Hello &, Error &)>;

struct BringupResult {
  net::Fd control;
  net::Fd data;
  wire::Hello peer;
};

class Bringup {
 public:
  Bringup(const BringupConfig &cfg, const Logger &log);
  ~Bringup();
  Bringup(const Bringup &) = delete;
  Bringup &operator=(const Bringup &) = delete;

  // Leader only: resolve, bind and listen. After it, port() is the bound port.
  int listen(Error &err);
  int port() const;

  // Runs the bring-up. `mine` is this rank's hello (the leader's cookie is
  // filled in here). Returns DS4TP_OK with `out` filled, or an error.
  int run(wire::Hello mine, const HelloJudge &judge, BringupResult &out, Error &err);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4tp::connect
