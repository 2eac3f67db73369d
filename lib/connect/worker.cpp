// The worker's side of bring-up: dial the leader with a retry timer until
// the connect deadline, send the hello (keyed: the nonce first), judge the
// leader's answer, then open the data connection with the pair cookie.
// Until the leader has answered, failures are retried (the leader may not
// be up yet); a verdict or a reject from a leader ends the bring-up.
#include <cstring>

#include <netdb.h>

#include "common/clock.hpp"
#include "connect/state.hpp"

namespace ds4tp::connect {

namespace {

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

}  // namespace

void Bringup::Impl::worker_lost(Conn *c, const std::string &why) {
  if (!c->is_data)
    worker_retry(fmt::format("the leader {} before answering the hello", why));
  else
    fail(DS4TP_EPEERCLOSED, "the leader {} the data connection before accepting it", why);
}

void Bringup::Impl::worker_bad_preamble(Conn *c, const Error &e) {
  fail(DS4TP_EPROTO, "the leader at {} sent a bad preamble: {}", c->name, e.message);
}

void Bringup::Impl::worker_timed_out(Conn *c) {
  if (!c->is_data)
    worker_retry(fmt::format("the leader did not answer the hello within {} ms",
                             cfg.hello_timeout_ms));
  else
    fail(DS4TP_ETIMEDOUT, "the leader did not accept the data connection within {} ms",
         cfg.hello_timeout_ms);
}

void Bringup::Impl::worker_gave_up() {
  fail(DS4TP_ETIMEDOUT,
       "no connection to the leader at {}:{} after {} ms (last error: {}): "
       "is the leader running, and is the port open on its firewall?",
       cfg.host, cfg.port, cfg.connect_timeout_ms, last_error);
}

void Bringup::Impl::worker_wrong_version(Conn *c) {
  fail(DS4TP_EVERSION,
       "protocol version mismatch: this rank speaks version {}, the leader at {} "
       "speaks {}; run the same libds4tp on both",
       wire::kProtocolVersion, c->name, c->pre.version);
}

bool Bringup::Impl::worker_decode_hello(Conn *c, wire::Hello &h) {
  Error e;
  if (wire::decode_hello_body(c->body(), c->body_len(), h, e) == DS4TP_OK) return true;
  fail(DS4TP_EPROTO, "the leader at {} sent a malformed hello: {}", c->name, e.message);
  return false;
}

void Bringup::Impl::worker_message(Conn *c) {
  if (c->is(wire::Kind::AuthReject)) {
    uint32_t reason = 0;
    Error e;
    if (wire::decode_auth_reject_body(c->body(), c->body_len(), reason, e) != DS4TP_OK) {
      fail(DS4TP_EPROTO, "the leader at {} sent a malformed reject: {}", c->name, e.message);
      return;
    }
    if (c->pre.version != wire::kProtocolVersion) {
      worker_wrong_version(c);
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
    worker_wrong_version(c);
    return;
  }
  // A key on one side only shows in the leader's first answer: a plain
  // hello to a keyed worker, a nonce to one without a key.
  const bool first = c->phase == Conn::Phase::First || c->phase == Conn::Phase::AwaitNonce;
  if (first && c->is(keyed() ? wire::Kind::Control : wire::Kind::AuthNonce)) {
    if (keyed())
      fail(DS4TP_EAUTH, "the leader at {} answered with a plain hello: it has no pre-shared "
           "key, but this worker has one (set the same key on both ranks, or on neither)",
           c->name);
    else
      fail(DS4TP_EAUTH, "the leader at {} requires a pre-shared key and this worker has "
           "none: set options.psk, DS4TP_PSK or DS4TP_PSK_FILE to the leader's key",
           c->name);
    return;
  }
  if (keyed()) {
    worker_keyed(c);
    return;
  }
  if (!c->is(wire::Kind::Control)) {
    fail(DS4TP_EPROTO, "the leader at {} answered the hello with kind {}", c->name,
         c->pre.kind);
    return;
  }
  wire::Hello h;
  if (worker_decode_hello(c, h)) worker_judge(c, std::move(h));
}

// The leader's hello (keyed: once its proof verified). A fatal verdict ends
// the bring-up here; the leader reaches the same one on our hello.
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

void Bringup::Impl::worker_data(Conn *c) {
  if (!c->is(wire::Kind::DataAck)) {
    fail(DS4TP_EPROTO, "the leader answered the data connection with kind {}", c->pre.kind);
    return;
  }
  bool has_mac = false;
  wire::Mac got{};
  Error e;
  if (wire::decode_data_ack_body(c->body(), c->body_len(), has_mac, got, e) != DS4TP_OK) {
    fail(DS4TP_EPROTO, "the leader sent a malformed data ack: {}", e.message);
    return;
  }
  if (keyed()) {
    wire::Mac want{};
    if (auth::data_ack_proof(cfg.key, transcript, peer.cookie, want, e) != DS4TP_OK) {
      fail(e);
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

int Bringup::Impl::dial(Conn *c, const sockaddr_storage &target) {
  c->connect_req.data = c;
  return uv_tcp_connect(&c->connect_req, &c->tcp,
                        reinterpret_cast<const sockaddr *>(&target), on_worker_connect);
}

// One control connection attempt; the leader's addresses take turns.
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
  rc = dial(c, target);
  if (rc != 0) {
    close_conn(c);
    worker_retry(uv_strerror(rc));
  }
}

void Bringup::Impl::worker_retry(const std::string &why) {
  if (finished) return;
  last_error = why;
  // Forget a half-done control connection; dial from scratch.
  close_all();
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
    write(c, data_bytes);
  } else if (keyed()) {
    if (!worker_send_nonce(c)) return;
  } else {
    write(c, mine_bytes);
  }
  start_reading(c);
}

// The data connection goes to the address the control connection reached.
void Bringup::Impl::dial_data() {
  const sockaddr_storage &target = addrs[attempt % addrs.size()];
  Conn *c = new_conn();
  c->is_data = true;
  if (keyed()) {
    wire::Mac proof{};
    Error e;
    if (auth::data_proof(cfg.key, transcript, peer.cookie, proof, e) != DS4TP_OK) {
      fail(e);
      return;
    }
    data_bytes = wire::encode_data(peer.cookie, &proof);
  } else {
    data_bytes = wire::encode_data(peer.cookie);
  }
  int rc = dial(c, target);
  if (rc != 0)
    fail(DS4TP_EIO, "could not open the data connection: {}", uv_strerror(rc));
}

}  // namespace ds4tp::connect
