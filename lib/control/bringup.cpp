#include "control/bringup.hpp"

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

#include "common/clock.hpp"

namespace ds4tp::control {

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

  Conn *new_conn();
  void close_conn(Conn *c);
  void drop(Conn *c, const std::string &why);
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
  uv_write_t write_req{};
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
  uv_timer_start(&c->timer, on_hello_timeout, uint64_t(c->impl->cfg.hello_timeout_ms), 0);
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
    impl->fail(DS4TP_ETIMEDOUT,
               "no worker completed the hello on port {} within {} ms ({} other "
               "connections dropped): is the worker running and pointed at this "
               "address?",
               impl->bound_port, impl->cfg.connect_timeout_ms, impl->dropped);
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
  Conn *c = static_cast<Conn *>(req->data);
  Bringup::Impl *impl = c->impl;
  if (c->closing) return;
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

void write_bytes(Conn *c, const std::vector<uint8_t> &bytes) {
  uv_buf_t b = uv_buf_init(reinterpret_cast<char *>(const_cast<uint8_t *>(bytes.data())),
                           unsigned(bytes.size()));
  c->write_req.data = c;
  int rc = uv_write(&c->write_req, reinterpret_cast<uv_stream_t *>(&c->tcp), &b, 1,
                    on_write_done);
  if (rc != 0) c->impl->fail(DS4TP_EIO, "bring-up write failed: {}", uv_strerror(rc));
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
  log.warn("dropping connection from {}: {}; still waiting for the worker", c->name, why);
  close_conn(c);
}

void Bringup::Impl::on_message(Conn *c) {
  if (cfg.role == DS4TP_ROLE_LEADER)
    leader_message(c);
  else
    worker_message(c);
}

void Bringup::Impl::leader_message(Conn *c) {
  const uint8_t *body = c->buf.data() + wire::kPreambleBytes;
  size_t body_len = c->pre.body_bytes;
  if (c->pre.kind == uint16_t(wire::Kind::Control)) {
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
    return;
  }
  if (c->pre.kind == uint16_t(wire::Kind::Data)) {
    uint64_t cookie = 0;
    Error e;
    if (wire::decode_data_body(body, body_len, cookie, e) != DS4TP_OK) {
      drop(c, e.message);
      return;
    }
    if (control == nullptr || cookie != mine.cookie) {
      drop(c, "data connection with an unknown pair cookie");
      return;
    }
    data = c;
    write_bytes(c, ack_bytes);
    return;
  }
  drop(c, fmt::format("unexpected connection kind {}", c->pre.kind));
}

void Bringup::Impl::worker_message(Conn *c) {
  const uint8_t *body = c->buf.data() + wire::kPreambleBytes;
  size_t body_len = c->pre.body_bytes;
  if (c->is_data) {
    if (c->pre.kind != uint16_t(wire::Kind::DataAck)) {
      fail(DS4TP_EPROTO, "the leader answered the data connection with kind {}",
           c->pre.kind);
      return;
    }
    data = c;
    finish(DS4TP_OK);
    return;
  }
  if (c->pre.version != wire::kProtocolVersion) {
    fail(DS4TP_EVERSION,
         "protocol version mismatch: this rank speaks version {}, the leader at {} "
         "speaks {}; run the same libds4tp on both",
         wire::kProtocolVersion, c->name, c->pre.version);
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
  data_bytes = wire::encode_data(peer.cookie);
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
  if (m->cfg.role == DS4TP_ROLE_LEADER) {
    m->log.info("leader waiting for a worker on port {}", m->bound_port);
  } else {
    m->log.info("worker dialing the leader at {}:{}", m->cfg.host, m->cfg.port);
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

}  // namespace ds4tp::control
