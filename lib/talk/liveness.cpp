#include "talk/liveness.hpp"

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <uv.h>

#include "common/clock.hpp"
#include "os/os.hpp"
#include "os/wait.hpp"
#include "stats/stats.hpp"
#include "talk/channel.hpp"
#include "wire/frames.hpp"
#include "talk/silence.hpp"
#include "talk/peer_state.hpp"

namespace ds4tp::talk {

namespace {

constexpr size_t kPeekMax = 256 * 1024;  // enough for a few logits halves before an error
// How long unread bytes that start mid-frame may delay the verdict: a
// reader in the middle of a frame finishes it well within this.
constexpr uint64_t kGraceNs = 250ull * 1000 * 1000;
// How long whole unread replies may delay the verdict: a leader waiting
// for them reads them at once; one that never reads learns of the close
// after this.
constexpr uint64_t kRepliesGraceNs = 2000ull * 1000 * 1000;
// How often the watcher looks for a hang-up where looking suffices
// (os::hangup_look_suffices): a rank that is not waiting learns of its
// peer's end this late at most (a waiting one at once, from its own wait).
constexpr uint64_t kHangupCheckMs = 10;

void tune_keepalive(int fd, int dead_peer_ms) {
  // Probes after 2 s of silence, every 1 s, 4 of them; dead_peer_ms bounds
  // both unacknowledged data and keepalive failure: a peer whose host
  // vanished (no FIN, no RST) errors the socket after this long.
  os::tune_keepalive(fd, 2, 1, 4, dead_peer_ms);
}

}  // namespace

Pending scan_pending(const uint8_t *buf, size_t len, uint32_t max_frame_bytes, std::string &why,
                     int &status) {
  size_t off = 0;
  bool replies = false;  // a whole frame other than a HEARTBEAT
  while (len - off >= wire::kFrameHeaderBytes) {
    wire::FrameHeader h;
    Error e;
    if (wire::decode_frame_header(buf + off, len - off, max_frame_bytes, h, e) != DS4TP_OK)
      return Pending::Nothing;  // not at a frame boundary (a reader is mid-frame)
    size_t end = off + wire::kFrameHeaderBytes + h.bytes;
    if (end > len) return Pending::Nothing;
    if (h.type == uint16_t(wire::FrameType::Stop)) return Pending::Stop;
    if (h.type == uint16_t(wire::FrameType::WorkerError)) {
      wire::WorkerErrorMsg m;
      if (wire::decode(buf + off + wire::kFrameHeaderBytes, h.bytes, m, e) != DS4TP_OK)
        return Pending::Nothing;
      status = m.status;
      why = fmt::format("the worker failed {} for session {} with status {}{}{} and closed the "
                        "connection",
                        wire::frame_name(m.command), m.session, m.status,
                        m.message.empty() ? "" : ": ", m.message);
      return Pending::WorkerError;
    }
    if (h.type != uint16_t(wire::FrameType::Heartbeat)) replies = true;
    off = end;
  }
  return replies && off == len ? Pending::Replies : Pending::Nothing;
}

struct Liveness::Impl {
  int fd = -1;
  LivenessConfig cfg;
  LivenessHooks hooks;
  Logger log;
  uv_loop_t loop{};
  uv_timer_t hangup{};  // looks for a hang-up (os::hangup_look_suffices)
  uv_poll_t poll{};     // or watches for it (UV_DISCONNECT)
  bool watching = false;
  uv_async_t stop{};
  uv_timer_t recheck{};
  uv_timer_t beat{};
  std::thread thread;
  bool decided = false;
  uint64_t gone_ns = 0;  // when the hang-up was first seen
  SilenceJudge judge;        // the one peer's silence (silence.hpp)
  uint64_t last_total = 0;   // control bytes received + unread at the last beat

  // STOP sent or received: the peer closing is the normal end. The
  // channel's own mark covers the moment between its reader taking the
  // STOP and the session noting it.
  bool lockstep_ended() const {
    if (cfg.channel != nullptr && cfg.channel->stop_received()) return true;
    return hooks.close_expected && hooks.close_expected();
  }

  // Every heartbeat period: send ours, take the peer's, judge silence.
  void on_beat() {
    if (decided || cfg.channel == nullptr || cfg.peer == nullptr) return;
    if (lockstep_ended()) return;  // after STOP: nothing to judge
    const uint64_t now = now_ns();
    talk::PeerState &ps = *cfg.peer;
    wire::HeartbeatMsg m;
    const uint64_t g = ps.my_gate.load(std::memory_order_relaxed);
    m.kind = talk::PeerState::kind_of(g);
    m.seq = talk::PeerState::seq_of(g);
    m.layer = uint32_t(ps.my_layer.load(std::memory_order_relaxed));
    m.gates = ps.my_entered.load(std::memory_order_relaxed);
    cfg.channel->send_heartbeat(m);
    const uint64_t heard_before = ps.heartbeats.load(std::memory_order_relaxed);
    size_t unread = cfg.channel->drain_heartbeats();
    // Nothing new and nothing unread: this period brought no heartbeat.
    if (unread == 0 && ps.heartbeats.load(std::memory_order_relaxed) == heard_before)
      stats::bump(ps.heartbeats_missed);
    uint64_t total = cfg.channel->bytes_received() + unread;
    if (total != last_total || unread > 0) judge.heard(0, now);
    last_total = total;
    if (judge.beat(now) < 0) return;
    ps.silent_for_ns.store(judge.quiet_for(0, now), std::memory_order_relaxed);
    ps.verdict.store(talk::PeerState::kSilent, std::memory_order_release);
    report(DS4TP_ETIMEDOUT, ps.silence(), 0);
  }
  static void on_beat_timer(uv_timer_t *t) { static_cast<Impl *>(t->data)->on_beat(); }

  void report(int code, const std::string &why, int status) {
    decided = true;
    uv_timer_stop(&hangup);
    uv_timer_stop(&recheck);
    uv_timer_stop(&beat);
    if (hooks.dead) hooks.dead(code, why, status);
  }

  // The peer hung up (uv_status 0) or the socket failed (< 0). Decides
  // whether that ends the pair, and why, from what is still unread.
  void evaluate(int uv_status) {
    if (decided || ended_normally()) return;
    const char *peer = cfg.role == DS4TP_ROLE_LEADER ? "worker" : "leader";
    // What is still unread (the channel's read-ahead, then the socket)
    // explains a reset as well as a close: a STOP the worker has not
    // read yet, or the WORKER_ERROR that says why the worker left.
    std::vector<uint8_t> peek;
    bool reader_busy = false;  // the session holds bytes we could not look at
    if (cfg.channel != nullptr) {
      reader_busy = !cfg.channel->peek_unread(peek, kPeekMax);
    } else if (int avail = 0; ioctl(fd, FIONREAD, &avail) == 0 && avail > 0) {
      peek.resize(size_t(avail) < kPeekMax ? size_t(avail) : kPeekMax);
      ssize_t n = ::recv(fd, peek.data(), peek.size(), MSG_PEEK | MSG_DONTWAIT);
      peek.resize(n > 0 ? size_t(n) : 0);
    }
    std::string why;
    int status = 0;
    const Pending p = peek.empty() ? Pending::Nothing
                                   : scan_pending(peek.data(), peek.size(), cfg.max_frame_bytes,
                                                  why, status);
    if (p == Pending::Stop && cfg.role == DS4TP_ROLE_WORKER) {
      decided = true;
      uv_timer_stop(&recheck);
      log.debug("control connection closed by the leader after a STOP not read yet");
      return;
    }
    if (p == Pending::WorkerError && cfg.role == DS4TP_ROLE_LEADER) {
      report(DS4TP_EREMOTE, why, status);
      return;
    }
    if (uv_status < 0) {
      int soerr = 0;
      socklen_t len = sizeof soerr;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
      report(DS4TP_EPEERCLOSED,
             fmt::format("the {} stopped answering on the control connection ({}): its host is "
                         "down or the network is cut",
                         peer, std::strerror(soerr ? soerr : ECONNRESET)),
             0);
      return;
    }
    if (!peek.empty() || reader_busy) {
      // Whole replies the peer sent before closing (e.g. its last ack):
      // they are still valid, so let the reader take them and latch once
      // the stream is drained. Unread bytes that do not start at a frame
      // boundary: a reader is mid-frame; look again once it had time.
      uint64_t grace = p == Pending::Replies ? kRepliesGraceNs : kGraceNs;
      if (now_ns() - gone_ns < grace) {
        uv_timer_start(&recheck, on_recheck, 10, 0);
        return;
      }
    }
    // The session may have read the STOP while we looked: that emptied
    // the stream, and the close is still the normal end.
    if (ended_normally()) return;
    report(DS4TP_EPEERCLOSED,
           fmt::format("the {} closed the control connection (process ended or crashed)", peer), 0);
  }

  bool ended_normally() {
    if (!lockstep_ended()) return false;
    decided = true;
    uv_timer_stop(&recheck);
    log.debug("control connection closed by the peer after STOP");
    return true;
  }

  static void on_recheck(uv_timer_t *t) { static_cast<Impl *>(t->data)->evaluate(0); }

  // The peer hung up (status 0) or the socket failed (< 0), as the look
  // or the watch saw it: noted once, then judged.
  void hung_up(int status) {
    gone_ns = now_ns();
    evaluate(status);
  }

  // Every kHangupCheckMs: did the peer close or reset the connection?
  void look_for_hangup() {
    os::Hangup how;
    if (decided) {
      uv_timer_stop(&hangup);
    } else if (os::wait_hangup(&fd, 1, 0, how) >= 0) {
      uv_timer_stop(&hangup);
      hung_up(how == os::Hangup::kReset ? -1 : 0);
    }
  }
  void close_timers() {
    uv_close(reinterpret_cast<uv_handle_t *>(&hangup), nullptr);
    uv_close(reinterpret_cast<uv_handle_t *>(&recheck), nullptr);
    uv_close(reinterpret_cast<uv_handle_t *>(&beat), nullptr);
  }
  static void on_hangup_timer(uv_timer_t *t) { static_cast<Impl *>(t->data)->look_for_hangup(); }

  // The hang-up's watcher, where looking does not suffice.
  static void on_poll(uv_poll_t *h, int status, int events) {
    auto *impl = static_cast<Impl *>(h->data);
    if (status < 0 || (events & UV_DISCONNECT)) {
      uv_poll_stop(h);
      impl->hung_up(status < 0 ? status : 0);
    }
  }
};

namespace {

void on_stop(uv_async_t *a) {
  auto *impl = static_cast<Liveness::Impl *>(a->data);
  impl->close_timers();
  if (impl->watching) uv_close(reinterpret_cast<uv_handle_t *>(&impl->poll), nullptr);
  uv_close(reinterpret_cast<uv_handle_t *>(&impl->stop), nullptr);
}

}  // namespace

int Liveness::start(int fd, const LivenessConfig &cfg, LivenessHooks hooks, const Logger &log,
                    std::unique_ptr<Liveness> &out, Error &err) {
  std::unique_ptr<Liveness> l(new Liveness);
  l->impl_ = std::make_unique<Impl>();
  Impl &im = *l->impl_;
  im.fd = fd;
  im.cfg = cfg;
  im.hooks = std::move(hooks);
  im.log = log;
  tune_keepalive(fd, cfg.dead_peer_ms);
  int rc = uv_loop_init(&im.loop);
  if (rc != 0)
    return err.set(DS4TP_EIO, "liveness watcher: uv_loop_init: {}", uv_strerror(rc));
  // Timers cannot fail to initialize; the poll and the stop handle can.
  for (uv_timer_t *t : {&im.hangup, &im.recheck, &im.beat}) {
    uv_timer_init(&im.loop, t);
    t->data = &im;
  }
  const char *step = "uv_async_init";
  rc = uv_async_init(&im.loop, &im.stop, on_stop);
  im.stop.data = &im;
  if (rc == 0 && !os::hangup_look_suffices()) {
    step = "uv_poll_init_socket";
    if ((rc = uv_poll_init_socket(&im.loop, &im.poll, fd)) == 0) {
      im.poll.data = &im;
      im.watching = true;
      step = "uv_poll_start";
      rc = uv_poll_start(&im.poll, UV_DISCONNECT, Impl::on_poll);
    }
    if (rc != 0) uv_close(reinterpret_cast<uv_handle_t *>(&im.stop), nullptr);
  }
  if (rc != 0) {
    im.close_timers();
    if (im.watching) uv_close(reinterpret_cast<uv_handle_t *>(&im.poll), nullptr);
    uv_run(&im.loop, UV_RUN_DEFAULT);  // completes the closes
    uv_loop_close(&im.loop);
    return err.set(DS4TP_EIO, "liveness watcher cannot watch the control connection: {}: {}",
                   step, uv_strerror(rc));
  }
  if (!im.watching)
    uv_timer_start(&im.hangup, Impl::on_hangup_timer, kHangupCheckMs, kHangupCheckMs);
  if (cfg.channel != nullptr && cfg.peer != nullptr) {
    im.judge = SilenceJudge(cfg.peer->silence_ns, 1, now_ns());
    uint64_t period_ms = std::max<uint64_t>(1, cfg.heartbeat_ns / 1000000);
    uv_timer_start(&im.beat, Impl::on_beat_timer, period_ms, period_ms);
  }
  Impl *p = &im;
  im.thread = std::thread([p] {
    os::name_this_thread("ds4tp-watch");
    uv_run(&p->loop, UV_RUN_DEFAULT);
  });
  out = std::move(l);
  return DS4TP_OK;
}

Liveness::~Liveness() {
  if (!impl_) return;
  if (impl_->thread.joinable()) {
    uv_async_send(&impl_->stop);
    impl_->thread.join();
    uv_loop_close(&impl_->loop);
  }
}

}  // namespace ds4tp::talk
