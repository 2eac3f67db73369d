// Framed send/receive over the control connection (docs/PROTOCOL.md,
// "Control frames"). The channel adds the frame header, checks every
// received header (magic, type, flags, size rule, who may send it, the
// per-direction frame counter) before it allocates anything, and bounds
// every wait.
//
// Ownership: the fd is borrowed (the pair owns it). Threading: the session
// serializes send and recv; the liveness watcher thread may call
// send_heartbeat and drain_heartbeats at any time (a write lock and a read
// lock keep frames whole; the session never waits on them for long: the
// watcher only try-locks). recv skips HEARTBEAT frames itself. abandon()
// and the counters may be used from any thread.
// Allocation: send encodes into a reusable buffer and recv reads into a
// reusable buffer; neither allocates unless a frame is larger than any
// before it. recv reads whatever the socket holds, so a frame that came
// whole costs one system call; bytes of the next frame wait in the buffer
// (drain_heartbeats looks there first).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/error.hpp"
#include "wire/codec.hpp"
#include "wire/frames.hpp"

namespace ds4tp::talk { struct PeerState; }

namespace ds4tp::talk {

struct ChannelConfig {
  int role = 0;                          // ds4tp_role of this end
  uint32_t max_frame_bytes = 64u << 20;  // largest payload sent or accepted
  uint64_t spin_ns = 0;                  // busy-poll before blocking in poll()
  talk::PeerState *peer = nullptr;         // HEARTBEAT frames read land here
};

// A received frame; `payload` stays valid until the next recv.
struct Frame {
  wire::FrameHeader header;
  const uint8_t *payload = nullptr;
  wire::FrameType type() const { return wire::FrameType(header.type); }
  uint32_t bytes() const { return header.bytes; }
};

constexpr int64_t kNoTimeout = -1;

class Channel {
 public:
  Channel(int fd, const ChannelConfig &cfg);
  ~Channel();
  Channel(const Channel &) = delete;
  Channel &operator=(const Channel &) = delete;

  // Sends one frame of `type` whose payload `fill(Writer &)` writes, exactly
  // `bytes` long. Fails with EINVAL (payload above max_frame_bytes, encoder
  // wrote a different size), ETIMEDOUT (not written within timeout_ms),
  // EPEERCLOSED, EIO or EFAILED (abandoned while blocked).
  template <typename Fill>
  int send(wire::FrameType type, uint64_t bytes, int64_t timeout_ms, Fill &&fill, Error &err) {
    if (bytes > cfg_.max_frame_bytes)
      return err.set(DS4TP_EINVAL,
                     "{} frame of {} payload bytes exceeds max_frame_bytes {} (the peer "
                     "would refuse it): split the work or raise max_frame_bytes on both ranks",
                     wire::frame_name(type), bytes, cfg_.max_frame_bytes);
    uint8_t *buf = send_buffer(wire::kFrameHeaderBytes + bytes);
    wire::Writer w(buf + wire::kFrameHeaderBytes, size_t(bytes));
    fill(w);
    if (!w.ok() || w.size() != bytes)
      return err.set(DS4TP_EINVAL, "{} frame encoder wrote {} of {} bytes (internal error)",
                     wire::frame_name(type), w.size(), bytes);
    return write_frame(type, buf, uint32_t(bytes), timeout_ms, err);
  }

  // Receives the next whole frame. `what` names the wait in messages ("the
  // COMMAND_ACK for SESSION_CREATE"). timeout_ms < 0 waits without a
  // deadline (death of the peer still ends the wait). Fails with
  // ETIMEDOUT, EPEERCLOSED, EIO, EPROTO (bad header, a frame only this
  // rank may send, counter jump) or EFAILED (abandoned while no bytes came).
  // arrival_ms (with a PeerState): a live peer may start the frame this
  // late (kNoTimeout: no limit; never shorter than timeout_ms); its
  // silence ends the wait sooner. Once the frame's first byte is in,
  // timeout_ms bounds the rest of it. 0: timeout_ms bounds it all.
  int recv(Frame &out, int64_t timeout_ms, const char *what, Error &err, int64_t arrival_ms = 0);

  // Liveness watcher only. Sends one HEARTBEAT unless the session is
  // writing (its bytes say we are alive) or the socket has no room (the
  // peer is not reading; it hears us again once it does). Never blocks
  // before the first byte; a partial frame is finished within 1 s.
  void send_heartbeat(const wire::HeartbeatMsg &m);
  // Liveness watcher only. Unless the session is reading, consumes the
  // HEARTBEAT frames at the head of the stream (stops at any other frame).
  // Returns the bytes still unread in the socket afterwards.
  size_t drain_heartbeats();
  // Liveness watcher only. Copies up to `max` unread bytes into `out`: the
  // read-ahead (when the session is not reading: it then starts at a frame
  // boundary), then what the socket holds, peeked.
  // Returns false when the session was reading, so its buffer was not
  // looked at (a frame it holds may be the STOP or error that explains a
  // close).
  bool peek_unread(std::vector<uint8_t> &out, size_t max);
  // True once recv() returned a STOP (any thread). Set before the reader
  // lets go of the frame, so a close that follows is never judged in the
  // gap before the session notes the STOP itself.
  bool stop_received() const { return stop_received_.load(std::memory_order_acquire); }
  // Bytes read from the control connection so far (any thread).
  uint64_t bytes_received() const { return rx_bytes_.load(std::memory_order_relaxed); }
  // Latches "give up": every wait that finds nothing to read or no room to
  // write returns EFAILED from now on. Bytes already buffered are still
  // read. Any thread; async-signal-safe apart from the first call's
  // wake-up handle's creation (done in the constructor).
  void abandon();
  bool abandoned() const { return abandoned_.load(std::memory_order_acquire); }

  int fd() const { return fd_; }
  uint32_t max_frame_bytes() const { return cfg_.max_frame_bytes; }
  uint64_t frames_sent() const { return tx_counter_; }
  uint64_t frames_received() const { return rx_counter_; }

 private:
  uint8_t *send_buffer(uint64_t total);
  int write_frame(wire::FrameType type, uint8_t *buf, uint32_t bytes, int64_t timeout_ms,
                  Error &err);
  // `deadline` 0: timeout_ms from the first time the socket is full (no
  // clock read for a frame the socket takes at once).
  int io_write(const uint8_t *p, size_t len, uint64_t deadline, int64_t timeout_ms,
               wire::FrameType type, Error &err);
  // A read's deadlines: `meet` until the frame's first byte (the peer may
  // be late), then timeout_ms from that byte for the rest of the frame.
  // Both 0 until a wait needs them (one clock read then).
  struct ReadClock {
    uint64_t meet;
    int64_t meet_ms, timeout_ms;
    uint64_t rest = 0;
  };
  int fill(size_t need, ReadClock &clock, const char *what, size_t frame_len, Error &err);
  int wait(short events, uint64_t deadline, Error &err);
  void heard(const uint8_t *payload);

  int fd_;
  int wake_[2] = {-1, -1};  // os::wake_open: [0] readable once abandoned
  ChannelConfig cfg_;
  std::atomic<bool> abandoned_{false};
  std::atomic<bool> stop_received_{false};
  uint32_t tx_counter_ = 0;
  uint32_t rx_counter_ = 0;
  std::unique_ptr<uint8_t[]> sbuf_;
  size_t scap_ = 0;
  // Received bytes not yet consumed: [rpos_, rend_) of rbuf_ (rcap_ long).
  std::unique_ptr<uint8_t[]> rbuf_;
  size_t rcap_ = 0, rpos_ = 0, rend_ = 0;
  std::mutex write_mu_, read_mu_;
  std::atomic<uint64_t> rx_bytes_{0};
};

}  // namespace ds4tp::talk
