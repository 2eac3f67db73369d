// Big gates over tcp: how a pair moves a large payload each way.
//
// Two strategies, picked once per data connection (choose_big_plan):
//   Duplex:    both directions at once (the transport's exchange()).
//   Alternate: rounds of kBigRoundBytes, one direction at a time: the
//              leader sends a round, the worker receives it and sends its
//              own round, and so on. On loopback this is about twice as
//              fast per direction (one copy pipeline at a time keeps the
//              caches of both cores on one stream); on a real full-duplex
//              wire it halves the rate (bench/README.md, "Big gates on a
//              rate-limited link").
// The rule (DS4TP_BIG_GATE=auto, the default): alternate when the data
// connection runs over the loopback device, full duplex otherwise;
// DS4TP_BIG_GATE=duplex|alternate forces one. Ranks that disagree still
// meet: a duplex rank always takes what the alternating one sends.
//
// Blocking: alternate_exchange blocks like exchange() does, bounded by
// the same deadlines and liveness checks, but a gate of more than one
// round never busy-polls (spin_us applies to one-round gates only). Gate
// thread only; no allocation on success.
#pragma once

#include <cstdint>

#include "common/error.hpp"
#include "os/wait.hpp"
#include "link/data_config.hpp"
#include "wire/gate_header.hpp"

namespace ds4tp::tcp {

// Half the data socket's 4 MiB buffers: a round fits in flight.
constexpr uint64_t kBigRoundBytes = 2ull << 20;

enum class BigMode { Duplex, Alternate };

struct BigPlan {
  BigMode mode = BigMode::Duplex;
  bool sends_first = false;  // the leader opens every alternation
  uint64_t round = kBigRoundBytes;
  const char *why = "";  // static text, for the log
};

// True when connected socket `fd` runs over the loopback device: the peer
// is a loopback address or this end's own address.
bool over_loopback(int fd);

// Pure: how much of its `total`-byte stream (header + payload) a rank may
// have sent once it holds `got` bytes of the peer's stream of the same
// length. Duplex: all of it. The header is never held back.
uint64_t send_limit(const BigPlan &plan, uint64_t got, uint64_t total);

// Reads DS4TP_BIG_GATE and, for auto, looks at the connected socket `fd`.
// `rank` 0 is the leader. An unknown value acts as auto; `bad` then
// points at it (for a warning), else is nullptr.
BigPlan choose_big_plan(int fd, int rank, const char *&bad);

// What the alternating exchange borrows from its transport.
struct BigLink {
  int fd = -1;
  const DataConfig *cfg = nullptr;
  const os::WaitPolicy *policy = nullptr;
  uint64_t start_ns = 0;        // the gate's start (its step's start_ns)
  uint64_t *seen_ns = nullptr;  // its step's seen_ns
  const char *what = "data connection";  // the socket in messages
};

// One big gate in alternating rounds: `mine` then `bytes` from `out`, the
// peer's header (checked as exchange() checks it) then its payload into
// `in`. Errors name the gate, the bytes moved and the round.
int alternate_exchange(const BigLink &link, const BigPlan &plan, const wire::GateHeader &mine,
                       const uint8_t *out, uint8_t *in, uint64_t bytes, Error &err);

}  // namespace ds4tp::tcp
