#include "connect/bringup.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <list>
#include <vector>

#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <unistd.h>
#include <uv.h>

#include "auth/proof.hpp"
#include "common/clock.hpp"

namespace ds4tp::connect {

namespace {

std::string addr_name(const sockaddr *sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    auto *in = reinterpret_cast<const sockaddr_in *>(sa);
    uv_ip4_name(in, host, sizeof host);
    port = ntohs(in->sin_port);
    return fmt::format("{}:{}", host, port);
  }
  if (sa->sa_family == AF_INET6) {
    auto *in6 = reinterpret_cast<const sockaddr_in6 *>(sa);
    uv_ip6_name(in6, host, sizeof host);
    port = ntohs(in6->sin6_port);
    return fmt::format("[{}]:{}", host, port);
  }
  return "?";
}

bool is_loopback(const sockaddr *sa) {
  if (sa->sa_family == AF_INET) {
    auto *in = reinterpret_cast<const sockaddr_in *>(sa);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    auto *in6 = reinterpret_cast<const sockaddr_in6 *>(sa);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) return in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

// Blocks SIGPIPE on this thread while libuv writes, and swallows any
// SIGPIPE raised meanwhile, so a peer that vanishes mid-write cannot kill
// the engine's process (a library must not change signal dispositions).
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~SigpipeGuard() {
    if (!was_pending_) {
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGPIPE);
      timespec zero{0, 0};
      while (sigtimedwait(&set, nullptr, &zero) == SIGPIPE) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_;
  bool was_pending_ = false;
};

}  // namespace

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

  bool keyed() const { return !cfg.key.empty(); }
  Conn *new_conn();
  void close_conn(Conn *c);
  void drop(Conn *c, const std::string &why);
  void reject(Conn *c, wire::RejectReason reason, const std::string &why);
  void leader_first(Conn *c);
  void leader_keyed(Conn *c);
  void leader_data(Conn *c);
  void worker_keyed(Conn *c);
  void worker_data(Conn *c);
  void worker_judge(Conn *c, wire::Hello h);
  void on_message(Conn *c);
  void leader_message(Conn *c);
  void worker_message(Conn *c);
  void worker_attempt();
  void worker_retry(const std::string &why);
  void worker_connected(Conn *c);
  void dial_data();
  int start_loop(Error &e);
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

  // The whole message just read, preamble included.
  std::vector<uint8_t> message() const {
    return std::vector<uint8_t>(buf.begin(), buf.begin() + long(need));
  }
};

// One write in flight; owns its bytes until libuv is done with them.
struct WriteOp {
  uv_write_t req{};
  Conn *conn = nullptr;
  std::vector<uint8_t> bytes;
};

namespace {

void on_close(uv_handle_t *h) {
  Conn *c = static_cast<Conn *>(h->data);
  if (--c->open_handles == 0) delete c;
}

void on_alloc(uv_handle_t *h, size_t, uv_buf_t *out) {
  Conn *c = static_cast<Conn *>(h->data);
  *out = uv_buf_init(reinterpret_cast<char *>(c->buf.data() + c->have),
                     unsigned(c->need - c->have));
}

void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *) {
  Conn *c = static_cast<Conn *>(s->data);
  Bringup::Impl *impl = c->impl;
  if (n == 0) return;
  if (n < 0) {
    std::string why = n == UV_EOF ? "closed the connection" : uv_strerror(int(n));
    if (impl->cfg.role == DS4TP_ROLE_LEADER) {
      if (c == impl->control) {
        impl->log.warn("worker {} {} before opening its data connection; waiting "
                       "for a worker again",
                       c->name, why);
        impl->control = nullptr;
        impl->close_conn(c);
      } else {
        impl->drop(c, fmt::format("it {} before a valid hello", why));
      }
    } else if (!c->is_data) {
      impl->worker_retry(fmt::format("the leader {} before answering the hello", why));
    } else {
      impl->fail(DS4TP_EPEERCLOSED,
                 "the leader {} the data connection before accepting it", why);
    }
    return;
  }
  c->have += size_t(n);
  if (c->have < c->need) return;
  if (!c->have_preamble) {
    Error e;
    size_t max_body = wire::kHelloMaxBytes;
    if (wire::decode_preamble(c->buf.data(), c->have, max_body, c->pre, e) != DS4TP_OK) {
      if (impl->cfg.role == DS4TP_ROLE_LEADER) {
        impl->drop(c, e.message);
      } else {
        impl->fail(DS4TP_EPROTO, "the leader at {} sent a bad preamble: {}", c->name,
                   e.message);
      }
      return;
    }
    c->have_preamble = true;
    c->need += c->pre.body_bytes;
    if (c->have < c->need) return;
  }
  // Stop at the message boundary: anything after it belongs to the next
  // protocol phase (gates, frames) and must stay in the socket.
  c->complete = true;
  uv_read_stop(reinterpret_cast<uv_stream_t *>(&c->tcp));
  uv_timer_stop(&c->timer);
  impl->on_message(c);
}

void on_hello_timeout(uv_timer_t *t) {
  Conn *c = static_cast<Conn *>(t->data);
  Bringup::Impl *impl = c->impl;
  if (impl->cfg.role == DS4TP_ROLE_LEADER && c == impl->control) {
    impl->log.warn("worker {} opened no data connection within {} ms; waiting for a "
                   "worker again",
                   c->name, impl->cfg.hello_timeout_ms);
    impl->close_conn(c);
  } else if (impl->cfg.role == DS4TP_ROLE_LEADER) {
    impl->drop(c, fmt::format("no valid hello within {} ms", impl->cfg.hello_timeout_ms));
  } else if (!c->is_data) {
    impl->worker_retry(fmt::format("the leader did not answer the hello within {} ms",
                                   impl->cfg.hello_timeout_ms));
  } else {
    impl->fail(DS4TP_ETIMEDOUT,
               "the leader did not accept the data connection within {} ms",
               impl->cfg.hello_timeout_ms);
  }
}

void start_reading(Conn *c) {
  c->deadline_ns = now_ns() + ms_to_ns(c->impl->cfg.hello_timeout_ms);
  uv_timer_start(&c->timer, on_hello_timeout, uint64_t(c->impl->cfg.hello_timeout_ms), 0);
  uv_read_start(reinterpret_cast<uv_stream_t *>(&c->tcp), on_alloc, on_read);
}

// Reads the next message of a multi-message (keyed) exchange within what
// is left of the connection's hello deadline.
void read_next(Conn *c) {
  c->have = 0;
  c->need = wire::kPreambleBytes;
  c->have_preamble = false;
  c->complete = false;
  int left = ms_left(c->deadline_ns);
  uv_timer_start(&c->timer, on_hello_timeout, uint64_t(left > 0 ? left : 1), 0);
  uv_read_start(reinterpret_cast<uv_stream_t *>(&c->tcp), on_alloc, on_read);
}

std::string peer_name(uv_tcp_t *tcp) {
  sockaddr_storage ss{};
  int len = sizeof ss;
  if (uv_tcp_getpeername(tcp, reinterpret_cast<sockaddr *>(&ss), &len) != 0) return "?";
  return addr_name(reinterpret_cast<sockaddr *>(&ss));
}

void on_connection(uv_stream_t *server, int status) {
  auto *impl = static_cast<Bringup::Impl *>(server->data);
  if (status < 0) {
    impl->log.warn("accept failed: {}", uv_strerror(status));
    return;
  }
  Conn *c = impl->new_conn();
  if (uv_accept(server, reinterpret_cast<uv_stream_t *>(&c->tcp)) != 0) {
    impl->close_conn(c);
    return;
  }
  c->name = peer_name(&c->tcp);
  impl->log.debug("connection from {}", c->name);
  start_reading(c);
}

void on_deadline(uv_timer_t *t) {
  auto *impl = static_cast<Bringup::Impl *>(t->data);
  if (impl->cfg.role == DS4TP_ROLE_LEADER) {
    std::string drops =
        impl->dropped == 0
            ? std::string("no other connection came")
            : fmt::format("{} other connections dropped, {} of them for a missing or wrong "
                          "key; the last: {}",
                          impl->dropped, impl->auth_failed, impl->last_drop);
    impl->fail(DS4TP_ETIMEDOUT,
               "no worker completed the hello on port {} within {} ms ({}): is the worker "
               "running, pointed at this address{}?",
               impl->bound_port, impl->cfg.connect_timeout_ms, drops,
               impl->keyed() ? " and holding the same pre-shared key" : "");
  } else {
    impl->fail(DS4TP_ETIMEDOUT,
               "no connection to the leader at {}:{} after {} ms (last error: {}): "
               "is the leader running, and is the port open on its firewall?",
               impl->cfg.host, impl->cfg.port, impl->cfg.connect_timeout_ms,
               impl->last_error);
  }
}

void on_retry(uv_timer_t *t) { static_cast<Bringup::Impl *>(t->data)->worker_attempt(); }

void on_worker_connect(uv_connect_t *req, int status) {
  Conn *c = static_cast<Conn *>(req->data);
  Bringup::Impl *impl = c->impl;
  if (c->closing) return;
  if (status < 0) {
    if (c->is_data) {
      impl->fail(DS4TP_EIO, "could not open the data connection to {}:{}: {}",
                 impl->cfg.host, impl->cfg.port, uv_strerror(status));
      return;
    }
    impl->close_conn(c);
    impl->worker_retry(uv_strerror(status));
    return;
  }
  impl->worker_connected(c);
}

void on_write_done(uv_write_t *req, int status) {
  auto *op = static_cast<WriteOp *>(req->data);
  Conn *c = op->conn;
  delete op;
  Bringup::Impl *impl = c->impl;
  if (c->closing) return;
  if (c->drop_after_write) {
    impl->drop(c, c->drop_reason);
    return;
  }
  if (status < 0) {
    if (impl->cfg.role == DS4TP_ROLE_LEADER && c != impl->control && c != impl->data) {
      impl->drop(c, fmt::format("write failed: {}", uv_strerror(status)));
    } else {
      impl->fail(DS4TP_EIO, "bring-up write to {} failed: {}", c->name,
                 uv_strerror(status));
    }
    return;
  }
  if (c->pending_verdict != DS4TP_OK) {
    // Our hello reached the peer, so it can report the mismatch too.
    impl->err = c->verdict_err;
    impl->finish(c->pending_verdict);
    return;
  }
  if (impl->cfg.role == DS4TP_ROLE_LEADER && c == impl->data) impl->finish(DS4TP_OK);
  if (impl->cfg.role == DS4TP_ROLE_LEADER && c == impl->control)
    uv_timer_start(&c->timer, on_hello_timeout, uint64_t(impl->cfg.hello_timeout_ms), 0);
}

void write_bytes(Conn *c, std::vector<uint8_t> bytes) {
  auto *op = new WriteOp;
  op->conn = c;
  op->bytes = std::move(bytes);
  op->req.data = op;
  uv_buf_t b = uv_buf_init(reinterpret_cast<char *>(op->bytes.data()),
                           unsigned(op->bytes.size()));
  int rc = uv_write(&op->req, reinterpret_cast<uv_stream_t *>(&c->tcp), &b, 1,
                    on_write_done);
  if (rc != 0) {
    delete op;
    if (c->impl->cfg.role == DS4TP_ROLE_LEADER && c != c->impl->control &&
        c != c->impl->data)
      c->impl->drop(c, fmt::format("write failed: {}", uv_strerror(rc)));
    else
      c->impl->fail(DS4TP_EIO, "bring-up write failed: {}", uv_strerror(rc));
  }
}

std::vector<uint8_t> concat(std::vector<uint8_t> a, const std::vector<uint8_t> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

Conn *Bringup::Impl::new_conn() {
  Conn *c = new Conn;
  c->impl = this;
  c->buf.resize(wire::kPreambleBytes + wire::kHelloMaxBytes);
  uv_tcp_init(&loop, &c->tcp);
  uv_timer_init(&loop, &c->timer);
  c->tcp.data = c;
  c->timer.data = c;
  c->open_handles = 2;
  conns.push_back(c);
  return c;
}

void Bringup::Impl::close_conn(Conn *c) {
  if (c->closing) return;
  c->closing = true;
  conns.remove(c);
  if (control == c) control = nullptr;
  if (data == c) data = nullptr;
  uv_close(reinterpret_cast<uv_handle_t *>(&c->tcp), on_close);
  uv_close(reinterpret_cast<uv_handle_t *>(&c->timer), on_close);
}

void Bringup::Impl::drop(Conn *c, const std::string &why) {
  dropped++;
  last_drop = fmt::format("{} from {}", why, c->name);
  log.warn("dropping connection from {}: {}; still waiting for the worker", c->name, why);
  close_conn(c);
}

// Tells the peer why (so a real worker fails with EAUTH at once instead of
// retrying until its deadline), then drops it. Never fatal for the leader:
// an unauthenticated peer must not be able to end its bring-up.
void Bringup::Impl::reject(Conn *c, wire::RejectReason reason, const std::string &why) {
  auth_failed++;
  c->drop_after_write = true;
  c->drop_reason = fmt::format("{}: {}", ds4tp_err_name(DS4TP_EAUTH), why);
  write_bytes(c, wire::encode_auth_reject(reason));
}

void Bringup::Impl::on_message(Conn *c) {
  if (cfg.role == DS4TP_ROLE_LEADER)
    leader_message(c);
  else
    worker_message(c);
}

void Bringup::Impl::leader_message(Conn *c) {
  if (c->pre.kind == uint16_t(wire::Kind::Data)) {
    leader_data(c);
    return;
  }
  if (c->phase != Conn::Phase::First) {
    leader_keyed(c);
    return;
  }
  leader_first(c);
}

void Bringup::Impl::leader_first(Conn *c) {
  const uint8_t *body = c->buf.data() + wire::kPreambleBytes;
  size_t body_len = c->pre.body_bytes;
  const uint16_t kind = c->pre.kind;
  if (kind == uint16_t(wire::Kind::AuthNonce) && !keyed()) {
    reject(c, wire::RejectReason::KeyUnexpected,
           "the worker offers a pre-shared key but this leader has none (set the same "
           "key on both ranks, or on neither)");
    return;
  }
  if (kind == uint16_t(wire::Kind::Control) && keyed() &&
      c->pre.version == wire::kProtocolVersion) {
    reject(c, wire::RejectReason::KeyRequired,
           "the worker presented no pre-shared key; this leader requires one");
    return;
  }
  if (keyed() && c->pre.version != wire::kProtocolVersion) {
    // Not fatal here: an unauthenticated peer must not end the bring-up.
    reject(c, wire::RejectReason::BadVersion,
           fmt::format("protocol version mismatch: this rank speaks version {}, the peer "
                       "{}; run the same libds4tp on both",
                       wire::kProtocolVersion, c->pre.version));
    return;
  }
  if (kind == uint16_t(wire::Kind::AuthNonce)) {
    Error e;
    if (wire::decode_auth_nonce_body(body, body_len, c->tr.worker_nonce, e) != DS4TP_OK) {
      drop(c, e.message);
      return;
    }
    if (auth::fresh_nonce(c->tr.leader_nonce, e) != DS4TP_OK) {
      fail(e.code, "{}", e.message);
      return;
    }
    c->tr.worker_nonce_msg = c->message();
    c->tr.leader_nonce_msg = wire::encode_auth_nonce(c->tr.leader_nonce);
    c->phase = Conn::Phase::AwaitHello;
    write_bytes(c, c->tr.leader_nonce_msg);
    read_next(c);
    return;
  }
  if (kind != uint16_t(wire::Kind::Control)) {
    drop(c, fmt::format("unexpected connection kind {}", kind));
    return;
  }
  if (control != nullptr) {
    drop(c, fmt::format("worker {} is already paired", control->name));
    return;
  }
  if (c->pre.version != wire::kProtocolVersion) {
    // A real ds4tp peer of another version: answer so it can say so too.
    c->pending_verdict = DS4TP_EVERSION;
    c->verdict_err.set(DS4TP_EVERSION,
                       "protocol version mismatch: this rank speaks version {}, the "
                       "worker at {} speaks {}; run the same libds4tp on both",
                       wire::kProtocolVersion, c->name, c->pre.version);
    write_bytes(c, mine_bytes);
    return;
  }
  wire::Hello h;
  Error e;
  if (wire::decode_hello_body(body, body_len, h, e) != DS4TP_OK) {
    drop(c, e.message);
    return;
  }
  Error verdict;
  int code = (*judge)(c->pre, h, verdict);
  control = c;
  peer = std::move(h);
  if (code != DS4TP_OK) {
    c->pending_verdict = code;
    c->verdict_err = verdict;
  }
  write_bytes(c, mine_bytes);
}

// Keyed leader after the nonces: the worker's hello, then its proof. Only
// a verified proof lets the hello be judged (so only a key holder can end
// the leader's bring-up with a verdict).
void Bringup::Impl::leader_keyed(Conn *c) {
  const uint8_t *body = c->buf.data() + wire::kPreambleBytes;
  size_t body_len = c->pre.body_bytes;
  Error e;
  if (c->phase == Conn::Phase::AwaitHello) {
    if (c->pre.kind != uint16_t(wire::Kind::Control) ||
        c->pre.version != wire::kProtocolVersion) {
      drop(c, fmt::format("expected the worker's hello after the nonces, got kind {} "
                          "version {}",
                          c->pre.kind, c->pre.version));
      return;
    }
    if (wire::decode_hello_body(body, body_len, c->hello, e) != DS4TP_OK) {
      drop(c, e.message);
      return;
    }
    c->tr.worker_hello_msg = c->message();
    c->phase = Conn::Phase::AwaitProof;
    read_next(c);
    return;
  }
  if (c->pre.kind != uint16_t(wire::Kind::AuthProof)) {
    drop(c, fmt::format("expected the worker's proof after its hello, got kind {}",
                        c->pre.kind));
    return;
  }
  wire::Mac got{}, want{};
  if (wire::decode_auth_proof_body(body, body_len, got, e) != DS4TP_OK) {
    drop(c, e.message);
    return;
  }
  if (auth::worker_proof(cfg.key, c->tr, want, e) != DS4TP_OK) {
    fail(e.code, "{}", e.message);
    return;
  }
  if (!auth::mac_equal(got, want)) {
    reject(c, wire::RejectReason::BadProof,
           "the worker's proof does not verify: its pre-shared key differs from this "
           "leader's (or its hello was altered on the way)");
    return;
  }
  if (control != nullptr) {
    drop(c, fmt::format("worker {} is already paired", control->name));
    return;
  }
  Error verdict;
  int code = (*judge)(c->pre, c->hello, verdict);
  control = c;
  peer = std::move(c->hello);
  transcript = c->tr;
  transcript.leader_hello_msg = mine_bytes;
  wire::Mac mine_mac{};
  if (auth::leader_proof(cfg.key, transcript, mine_mac, e) != DS4TP_OK) {
    fail(e.code, "{}", e.message);
    return;
  }
  if (code != DS4TP_OK) {
    c->pending_verdict = code;
    c->verdict_err = verdict;
  }
  write_bytes(c, concat(mine_bytes, wire::encode_auth_proof(mine_mac)));
}

void Bringup::Impl::leader_data(Conn *c) {
  const uint8_t *body = c->buf.data() + wire::kPreambleBytes;
  size_t body_len = c->pre.body_bytes;
  uint64_t cookie = 0;
  bool has_mac = false;
  wire::Mac got{};
  Error e;
  if (c->phase != Conn::Phase::First ||
      wire::decode_data_body(body, body_len, cookie, has_mac, got, e) != DS4TP_OK) {
    drop(c, e.message.empty() ? std::string("data preamble in the middle of a hello")
                              : e.message);
    return;
  }
  if (control == nullptr || cookie != mine.cookie) {
    drop(c, "data connection with an unknown pair cookie");
    return;
  }
  std::vector<uint8_t> ack = ack_bytes;
  if (keyed()) {
    wire::Mac want{}, ack_mac{};
    if (auth::data_proof(cfg.key, transcript, cookie, want, e) != DS4TP_OK ||
        auth::data_ack_proof(cfg.key, transcript, cookie, ack_mac, e) != DS4TP_OK) {
      fail(e.code, "{}", e.message);
      return;
    }
    if (!has_mac || !auth::mac_equal(got, want)) {
      auth_failed++;
      drop(c, fmt::format("{}: the data connection {} (the cookie alone does not admit "
                          "it when a key is set)",
                          ds4tp_err_name(DS4TP_EAUTH),
                          has_mac ? "carries a proof that does not verify"
                                  : "carries no proof"));
      return;
    }
    ack = wire::encode_data_ack(&ack_mac);
  } else if (has_mac) {
    drop(c, "the data connection carries a proof but this leader has no key");
    return;
  }
  data = c;
  write_bytes(c, std::move(ack));
}

void Bringup::Impl::worker_message(Conn *c) {
  const uint8_t *body = c->buf.data() + wire::kPreambleBytes;
  size_t body_len = c->pre.body_bytes;
  if (c->pre.kind == uint16_t(wire::Kind::AuthReject)) {
    uint32_t reason = 0;
    Error e;
    if (wire::decode_auth_reject_body(body, body_len, reason, e) != DS4TP_OK) {
      fail(DS4TP_EPROTO, "the leader at {} sent a malformed reject: {}", c->name, e.message);
      return;
    }
    if (c->pre.version != wire::kProtocolVersion) {
      fail(DS4TP_EVERSION,
           "protocol version mismatch: this rank speaks version {}, the leader at {} "
           "speaks {}; run the same libds4tp on both",
           wire::kProtocolVersion, c->name, c->pre.version);
      return;
    }
    fail(DS4TP_EAUTH, "the leader at {} refused this worker: {}{}", c->name,
         wire::reject_reason_name(reason),
         keyed() ? " (check that both ranks load the same key)"
                 : " (set options.psk, DS4TP_PSK or DS4TP_PSK_FILE to the leader's key)");
    return;
  }
  if (c->is_data) {
    worker_data(c);
    return;
  }
  if (c->pre.version != wire::kProtocolVersion) {
    fail(DS4TP_EVERSION,
         "protocol version mismatch: this rank speaks version {}, the leader at {} "
         "speaks {}; run the same libds4tp on both",
         wire::kProtocolVersion, c->name, c->pre.version);
    return;
  }
  if (keyed()) {
    worker_keyed(c);
    return;
  }
  if (c->pre.kind == uint16_t(wire::Kind::AuthNonce)) {
    fail(DS4TP_EAUTH,
         "the leader at {} requires a pre-shared key and this worker has none: set "
         "options.psk, DS4TP_PSK or DS4TP_PSK_FILE to the leader's key",
         c->name);
    return;
  }
  if (c->pre.kind != uint16_t(wire::Kind::Control)) {
    fail(DS4TP_EPROTO, "the leader at {} answered the hello with kind {}", c->name,
         c->pre.kind);
    return;
  }
  wire::Hello h;
  Error e;
  if (wire::decode_hello_body(body, body_len, h, e) != DS4TP_OK) {
    fail(DS4TP_EPROTO, "the leader at {} sent a malformed hello: {}", c->name, e.message);
    return;
  }
  worker_judge(c, std::move(h));
}

void Bringup::Impl::worker_judge(Conn *c, wire::Hello h) {
  Error verdict;
  int code = (*judge)(c->pre, h, verdict);
  if (code != DS4TP_OK) {
    err = verdict;
    finish(code);
    return;
  }
  peer = std::move(h);
  control = c;
  dial_data();
}

// Keyed worker: the leader's nonce, then its hello, then its proof. The
// leader's hello is judged only once its proof verifies.
void Bringup::Impl::worker_keyed(Conn *c) {
  const uint8_t *body = c->buf.data() + wire::kPreambleBytes;
  size_t body_len = c->pre.body_bytes;
  const uint16_t kind = c->pre.kind;
  Error e;
  switch (c->phase) {
    case Conn::Phase::First:
    case Conn::Phase::AwaitNonce: {
      if (kind == uint16_t(wire::Kind::Control)) {
        fail(DS4TP_EAUTH,
             "the leader at {} answered with a plain hello: it has no pre-shared key, "
             "but this worker has one (set the same key on both ranks, or on neither)",
             c->name);
        return;
      }
      if (kind != uint16_t(wire::Kind::AuthNonce) ||
          wire::decode_auth_nonce_body(body, body_len, c->tr.leader_nonce, e) != DS4TP_OK) {
        fail(DS4TP_EPROTO, "the leader at {} answered the nonce with kind {} ({})", c->name,
             kind, e.message.empty() ? "not a nonce" : e.message);
        return;
      }
      c->tr.leader_nonce_msg = c->message();
      wire::Mac proof{};
      if (auth::worker_proof(cfg.key, c->tr, proof, e) != DS4TP_OK) {
        fail(e.code, "{}", e.message);
        return;
      }
      c->phase = Conn::Phase::AwaitHello;
      write_bytes(c, concat(c->tr.worker_hello_msg, wire::encode_auth_proof(proof)));
      read_next(c);
      return;
    }
    case Conn::Phase::AwaitHello:
      if (kind != uint16_t(wire::Kind::Control)) {
        fail(DS4TP_EPROTO, "the leader at {} sent kind {} where its hello belongs", c->name,
             kind);
        return;
      }
      if (wire::decode_hello_body(body, body_len, c->hello, e) != DS4TP_OK) {
        fail(DS4TP_EPROTO, "the leader at {} sent a malformed hello: {}", c->name,
             e.message);
        return;
      }
      c->tr.leader_hello_msg = c->message();
      c->phase = Conn::Phase::AwaitProof;
      read_next(c);
      return;
    case Conn::Phase::AwaitProof: {
      wire::Mac got{}, want{};
      if (kind != uint16_t(wire::Kind::AuthProof) ||
          wire::decode_auth_proof_body(body, body_len, got, e) != DS4TP_OK) {
        fail(DS4TP_EPROTO, "the leader at {} sent kind {} where its proof belongs ({})",
             c->name, kind, e.message.empty() ? "not a proof" : e.message);
        return;
      }
      if (auth::leader_proof(cfg.key, c->tr, want, e) != DS4TP_OK) {
        fail(e.code, "{}", e.message);
        return;
      }
      if (!auth::mac_equal(got, want)) {
        fail(DS4TP_EAUTH,
             "the leader at {} could not prove it holds this worker's pre-shared key: the "
             "keys differ, the hellos were altered on the way, or it is not your leader",
             c->name);
        return;
      }
      transcript = c->tr;
      worker_judge(c, std::move(c->hello));
      return;
    }
  }
}

void Bringup::Impl::worker_data(Conn *c) {
  const uint8_t *body = c->buf.data() + wire::kPreambleBytes;
  size_t body_len = c->pre.body_bytes;
  if (c->pre.kind != uint16_t(wire::Kind::DataAck)) {
    fail(DS4TP_EPROTO, "the leader answered the data connection with kind {}", c->pre.kind);
    return;
  }
  bool has_mac = false;
  wire::Mac got{};
  Error e;
  if (wire::decode_data_ack_body(body, body_len, has_mac, got, e) != DS4TP_OK) {
    fail(DS4TP_EPROTO, "the leader sent a malformed data ack: {}", e.message);
    return;
  }
  if (keyed()) {
    wire::Mac want{};
    if (auth::data_ack_proof(cfg.key, transcript, peer.cookie, want, e) != DS4TP_OK) {
      fail(e.code, "{}", e.message);
      return;
    }
    if (!has_mac || !auth::mac_equal(got, want)) {
      fail(DS4TP_EAUTH,
           "the data connection was accepted without a valid proof of the key: something "
           "other than the authenticated leader answered it");
      return;
    }
  }
  data = c;
  finish(DS4TP_OK);
}

void Bringup::Impl::worker_attempt() {
  if (finished) return;
  attempt++;
  addrs.clear();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo *res = nullptr;
  std::string port = std::to_string(cfg.port);
  int rc = getaddrinfo(cfg.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    worker_retry(fmt::format("cannot resolve {}: {}", cfg.host, gai_strerror(rc)));
    return;
  }
  for (addrinfo *a = res; a; a = a->ai_next) {
    sockaddr_storage ss{};
    std::memcpy(&ss, a->ai_addr, a->ai_addrlen);
    addrs.push_back(ss);
  }
  freeaddrinfo(res);
  const sockaddr_storage &target = addrs[attempt % addrs.size()];
  Conn *c = new_conn();
  c->name = addr_name(reinterpret_cast<const sockaddr *>(&target));
  c->connect_req.data = c;
  rc = uv_tcp_connect(&c->connect_req, &c->tcp, reinterpret_cast<const sockaddr *>(&target),
                      on_worker_connect);
  if (rc != 0) {
    close_conn(c);
    worker_retry(uv_strerror(rc));
  }
}

void Bringup::Impl::worker_retry(const std::string &why) {
  if (finished) return;
  last_error = why;
  // Forget a half-done control connection; dial from scratch.
  for (Conn *c : std::list<Conn *>(conns)) close_conn(c);
  uint64_t t = now_ns();
  if (t - last_log_ns >= 5000000000ull) {
    last_log_ns = t;
    log.info("waiting for the leader at {}:{} ({}; {} s elapsed)", cfg.host, cfg.port,
             why, (t - started_ns) / 1000000000ull);
  }
  uint64_t delay = attempt < 10 ? 50 : 200;  // fast at first, then gentle
  uv_timer_start(&retry, on_retry, delay, 0);
}

void Bringup::Impl::worker_connected(Conn *c) {
  if (c->is_data) {
    c->name = fmt::format("{}:{}", cfg.host, cfg.port);
    write_bytes(c, data_bytes);
  } else if (keyed()) {
    // A fresh nonce per attempt: a recorded exchange never verifies again.
    Error e;
    if (auth::fresh_nonce(c->tr.worker_nonce, e) != DS4TP_OK) {
      fail(e.code, "{}", e.message);
      return;
    }
    c->tr.worker_nonce_msg = wire::encode_auth_nonce(c->tr.worker_nonce);
    c->tr.worker_hello_msg = mine_bytes;
    c->phase = Conn::Phase::AwaitNonce;
    write_bytes(c, c->tr.worker_nonce_msg);
  } else {
    write_bytes(c, mine_bytes);
  }
  start_reading(c);
}

void Bringup::Impl::dial_data() {
  const sockaddr_storage &target = addrs[attempt % addrs.size()];
  Conn *c = new_conn();
  c->is_data = true;
  c->connect_req.data = c;
  if (keyed()) {
    wire::Mac proof{};
    Error e;
    if (auth::data_proof(cfg.key, transcript, peer.cookie, proof, e) != DS4TP_OK) {
      fail(e.code, "{}", e.message);
      return;
    }
    data_bytes = wire::encode_data(peer.cookie, &proof);
  } else {
    data_bytes = wire::encode_data(peer.cookie);
  }
  int rc = uv_tcp_connect(&c->connect_req, &c->tcp, reinterpret_cast<const sockaddr *>(&target),
                          on_worker_connect);
  if (rc != 0)
    fail(DS4TP_EIO, "could not open the data connection: {}", uv_strerror(rc));
}

Bringup::Bringup(const BringupConfig &cfg, const Logger &log)
    : impl_(std::make_unique<Impl>()) {
  impl_->cfg = cfg;
  impl_->log = log;
}

Bringup::~Bringup() {
  Impl *m = impl_.get();
  if (m->listen_fd >= 0) ::close(m->listen_fd);
  if (!m->loop_ok) return;
  for (Conn *c : std::list<Conn *>(m->conns)) m->close_conn(c);
  if (m->server_open) uv_close(reinterpret_cast<uv_handle_t *>(&m->server), nullptr);
  if (m->timers_open) {
    uv_close(reinterpret_cast<uv_handle_t *>(&m->deadline), nullptr);
    uv_close(reinterpret_cast<uv_handle_t *>(&m->retry), nullptr);
  }
  uv_run(&m->loop, UV_RUN_DEFAULT);
  uv_loop_close(&m->loop);
}

// The listener is a plain socket until run(): no event loop exists before
// then, so an engine may fork between ds4tp_new and ds4tp_connect (an epoll
// instance shared across fork would let the child disarm the parent).
int Bringup::listen(Error &err) {
  Impl *m = impl_.get();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo *res = nullptr;
  std::string port = std::to_string(m->cfg.port);
  const char *host = m->cfg.host.empty() ? nullptr : m->cfg.host.c_str();
  int rc = getaddrinfo(host, port.c_str(), &hints, &res);
  if (rc != 0)
    return err.set(DS4TP_EINVAL, "cannot resolve listen address {}: {}", m->cfg.host,
                   gai_strerror(rc));
  std::string last = "no address";
  for (addrinfo *a = res; a && m->listen_fd < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 16) != 0) {
      last = std::strerror(errno);
      ::close(fd);
      continue;
    }
    m->listen_fd = fd;
  }
  freeaddrinfo(res);
  if (m->listen_fd < 0)
    return err.set(DS4TP_EIO, "cannot listen on {}:{}: {}", m->cfg.host, m->cfg.port, last);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(m->listen_fd, reinterpret_cast<sockaddr *>(&ss), &len);
  m->bound_port = ss.ss_family == AF_INET6
                      ? ntohs(reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_port)
                      : ntohs(reinterpret_cast<sockaddr_in *>(&ss)->sin_port);
  m->log.info("leader listening on {}", addr_name(reinterpret_cast<sockaddr *>(&ss)));
  if (m->cfg.key.empty() && !is_loopback(reinterpret_cast<sockaddr *>(&ss)))
    m->log.warn("listening on {} without a pre-shared key: any host that can reach this "
                "port can join the pair as its worker; set options.psk, DS4TP_PSK or "
                "DS4TP_PSK_FILE on both ranks",
                addr_name(reinterpret_cast<sockaddr *>(&ss)));
  return DS4TP_OK;
}

int Bringup::Impl::start_loop(Error &e) {
  if (loop_ok) return DS4TP_OK;
  if (uv_loop_init(&loop) != 0) return e.set(DS4TP_EIO, "cannot create the event loop");
  loop_ok = true;
  uv_timer_init(&loop, &deadline);
  uv_timer_init(&loop, &retry);
  deadline.data = this;
  retry.data = this;
  timers_open = true;
  if (cfg.role == DS4TP_ROLE_LEADER) {
    uv_tcp_init(&loop, &server);
    server.data = this;
    server_open = true;
    int rc = uv_tcp_open(&server, listen_fd);
    if (rc == 0) {
      listen_fd = -1;  // the uv handle owns it now
      rc = uv_listen(reinterpret_cast<uv_stream_t *>(&server), 16, on_connection);
    }
    if (rc != 0) return e.set(DS4TP_EIO, "cannot listen: {}", uv_strerror(rc));
  }
  return DS4TP_OK;
}

int Bringup::port() const { return impl_->bound_port; }

namespace {
int take_fd(uv_tcp_t *tcp, net::Fd &out, Error &err) {
  uv_os_fd_t fd;
  if (uv_fileno(reinterpret_cast<uv_handle_t *>(tcp), &fd) != 0)
    return err.set(DS4TP_EIO, "lost a bring-up socket");
  int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return err.set(DS4TP_EIO, "dup failed: {}", std::strerror(errno));
  out.reset(dup);
  return DS4TP_OK;
}
}  // namespace

int Bringup::run(wire::Hello mine, const HelloJudge &judge, BringupResult &out,
                 Error &err) {
  Impl *m = impl_.get();
  if (m->cfg.role == DS4TP_ROLE_LEADER && m->listen_fd < 0 && !m->server_open)
    return err.set(DS4TP_ESTATE, "the leader is not listening");
  int src = m->start_loop(err);
  if (src != DS4TP_OK) return src;
  SigpipeGuard sigpipe;
  m->mine = std::move(mine);
  m->judge = &judge;
  m->finished = false;
  m->started_ns = now_ns();
  m->last_log_ns = m->started_ns;
  m->ack_bytes = wire::encode_data_ack();
  const char *auth_note = m->keyed() ? " (pre-shared key required)" : "";
  if (m->cfg.role == DS4TP_ROLE_LEADER) {
    m->log.info("leader waiting for a worker on port {}{}", m->bound_port, auth_note);
  } else {
    m->log.info("worker dialing the leader at {}:{}{}", m->cfg.host, m->cfg.port, auth_note);
  }
  m->mine_bytes = wire::encode_hello(m->mine);
  uv_timer_start(&m->deadline, on_deadline, uint64_t(m->cfg.connect_timeout_ms), 0);
  if (m->cfg.role == DS4TP_ROLE_WORKER) m->worker_attempt();
  while (!m->finished) uv_run(&m->loop, UV_RUN_DEFAULT);
  uv_timer_stop(&m->deadline);
  uv_timer_stop(&m->retry);

  int rc = m->result;
  if (rc != DS4TP_OK) {
    err = m->err;
  } else if (m->control == nullptr || m->data == nullptr) {
    rc = err.set(DS4TP_EIO, "bring-up ended without both connections");
  } else {
    uv_read_stop(reinterpret_cast<uv_stream_t *>(&m->control->tcp));
    uv_read_stop(reinterpret_cast<uv_stream_t *>(&m->data->tcp));
    rc = take_fd(&m->control->tcp, out.control, err);
    if (rc == DS4TP_OK) rc = take_fd(&m->data->tcp, out.data, err);
    if (rc == DS4TP_OK) {
      out.peer = m->peer;
      net::tune_control_socket(out.control.get());
      net::tune_data_socket(out.data.get());
      if (m->cfg.role == DS4TP_ROLE_LEADER)
        m->log.info("worker {} joined", m->control->name);
      else
        m->log.info("connected to the leader at {}", m->control->name);
    }
  }
  // Close every bring-up handle (the taken sockets live on as dups); the
  // listener closes too: a pair accepts exactly one worker.
  for (Conn *c : std::list<Conn *>(m->conns)) m->close_conn(c);
  if (m->server_open) {
    uv_close(reinterpret_cast<uv_handle_t *>(&m->server), nullptr);
    m->server_open = false;
  }
  uv_run(&m->loop, UV_RUN_NOWAIT);
  return rc;
}

}  // namespace ds4tp::connect
