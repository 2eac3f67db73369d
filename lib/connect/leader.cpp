// The leader's side of bring-up: listen, accept, and judge what each
// connection sends. A connection that does not complete a valid hello in
// time is dropped, never fatal: a stray or hostile peer must not be able to
// end the leader's bring-up. Only a worker that passed the hello (and,
// keyed, proved the key) can end it, with a verdict or with its data
// connection.
#include <cerrno>
#include <cstring>

#include <netdb.h>
#include <unistd.h>

#include "common/status.hpp"
#include "connect/state.hpp"
#include "os/os.hpp"

namespace ds4tp::connect {

namespace {

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
  impl->start_reading(c);
}

}  // namespace

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
    int fd = os::open_socket(a->ai_family, a->ai_socktype, 0);
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

int Bringup::port() const { return impl_->bound_port; }

// Hands the socket bound by listen() to the loop.
int Bringup::Impl::leader_start(Error &e) {
  uv_tcp_init(&loop, &server);
  server.data = this;
  server_open = true;
  int rc = uv_tcp_open(&server, listen_fd);
  if (rc == 0) {
    listen_fd = -1;  // the uv handle owns it now
    rc = uv_listen(reinterpret_cast<uv_stream_t *>(&server), 16, on_connection);
  }
  if (rc != 0) return e.set(DS4TP_EIO, "cannot listen: {}", uv_strerror(rc));
  return DS4TP_OK;
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
  c->drop_reason = fmt::format("{}: {}", status_name(DS4TP_EAUTH), why);
  write(c, wire::encode_auth_reject(reason));
}

void Bringup::Impl::leader_lost(Conn *c, const std::string &why) {
  if (c == control) {
    log.warn("worker {} {} before opening its data connection; waiting for a worker "
             "again",
             c->name, why);
    close_conn(c);
  } else {
    drop(c, fmt::format("it {} before a valid hello", why));
  }
}

void Bringup::Impl::leader_bad_preamble(Conn *c, const Error &e) { drop(c, e.message); }

void Bringup::Impl::leader_timed_out(Conn *c) {
  if (c == control) {
    log.warn("worker {} opened no data connection within {} ms; waiting for a worker "
             "again",
             c->name, cfg.hello_timeout_ms);
    close_conn(c);
  } else {
    drop(c, fmt::format("no valid hello within {} ms", cfg.hello_timeout_ms));
  }
}

void Bringup::Impl::leader_gave_up() {
  std::string drops =
      dropped == 0 ? std::string("no other connection came")
                   : fmt::format("{} other connections dropped, {} of them for a missing "
                                 "or wrong key; the last: {}",
                                 dropped, auth_failed, last_drop);
  fail(DS4TP_ETIMEDOUT,
       "no worker completed the hello on port {} within {} ms ({}): is the worker "
       "running, pointed at this address{}?",
       bound_port, cfg.connect_timeout_ms, drops,
       keyed() ? " and holding the same pre-shared key" : "");
}

void Bringup::Impl::leader_written(Conn *c) {
  if (c->drop_after_write) {
    drop(c, c->drop_reason);
    return;
  }
  if (c->pending_verdict != DS4TP_OK) {
    // Our hello reached the peer, so it can report the mismatch too.
    err = c->verdict_err;
    finish(c->pending_verdict);
    return;
  }
  if (c == data) finish(DS4TP_OK);
  // The worker that passed has one hello timeout to open its data connection.
  if (c == control) arm(c, cfg.hello_timeout_ms);
}

void Bringup::Impl::leader_message(Conn *c) {
  if (c->is(wire::Kind::Data)) {
    leader_data(c);
    return;
  }
  if (c->phase != Conn::Phase::First) {
    leader_keyed(c);
    return;
  }
  leader_first(c);
}

// A pair takes one worker: a second one that passes is dropped.
bool Bringup::Impl::leader_busy(Conn *c) {
  if (control == nullptr) return false;
  drop(c, fmt::format("worker {} is already paired", control->name));
  return true;
}

// Takes `c` as the pair's worker and judges its hello; a fatal verdict is
// applied once this rank's hello has reached the worker (leader_written),
// so both ranks report the mismatch.
void Bringup::Impl::leader_adopt(Conn *c, wire::Hello h) {
  Error verdict;
  int code = (*judge)(c->pre, h, verdict);
  control = c;
  peer = std::move(h);
  if (code != DS4TP_OK) {
    c->pending_verdict = code;
    c->verdict_err = verdict;
  }
}

// The first message on a connection: a plain hello, or a keyed worker's
// nonce. A mismatch of keys is answered with a reject, never fatal.
void Bringup::Impl::leader_first(Conn *c) {
  const uint16_t kind = c->pre.kind;
  if (c->is(wire::Kind::AuthNonce) && !keyed()) {
    reject(c, wire::RejectReason::KeyUnexpected,
           "the worker offers a pre-shared key but this leader has none (set the same "
           "key on both ranks, or on neither)");
    return;
  }
  if (c->is(wire::Kind::Control) && keyed() && c->pre.version == wire::kProtocolVersion) {
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
  if (c->is(wire::Kind::AuthNonce)) {
    leader_nonce(c);
    return;
  }
  if (!c->is(wire::Kind::Control)) {
    drop(c, fmt::format("unexpected connection kind {}", kind));
    return;
  }
  if (leader_busy(c)) return;
  if (c->pre.version != wire::kProtocolVersion) {
    // A real ds4tp peer of another version: answer so it can say so too.
    c->pending_verdict = DS4TP_EVERSION;
    c->verdict_err.set(DS4TP_EVERSION,
                       "protocol version mismatch: this rank speaks version {}, the "
                       "worker at {} speaks {}; run the same libds4tp on both",
                       wire::kProtocolVersion, c->name, c->pre.version);
    write(c, mine_bytes);
    return;
  }
  wire::Hello h;
  Error e;
  if (wire::decode_hello_body(c->body(), c->body_len(), h, e) != DS4TP_OK) {
    drop(c, e.message);
    return;
  }
  leader_adopt(c, std::move(h));
  write(c, mine_bytes);
}

// The worker's data connection: admitted by the pair cookie, and with a
// key only by a proof over the keyed exchange as well.
void Bringup::Impl::leader_data(Conn *c) {
  uint64_t cookie = 0;
  bool has_mac = false;
  wire::Mac got{};
  Error e;
  if (c->phase != Conn::Phase::First ||
      wire::decode_data_body(c->body(), c->body_len(), cookie, has_mac, got, e) !=
          DS4TP_OK) {
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
      fail(e);
      return;
    }
    if (!has_mac || !auth::mac_equal(got, want)) {
      auth_failed++;
      drop(c, fmt::format("{}: the data connection {} (the cookie alone does not admit "
                          "it when a key is set)",
                          status_name(DS4TP_EAUTH),
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
  write(c, std::move(ack));
}

}  // namespace ds4tp::connect
