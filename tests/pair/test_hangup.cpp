// The worker's liveness watcher judging the leader's hang-up: what the
// scan finds among unread frames, and when a close is the normal end
// after STOP rather than a crash (lib/talk/liveness.cpp).
#include <catch2/catch.hpp>

#include <dirent.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>

#include "support/frame_samples.hpp"
#include "os/os.hpp"
#include "support/loopback.hpp"
#include "talk/channel.hpp"
#include "talk/liveness.hpp"
#include "wire/frames.hpp"

using namespace ds4tp;
using namespace ds4tp::wire;
using namespace ds4tp::test;
using talk::Channel;
using talk::ChannelConfig;
using talk::Frame;

namespace {

ChannelConfig worker_cfg() { return ChannelConfig{DS4TP_ROLE_WORKER, 64u << 20, 0}; }

// A whole frame of `type` with its sample payload, as a peer sends it.
std::vector<uint8_t> sample_frame(FrameType type) {
  return frame_bytes(uint16_t(type), 1, frame_samples()[size_t(type) - 1].payload);
}

struct Verdict {
  int code = 0;  // 0: the watcher latched nothing
  std::string why;
};

// Runs a worker's liveness watcher on `fd` (the leader has hung up) past
// the 250 ms grace a busy reader gets, and returns what it latched.
Verdict watch_close(int fd, Channel &ch, std::function<bool()> close_expected) {
  std::atomic<int> code{0};
  std::string why;  // read after the watcher's thread has ended
  talk::LivenessHooks hooks;
  hooks.close_expected = std::move(close_expected);
  hooks.dead = [&](int c, const std::string &w, int) {
    why = w;
    code.store(c);
  };
  talk::LivenessConfig lc;
  lc.role = DS4TP_ROLE_WORKER;
  lc.channel = &ch;
  Error err;
  std::unique_ptr<talk::Liveness> watch;
  if (talk::Liveness::start(fd, lc, std::move(hooks), Logger{}, watch, err) != DS4TP_OK)
    return {-999, "the watcher did not start: " + err.message};
  for (int i = 0; i < 60 && code.load() == 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  watch.reset();
  return {code.load(), why};
}

}  // namespace

TEST_CASE("the liveness scan finds a STOP or a worker's error among unread frames, and nothing mid-frame") {
  auto samples = test::frame_samples();
  auto logits = frame_bytes(uint16_t(FrameType::Logits), 1,
                            samples[size_t(FrameType::Logits) - 1].payload);
  auto error = frame_bytes(uint16_t(FrameType::WorkerError), 2,
                           samples[size_t(FrameType::WorkerError) - 1].payload);
  auto stop = frame_bytes(uint16_t(FrameType::Stop), 3, {});
  std::string why;
  int status = 0;
  std::vector<uint8_t> buf = logits;
  buf.insert(buf.end(), error.begin(), error.end());
  REQUIRE(talk::scan_pending(buf.data(), buf.size(), 1u << 20, why, status) ==
          talk::Pending::WorkerError);
  REQUIRE(status == -5);
  REQUIRE_THAT(why, Catch::Contains("EVAL") && Catch::Contains("engine ran out of KV cache"));
  // The error is cut short: not found.
  REQUIRE(talk::scan_pending(buf.data(), buf.size() - 1, 1u << 20, why, status) ==
          talk::Pending::Nothing);
  // Starting inside a frame (a reader consumed part of it): not found.
  REQUIRE(talk::scan_pending(buf.data() + 5, buf.size() - 5, 1u << 20, why, status) ==
          talk::Pending::Nothing);
  buf = logits;
  buf.insert(buf.end(), stop.begin(), stop.end());
  REQUIRE(talk::scan_pending(buf.data(), buf.size(), 1u << 20, why, status) == talk::Pending::Stop);
  // Only replies: the reader may still take them before the close counts.
  REQUIRE(talk::scan_pending(logits.data(), logits.size(), 1u << 20, why, status) ==
          talk::Pending::Replies);
}

TEST_CASE("a leader closing right after its STOP is the normal end, even before the worker's session notes the STOP") {
  // The worker's reader has taken the last frame and the leader has hung
  // up; the session has not looked at the frame yet (close_expected says
  // no). After a STOP nothing may latch; after any other command the close
  // is a failure.
  for (FrameType last : {FrameType::Stop, FrameType::Eval}) {
    INFO("last frame " << frame_name(uint16_t(last)));
    TcpPair tp;
    raw_write(tp.a, sample_frame(last));
    Channel ch(tp.b, worker_cfg());
    Error err;
    Frame f;
    REQUIRE(ch.recv(f, 1000, "last command", err) == DS4TP_OK);
    REQUIRE(f.type() == last);
    REQUIRE(ch.stop_received() == (last == FrameType::Stop));
    close(tp.a);
    tp.a = -1;
    Verdict v = watch_close(tp.b, ch, [] { return false; });
    INFO("watcher's verdict: " << v.why);
    CHECK(v.code == (last == FrameType::Stop ? 0 : DS4TP_EPEERCLOSED));
  }
}

TEST_CASE("a leader that resets the connection after its STOP, unread, is the normal end too") {
  // A worker's heartbeat reaching a socket the leader already closed is
  // answered with a reset; the STOP before it is still there to read.
  for (FrameType last : {FrameType::Stop, FrameType::Eval}) {
    INFO("last frame " << frame_name(uint16_t(last)));
    TcpPair tp;
    raw_write(tp.a, sample_frame(last));
    const linger hard{1, 0};  // close() sends RST
    REQUIRE(setsockopt(tp.a, SOL_SOCKET, SO_LINGER, &hard, sizeof hard) == 0);
    close(tp.a);
    tp.a = -1;
    Channel ch(tp.b, worker_cfg());
    Verdict v = watch_close(tp.b, ch, [] { return false; });
    INFO("watcher's verdict: " << v.why);
    CHECK(v.code == (last == FrameType::Stop ? 0 : DS4TP_EPEERCLOSED));
    Error err;
    Frame f;
    CHECK(ch.recv(f, 1000, "last command", err) == DS4TP_OK);  // still readable
    INFO("recv: " << err.message);
    CHECK(f.type() == last);
  }
}

TEST_CASE("a STOP the session reads while the watcher judges the close is the normal end too") {
  // The watcher sees the hang-up and finds the STOP not noted yet; the
  // session then takes it (here: inside that first check), so the peek
  // finds nothing unread. That must not latch EPEERCLOSED.
  TcpPair tp;
  raw_write(tp.a, sample_frame(FrameType::Stop));
  close(tp.a);
  tp.a = -1;
  Channel ch(tp.b, worker_cfg());
  int reads = 0;  // the watcher's thread has ended when we read these
  std::string recv_err;
  Verdict v = watch_close(tp.b, ch, [&] {
    if (reads++ == 0) {
      Error e;
      Frame f;
      if (ch.recv(f, 1000, "STOP", e) != DS4TP_OK) recv_err = e.message;
    }
    return false;
  });
  INFO("watcher's verdict: " << v.why << "; the session's recv: " << recv_err);
  CHECK(reads >= 1);
  CHECK(recv_err.empty());
  CHECK(ch.stop_received());
  CHECK(v.code == 0);
}

namespace {

// The fds of this process that an epoll set watches, from each epoll fd's
// /proc/self/fdinfo ("tfd:" lines). Empty where /proc does not say.
std::set<int> epoll_watched_fds() {
  std::set<int> out;
  DIR *d = opendir("/proc/self/fdinfo");
  if (d == nullptr) return out;
  while (dirent *e = readdir(d)) {
    std::ifstream info(std::string("/proc/self/fdinfo/") + e->d_name);
    std::string word;
    while (info >> word)
      if (word == "tfd:") {
        int fd = -1;
        if (info >> fd) out.insert(fd);
      }
  }
  closedir(d);
  return out;
}

}  // namespace

TEST_CASE("the watcher looks for a hang-up without watching the socket, and still latches it") {
  // A socket in an epoll set runs the set's wake-up callback for every
  // frame that arrives (4-5% of a control round trip on loopback): where
  // a look sees a FIN behind unread bytes (Linux), the watcher looks every
  // few ms instead. Either way an idle rank learns of the peer's close.
  TcpPair tp;
  Channel ch(tp.b, worker_cfg());
  std::atomic<int> code{0};
  talk::LivenessHooks hooks;
  hooks.dead = [&](int c, const std::string &, int) { code.store(c); };
  talk::LivenessConfig lc;
  lc.role = DS4TP_ROLE_WORKER;
  lc.channel = &ch;
  Error err;
  std::unique_ptr<talk::Liveness> watch;
  REQUIRE(talk::Liveness::start(tp.b, lc, std::move(hooks), Logger{}, watch, err) == DS4TP_OK);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // its loop runs its first looks
  const std::set<int> watched = epoll_watched_fds();
  INFO("fds in this process's epoll sets: " << watched.size());
  if (os::hangup_look_suffices()) CHECK(watched.count(tp.b) == 0);
  close(tp.a);
  tp.a = -1;
  const auto t0 = std::chrono::steady_clock::now();
  while (code.load() == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - t0).count();
  INFO("latched after " << ms << " ms");
  CHECK(code.load() == DS4TP_EPEERCLOSED);
  watch.reset();
}
