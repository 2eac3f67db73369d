// A fault-injecting TCP relay for tests (this kernel has no tc netem).
//
// It listens on a loopback port of its own and forwards every accepted
// connection to the leader's port, so a worker pointed at it sends both its
// control and its data connection through it. One thread relays all
// connections with poll(); faults are switched at any time from any thread
// or fired by a trigger at an exact byte of a stream:
//   delay      every chunk waits delay_ms before it is forwarded
//   slicing    writes of 1 byte, or of random odd sizes up to `slice`
//   stall      nothing is read or written any more (buffers fill, TCP holds)
//   blackhole  everything is read and thrown away (writes succeed, nothing lands)
//   reset      every connection is closed with RST (SO_LINGER 0)
//
// Construct before fork() (the listener binds at once), start() after it,
// so forked ranks never inherit the relay thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ds4tp::test {

class FaultProxy {
 public:
  enum class Mode { Pass, Stall, Blackhole, Reset };
  // Direction of a stream: toward the leader (from the worker) or back.
  enum Dir { ToLeader = 0, ToWorker = 1 };

  explicit FaultProxy(int leader_port);
  ~FaultProxy();
  FaultProxy(const FaultProxy &) = delete;
  FaultProxy &operator=(const FaultProxy &) = delete;

  int port() const { return port_; }
  void start();
  void stop();  // joins the relay thread and closes everything

  // Settings; take effect on the next chunk.
  void set_delay_ms(int ms) { delay_ms_.store(ms); }
  // 0 = forward as read; 1 = one byte per write; n > 1 = random odd sizes <= n.
  void set_slice(int n) { slice_.store(n); }
  void set_mode(Mode m) { mode_.store(int(m)); }
  Mode mode() const { return Mode(mode_.load()); }

  // When stream (conn, dir) has forwarded exactly `at` bytes: run `action`
  // on the relay thread (e.g. kill a rank), throw away what that stream
  // still holds if `discard_rest`, then switch to `then`. Connections are
  // numbered in accept order from 0 (0 = control, 1 = data for one worker).
  // At most one trigger; set it before start().
  struct Trigger {
    int conn = -1;
    int dir = ToLeader;
    uint64_t at = 0;
    std::function<void()> action;
    bool discard_rest = false;
    Mode then = Mode::Pass;
  };
  void set_trigger(Trigger t) { trigger_ = std::move(t); }
  bool triggered() const { return fired_.load(); }

  // Called on the relay thread for each chunk before it is queued; may
  // change the bytes in place (tampering tests). `offset` is the chunk's
  // position in its stream.
  using Tap = std::function<void(int conn, int dir, uint64_t offset, uint8_t *p, size_t n)>;
  void set_tap(Tap t) { tap_ = std::move(t); }

  // Bytes forwarded so far on (conn, dir); 0 for an unknown conn.
  uint64_t forwarded(int conn, int dir) const;
  int connections() const { return accepted_.load(); }

 private:
  struct Chunk {
    uint64_t due_ns;
    std::vector<uint8_t> bytes;
    size_t off = 0;
  };
  struct Stream {
    int from = -1, to = -1;
    std::vector<Chunk> queue;  // FIFO (front erased as it drains)
    size_t queued = 0;
    uint64_t read = 0, sent = 0;
    bool eof = false;      // the source closed (or failed)
    bool shut = false;     // EOF passed on to the destination
    bool discard = false;  // after a discard_rest trigger: drop what comes
  };
  struct Link {
    int index = 0;
    int fds[2] = {-1, -1};  // worker side, leader side
    Stream s[2];            // ToLeader, ToWorker
    bool closed = false;
  };

  void run();
  void accept_one();
  void pump(Link &l, int dir, bool can_read, bool can_write, uint64_t now);
  void close_link(Link &l, bool rst);
  uint64_t next_slice(size_t left);

  int leader_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> delay_ms_{0}, slice_{0}, mode_{int(Mode::Pass)};
  std::atomic<int> accepted_{0};
  std::atomic<bool> fired_{false};
  Trigger trigger_;
  Tap tap_;
  uint64_t rng_ = 0x9e3779b97f4a7c15ull;
  mutable std::mutex mu_;  // guards counters_ for forwarded()
  std::vector<std::array<uint64_t, 2>> counters_;
  std::vector<std::unique_ptr<Link>> links_;
};

}  // namespace ds4tp::test
