// Peer liveness on the control connection: a per-pair thread running a
// private libuv loop that finds the peer going away (FIN or reset; a
// half-open peer: TCP keepalive and TCP_USER_TIMEOUT turn into a socket
// error), so a rank learns that its peer died even while it is not
// reading, e.g. between tokens. Where a look sees a FIN behind unread
// bytes (os::hangup_look_suffices: Linux) it looks every 10 ms
// (os::wait_hangup) rather than watching: a socket in an epoll or kqueue
// set runs the set's wake-up callback for every frame that arrives, which
// cost each control round trip 4-5% on loopback, while every wait of the
// session and the transports sees a hang-up of its own sockets by itself.
// Elsewhere it watches the fd (libuv's UV_DISCONNECT).
//
// Heartbeats (docs/PROTOCOL.md, "Heartbeats"): every heartbeat period the
// thread sends a HEARTBEAT carrying this rank's last completed gate, and
// consumes the peer's HEARTBEATs at the head of the stream when the session
// is not reading (the session skips them itself when it is). The peer is
// heard while bytes of any kind keep arriving, or while unread bytes wait
// for our own session (then it is us who hold it back). A peer not heard
// for silence_ns is silent: the thread sets PeerState::verdict (every wait
// reads it through os::PeerWatch) and reports it through `dead` with
// ETIMEDOUT. Gaps in the thread's own schedule (this process was stopped
// or starved) restart the silence count rather than blaming the peer.
//
// Apart from heartbeats it never reads frame bytes: it looks for hang-up and, when the peer
// is gone, peeks (MSG_PEEK) at what is still buffered: a WORKER_ERROR the
// worker sent before it closed makes the leader's failure name the
// worker's reason and status; a STOP the worker has not read yet means
// the leader ended the lockstep normally, so nothing latches. When the
// unread bytes start mid-frame (a reader is inside a frame), or the
// session is reading so its buffer cannot be looked at, the verdict waits
// up to 250 ms for the reader to reach a frame boundary. A STOP the
// session already took counts from the moment its channel returned it.
//
// Threading: start() spawns the thread; the destructor stops and joins it
// (no callback runs after the destructor returns). The hooks run on the
// liveness thread and must be thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/error.hpp"
#include "common/log.hpp"

namespace ds4tp::talk { struct PeerState; }

namespace ds4tp::talk {

class Channel;

struct LivenessHooks {
  // True once the lockstep ended normally (STOP sent or received): the
  // peer closing is then expected and not a failure.
  std::function<bool()> close_expected;
  // The peer is gone: `code` is EPEERCLOSED, or EREMOTE when a buffered
  // WORKER_ERROR frame explains why (`remote_status` is that frame's
  // status), or ETIMEDOUT when it went silent.
  std::function<void(int code, const std::string &why, int remote_status)> dead;
};

struct LivenessConfig {
  int role = 0;                      // ds4tp_role of this end
  uint32_t max_frame_bytes = 64u << 20;
  int dead_peer_ms = 10000;          // TCP_USER_TIMEOUT: unacknowledged data / keepalive
  // Heartbeats: both null = off (only hang-ups are watched).
  Channel *channel = nullptr;        // borrowed; outlives the watcher
  talk::PeerState *peer = nullptr;     // borrowed; outlives the watcher
  uint64_t heartbeat_ns = 100000000;
};

class Liveness {
 public:
  // Tunes keepalive on `fd` (borrowed; must outlive the watcher) and starts
  // the thread. EIO when libuv cannot watch the fd.
  static int start(int fd, const LivenessConfig &cfg, LivenessHooks hooks, const Logger &log,
                   std::unique_ptr<Liveness> &out, Error &err);
  ~Liveness();
  Liveness(const Liveness &) = delete;
  Liveness &operator=(const Liveness &) = delete;

  struct Impl;

 private:
  Liveness() = default;
  std::unique_ptr<Impl> impl_;
};

// What the peer left unread in the control stream when it went away.
enum class Pending {
  Nothing,      // no complete frame of interest at a frame boundary
  Stop,         // a STOP: the lockstep ended normally, the close is expected
  WorkerError,  // a WORKER_ERROR: `why` and `status` say what failed
  Replies,      // only whole frames of other kinds: replies not read yet
};

// Walks the complete frames at the start of `buf` (bytes peeked from the
// head of the control stream) looking for a STOP or a WORKER_ERROR. Pure.
Pending scan_pending(const uint8_t *buf, size_t len, uint32_t max_frame_bytes, std::string &why,
                     int &status);

}  // namespace ds4tp::talk
