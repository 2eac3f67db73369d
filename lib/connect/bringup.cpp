// Bring-up plumbing on libuv: the private loop, the run-wide timers, the
// connection handles with exact-framing reads, writes, and run() itself.
// What a message means is for leader.cpp, worker.cpp and keyed.cpp.
#include "connect/state.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "common/clock.hpp"

namespace ds4tp::connect {

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

std::vector<uint8_t> concat(std::vector<uint8_t> a, const std::vector<uint8_t> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

namespace {

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
      // sigpending + sigwait rather than sigtimedwait, which Darwin lacks:
      // sigwait returns at once because SIGPIPE is known to be pending.
      sigset_t now;
      sigemptyset(&now);
      int sig = 0;
      if (sigpending(&now) == 0 && sigismember(&now, SIGPIPE) == 1) sigwait(&set, &sig);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_;
  bool was_pending_ = false;
};

// One write in flight; owns its bytes until libuv is done with them.
struct WriteOp {
  uv_write_t req{};
  Conn *conn = nullptr;
  std::vector<uint8_t> bytes;
};

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
    impl->leader() ? impl->leader_lost(c, why) : impl->worker_lost(c, why);
    return;
  }
  c->have += size_t(n);
  if (c->have < c->need) return;
  if (!c->have_preamble) {
    Error e;
    size_t max_body = wire::kHelloMaxBytes;
    if (wire::decode_preamble(c->buf.data(), c->have, max_body, c->pre, e) != DS4TP_OK) {
      impl->leader() ? impl->leader_bad_preamble(c, e) : impl->worker_bad_preamble(c, e);
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
  impl->leader() ? impl->leader_message(c) : impl->worker_message(c);
}

void on_hello_timeout(uv_timer_t *t) {
  Conn *c = static_cast<Conn *>(t->data);
  c->impl->leader() ? c->impl->leader_timed_out(c) : c->impl->worker_timed_out(c);
}

void on_deadline(uv_timer_t *t) {
  auto *impl = static_cast<Bringup::Impl *>(t->data);
  impl->leader() ? impl->leader_gave_up() : impl->worker_gave_up();
}

void on_write_done(uv_write_t *req, int status) {
  auto *op = static_cast<WriteOp *>(req->data);
  Conn *c = op->conn;
  delete op;
  Bringup::Impl *impl = c->impl;
  if (c->closing) return;
  // A reject is dropped whether or not it arrived (leader_written).
  if (status < 0 && !c->drop_after_write) {
    impl->write_failed(c, status,
                       fmt::format("bring-up write to {} failed: {}", c->name,
                                   uv_strerror(status)));
    return;
  }
  if (impl->leader()) impl->leader_written(c);
}

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

void Bringup::Impl::close_all() {
  for (Conn *c : std::list<Conn *>(conns)) close_conn(c);
}

void Bringup::Impl::arm(Conn *c, int ms) {
  uv_timer_start(&c->timer, on_hello_timeout, uint64_t(ms), 0);
}

void Bringup::Impl::start_reading(Conn *c) {
  c->deadline_ns = now_ns() + ms_to_ns(cfg.hello_timeout_ms);
  arm(c, cfg.hello_timeout_ms);
  uv_read_start(reinterpret_cast<uv_stream_t *>(&c->tcp), on_alloc, on_read);
}

void Bringup::Impl::read_next(Conn *c) {
  c->have = 0;
  c->need = wire::kPreambleBytes;
  c->have_preamble = false;
  c->complete = false;
  int left = ms_left(c->deadline_ns);
  arm(c, left > 0 ? left : 1);
  uv_read_start(reinterpret_cast<uv_stream_t *>(&c->tcp), on_alloc, on_read);
}

void Bringup::Impl::write(Conn *c, std::vector<uint8_t> bytes) {
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
    write_failed(c, rc, fmt::format("bring-up write failed: {}", uv_strerror(rc)));
  }
}

void Bringup::Impl::write_failed(Conn *c, int uv_rc, const std::string &fatal) {
  if (leader() && c != control && c != data)
    drop(c, fmt::format("write failed: {}", uv_strerror(uv_rc)));
  else
    fail(DS4TP_EIO, "{}", fatal);
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
  return leader() ? leader_start(e) : DS4TP_OK;
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
  m->close_all();
  if (m->server_open) uv_close(reinterpret_cast<uv_handle_t *>(&m->server), nullptr);
  if (m->timers_open) {
    uv_close(reinterpret_cast<uv_handle_t *>(&m->deadline), nullptr);
    uv_close(reinterpret_cast<uv_handle_t *>(&m->retry), nullptr);
  }
  uv_run(&m->loop, UV_RUN_DEFAULT);
  uv_loop_close(&m->loop);
}

int Bringup::run(wire::Hello mine, const HelloJudge &judge, BringupResult &out,
                 Error &err) {
  Impl *m = impl_.get();
  if (m->leader() && m->listen_fd < 0 && !m->server_open)
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
  if (m->leader()) {
    m->log.info("leader waiting for a worker on port {}{}", m->bound_port, auth_note);
  } else {
    m->log.info("worker dialing the leader at {}:{}{}", m->cfg.host, m->cfg.port, auth_note);
  }
  m->mine_bytes = wire::encode_hello(m->mine);
  uv_timer_start(&m->deadline, on_deadline, uint64_t(m->cfg.connect_timeout_ms), 0);
  if (!m->leader()) m->worker_attempt();
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
      if (m->leader())
        m->log.info("worker {} joined", m->control->name);
      else
        m->log.info("connected to the leader at {}", m->control->name);
    }
  }
  // Close every bring-up handle (the taken sockets live on as dups); the
  // listener closes too: a pair accepts exactly one worker.
  m->close_all();
  if (m->server_open) {
    uv_close(reinterpret_cast<uv_handle_t *>(&m->server), nullptr);
    m->server_open = false;
  }
  uv_run(&m->loop, UV_RUN_NOWAIT);
  return rc;
}

}  // namespace ds4tp::connect
