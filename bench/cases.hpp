// One measured case (a section, a transport and a size) and the code both
// ranks run for it.
//
// A case opens one library pair per wait policy (spin_us) and uses the
// session's raw baseline connections, then runs rounds in which every
// variant (library policies and raw baselines, interleaved A B A B) does
// `warm` unrecorded and `iters` recorded exchanges. Both ranks walk the
// same sequence, so every exchange meets its peer; only the leader's
// samples are reported. Every payload is stamped with its iteration and
// checked on arrival, so a number can only come from bytes that moved.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "raw_shm.hpp"
#include "raw_tcp.hpp"
#include "sock.hpp"

namespace bench {

enum class Section { Row, Batch, Big, Token, Control, Group };
const char *section_name(Section s);
bool section_from_name(const std::string &n, Section &out);

// Control round trips: the leader sends a command frame and waits for the
// worker's reply on the control connection.
enum : uint32_t {
  kEvalLogits = 0,  // EVAL asking for a 1-float logits half (EVAL has no ack)
  kMtpAck = 1,      // MTP, the eval command that is answered by COMMAND_ACK
};
const char *control_op_name(uint32_t op);

struct Case {
  Section section = Section::Row;
  int transport = 0;        // ds4tp_transport
  uint64_t bytes = 0;       // row/token: vector bytes; big: payload; batch: row bytes
  uint32_t rows = 1;        // batch rows
  uint32_t layers = 1;      // token loop: model layers (2 gates each)
  uint32_t op = 0;          // control: kEvalLogits or kMtpAck
  int rounds = 1;           // recorded rounds after one warm-up round
  int iters = 1;            // recorded exchanges (tokens) per variant per round
  int warm = 1;             // unrecorded exchanges before each block
  int warm_first = 1;       // unrecorded exchanges per variant in the warm-up round
  std::vector<int> policies;  // library spin_us values, one pair each
  // Big tcp gates: one pair per policy per DS4TP_BIG_GATE value given here
  // (duplex, alternate, auto); empty: one per policy, the environment's.
  std::vector<std::string> big_modes;

  Msg to_msg() const;
  static bool from_msg(const Msg &m, Case &out);
  std::string label() const;  // "row tcp 16 KiB"
};

// Per-process state every case shares.
struct Session {
  int rank = 0;  // 0 leader, 1 worker
  Lines coord;
  std::string lib_host;  // leader: listen address; worker: the leader's address
  int lib_port = 0;      // leader: port for library pairs (0 = any)
  int connect_timeout_ms = 10000;
  int gate_timeout_ms = 2000;
  RawTcp raw_tcp;  // invalid when the session has none
  RawShm raw_shm;  // invalid across hosts
  // Caller buffers for big gates (library and raw alike), sized for the
  // largest big case; touched once so page faults stay out of the timing.
  std::vector<uint8_t> big_out, big_in;
};

struct VariantResult {
  std::string name;  // "lib spin_us=200 [duplex]", "raw block", "raw busy", "raw alternate",
                     // "raw copy2"
  bool lib = false;
  int spin_us = -1;  // lib only
  // Shown with its ratio but never the baseline: "raw busy+32 B" (row),
  // "raw busy+sum" and "raw busy+24 B+sum" (group).
  bool reference = false;
  std::vector<uint64_t> ns;  // recorded samples (per exchange; per token in the token loop)
};

struct CaseResult {
  Case c;
  std::vector<VariantResult> variants;
  // Set when the library could not bring the transport up (e.g. shm not
  // built yet, rdma without a device): the case measured nothing.
  bool unavailable = false;
  std::string why;
};

// Opening a library handle on both ranks: the leader opens first and
// offers its listening port (or, `mine` set, why it could not) in a
// `verb` line; the worker takes it (setting `mine` when the leader
// failed: "the leader could not open its <what>") and dials.
Status offer_port(Session &s, const char *verb, const std::string &mine, int port);
Status take_port(Session &s, const char *verb, const char *what, int &port, std::string &mine);

// After both ranks tried to open a library handle (`mine`: this rank's
// failure, empty when it worked) they swap a STATUS, so a failure on either
// side is seen by both: `unavailable` then says why. A failed Status only
// when the coordination connection itself fails.
Status agree_open(Session &s, const std::string &mine, std::string &unavailable);

// Runs `c` on this rank. A transport that cannot be brought up is
// reported in `out` (unavailable), not as a failure; any failure after
// set-up (a gate error, a corrupted payload) is a failed Status.
Status run_case(Session &s, const Case &c, CaseResult &out);

}  // namespace bench
