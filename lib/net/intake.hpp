// Serves every connection that reaches a listening socket at once, each
// through a short exchange of its own, in one poll loop on the caller's
// thread. So a stranger cannot hold the real peers up: bytes that are not
// ours drop a connection at once, one that stalls is dropped at its own
// deadline, and when the pending set is full the oldest of the least
// advanced makes room. The group's rendezvous and data listeners use it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "net/socket.hpp"

namespace ds4tp::net {

// One inbound connection while it is being judged.
struct Visitor {
  Fd fd;
  std::string host;
  int port = 0;
  uint64_t deadline_ns = 0;
  int stage = 0;                // the handler's: how far the exchange got
  size_t need = 0;              // bytes the handler waits for
  std::vector<uint8_t> in;      // holds `need` bytes when judge() runs
  std::vector<uint8_t> out;     // bytes to send (a reply, or a refusal)
  size_t sent = 0;
  std::vector<uint8_t> memo;    // the handler's, kept across stages
  std::array<uint8_t, 32> secret{};  // the handler's (a nonce)
  std::string label() const { return host + ":" + std::to_string(port); }
};

enum class Verdict { kMore, kKeep, kDrop };

class IntakeHandler {
 public:
  virtual ~IntakeHandler() = default;
  // A new connection: queue what to send first and set `need`.
  virtual void open(Visitor &v) = 0;
  // `need` bytes are in v.in. kMore: set the next need (and out); v.in is
  // cleared after. kKeep: the handler took v.fd. kDrop: `why` is logged
  // and v.out, if set, is sent best-effort first (a refusal to read).
  virtual Verdict judge(Visitor &v, std::string &why) = 0;
  virtual bool done() const = 0;
  // Called on every pass of the loop (at least every 100 ms): for a
  // handler that reports its progress.
  virtual void tick(uint64_t /*now_ns*/) {}
};

struct IntakeConfig {
  const char *what = "intake";   // names the listener in log lines
  size_t max_pending = 64;        // connections judged at once
  uint64_t visit_ns = 5'000'000'000ull;  // one connection's whole exchange
  Logger log;
};

struct IntakeCounts {
  uint64_t accepted = 0;
  uint64_t dropped = 0;  // strangers, stalls, refusals, evictions
};

// Serves until h.done() (DS4TP_OK) or `deadline_ns` (DS4TP_ETIMEDOUT).
// A failing accept other than a full fd table is DS4TP_EIO.
int serve_intake(int lfd, IntakeHandler &h, const IntakeConfig &cfg, uint64_t deadline_ns,
                 IntakeCounts &counts, Error &err);

}  // namespace ds4tp::net
