// The state one bring-up shares among its files; private to lib/connect.
//
//   bringup.cpp  libuv plumbing: the loop, the run-wide timers, connection
//                handles, exact-framing reads, writes, run() and teardown
//   leader.cpp   listening, accepting, judging what each connection sends
//   worker.cpp   dialing with retries, judging the leader's answers
//   keyed.cpp    the pre-shared-key exchange of both sides (nonces, proofs)
//
// The plumbing turns libuv callbacks into the events below and routes each
// to the leader's or the worker's handler; the sides never touch uv
// callbacks directly.
//
// Ownership: Impl owns the loop, the listener and the two run-wide timers.
// Each Conn owns its tcp and timer handles and deletes itself once both
// have closed. Threads: everything runs on the thread inside run().
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <vector>

#include <sys/socket.h>
#include <uv.h>

#include "auth/proof.hpp"
#include "connect/bringup.hpp"

namespace ds4tp::connect {

struct Conn;

struct Bringup::Impl {
  BringupConfig cfg;
  Logger log;
  uv_loop_t loop{};
  bool loop_ok = false;
  uv_tcp_t server{};
  bool server_open = false;
  int bound_port = 0;
  uv_timer_t deadline{};
  uv_timer_t retry{};
  bool timers_open = false;
  int listen_fd = -1;  // leader: bound by listen(), handed to uv in run()

  // One run's state.
  wire::Hello mine;
  std::vector<uint8_t> mine_bytes;
  std::vector<uint8_t> ack_bytes;
  std::vector<uint8_t> data_bytes;
  const HelloJudge *judge = nullptr;
  bool finished = false;
  int result = DS4TP_ETIMEDOUT;
  Error err;
  std::list<Conn *> conns;
  Conn *control = nullptr;  // leader: the worker that passed the hello
  Conn *data = nullptr;
  wire::Hello peer;
  int dropped = 0;
  int auth_failed = 0;          // leader: drops for a missing or wrong key
  std::string last_drop;        // leader: why the last connection was dropped
  auth::Transcript transcript;  // keyed: the control connection that passed
  // worker
  std::vector<sockaddr_storage> addrs;
  unsigned attempt = 0;
  std::string last_error = "no attempt yet";
  uint64_t started_ns = 0;
  uint64_t last_log_ns = 0;

  bool leader() const { return cfg.role == DS4TP_ROLE_LEADER; }
  bool keyed() const { return !cfg.key.empty(); }

  // Ends the run with `code` (the first call wins).
  void finish(int code) {
    if (finished) return;
    finished = true;
    result = code;
    uv_stop(&loop);
  }
  template <typename... Args>
  void fail(int code, fmt::format_string<Args...> f, Args &&...args) {
    if (finished) return;
    err.set(code, f, std::forward<Args>(args)...);
    finish(code);
  }
  void fail(const Error &e) { fail(e.code, "{}", e.message); }

  // Plumbing (bringup.cpp).
  int start_loop(Error &e);
  Conn *new_conn();
  void close_conn(Conn *c);
  void close_all();
  // Reads one whole message with a fresh hello deadline; read_next reads
  // the next one within what is left of it (keyed exchanges).
  void start_reading(Conn *c);
  void read_next(Conn *c);
  // (Re)arms the connection's hello timer.
  void arm(Conn *c, int ms);
  void write(Conn *c, std::vector<uint8_t> bytes);
  // A write failed: a leader drops a connection that is not yet one of the
  // pair's; otherwise the bring-up fails with `fatal`.
  void write_failed(Conn *c, int uv_rc, const std::string &fatal);

  // Events, one handler per side.
  void leader_message(Conn *c);  // one whole message was read
  void worker_message(Conn *c);
  void leader_lost(Conn *c, const std::string &why);  // EOF or read error
  void worker_lost(Conn *c, const std::string &why);
  void leader_bad_preamble(Conn *c, const Error &e);
  void worker_bad_preamble(Conn *c, const Error &e);
  void leader_timed_out(Conn *c);  // the connection's hello timer fired
  void worker_timed_out(Conn *c);
  void leader_gave_up();  // the run-wide connect deadline passed
  void worker_gave_up();
  void leader_written(Conn *c);  // a write completed (the worker needs no event)

  // Leader (leader.cpp).
  int leader_start(Error &e);
  void drop(Conn *c, const std::string &why);
  void reject(Conn *c, wire::RejectReason reason, const std::string &why);
  bool leader_busy(Conn *c);
  void leader_adopt(Conn *c, wire::Hello h);
  void leader_first(Conn *c);
  void leader_data(Conn *c);

  // Worker (worker.cpp).
  void worker_attempt();
  void worker_retry(const std::string &why);
  void worker_connected(Conn *c);
  int dial(Conn *c, const sockaddr_storage &target);
  void dial_data();
  bool worker_decode_hello(Conn *c, wire::Hello &h);
  void worker_judge(Conn *c, wire::Hello h);
  void worker_data(Conn *c);
  void worker_wrong_version(Conn *c);

  // Keyed exchange (keyed.cpp).
  void leader_nonce(Conn *c);
  void leader_keyed(Conn *c);
  bool worker_send_nonce(Conn *c);  // false: the run failed
  void worker_keyed(Conn *c);
};

// One bring-up connection with exact framing: the read buffer is sized to
// the bytes still expected, so nothing past a message is ever consumed.
struct Conn {
  Bringup::Impl *impl = nullptr;
  uv_tcp_t tcp{};
  uv_timer_t timer{};
  uv_connect_t connect_req{};
  int open_handles = 0;
  bool closing = false;
  bool is_data = false;  // worker: this is the data connection
  std::vector<uint8_t> buf;
  size_t have = 0;
  size_t need = wire::kPreambleBytes;
  bool have_preamble = false;
  bool complete = false;  // one whole message read; further bytes are noise
  wire::Preamble pre;
  std::string name = "?";
  int pending_verdict = DS4TP_OK;  // leader: fatal verdict to apply after writing
  Error verdict_err;
  uint64_t deadline_ns = 0;  // the whole hello exchange on this connection
  // Keyed bring-up: which message comes next, what was exchanged so far.
  enum class Phase { First, AwaitNonce, AwaitHello, AwaitProof } phase = Phase::First;
  auth::Transcript tr;
  wire::Hello hello;  // the peer's decoded hello, until its proof verifies
  // Leader: close after the pending write (an auth reject) and log why.
  bool drop_after_write = false;
  std::string drop_reason;

  bool is(wire::Kind k) const { return pre.kind == uint16_t(k); }
  // The body of the message just read, and the whole message.
  const uint8_t *body() const { return buf.data() + wire::kPreambleBytes; }
  size_t body_len() const { return pre.body_bytes; }
  std::vector<uint8_t> message() const {
    return std::vector<uint8_t>(buf.begin(), buf.begin() + long(need));
  }
};

// The peer's printable address, "host:port" or "[v6]:port".
std::string addr_name(const sockaddr *sa);

std::vector<uint8_t> concat(std::vector<uint8_t> a, const std::vector<uint8_t> &b);

}  // namespace ds4tp::connect
