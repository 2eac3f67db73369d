// The control channel and session layer over real TCP sockets: every frame
// type between two processes, every header fault a peer can commit, the
// deadlines, and the allocation-free EVAL path.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "support/alloc_count.hpp"
#include "talk/channel.hpp"
#include "os/wait.hpp"
#include "support/frame_samples.hpp"
#include "support/loopback.hpp"
#include "support/procs.hpp"
#include "session/session.hpp"
#include "wire/codec.hpp"
#include "wire/frames.hpp"
#include "talk/peer_state.hpp"

using namespace ds4tp;
using namespace ds4tp::wire;
using ds4tp::test::frame_header;
using ds4tp::test::raw_write;
using ds4tp::test::TcpPair;
using talk::Channel;
using talk::ChannelConfig;
using talk::Frame;

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

ChannelConfig cfg(int role, uint32_t max = 64u << 20) { return ChannelConfig{role, max, 0}; }

// A leader and a worker session (4 layers, 64 floats) over one loopback pair.
struct SessionPair {
  TcpPair tp;
  session::SessionConfig lc, wc;
  Logger log{nullptr, nullptr, DS4TP_LOG_ERROR};
  session::Session leader, worker;
  explicit SessionPair(int frame_timeout_ms)
      : lc(config(DS4TP_ROLE_LEADER, frame_timeout_ms)),
        wc(config(DS4TP_ROLE_WORKER, frame_timeout_ms)),
        leader(tp.a, lc, log),
        worker(tp.b, wc, log) {}
  static session::SessionConfig config(int role, int frame_timeout_ms) {
    session::SessionConfig c;
    c.role = role;
    c.n_layer = 4;
    c.n_embd = 64;
    c.frame_timeout_ms = frame_timeout_ms;
    return c;
  }
};

int send_sample(Channel &ch, const test::FrameSample &s, Error &err) {
  return ch.send(FrameType(s.type), s.payload.size(), 5000,
                 [&](Writer &w) { w.bytes(s.payload.data(), s.payload.size()); }, err);
}

// Receives one frame and checks it is `s`, byte for byte after a decode and
// re-encode. Returns 0 or a failed check's code (runs in the child).
int expect_sample(Channel &ch, const test::FrameSample &s) {
  Error err;
  Frame f;
  CHILD_EXPECT_OK(ch.recv(f, 5000, "test", err), nullptr, "recv %s: %s", frame_name(s.type),
                  err.message.c_str());
  CHILD_EXPECT(f.header.type == s.type && f.bytes() == s.payload.size(), nullptr,
               "wanted %s of %zu bytes, got type %d of %llu bytes", frame_name(s.type),
               s.payload.size(), int(f.header.type), (unsigned long long)f.bytes());
  std::vector<uint8_t> again;
  CHILD_EXPECT_OK(test::reencode(s.type, f.payload, f.bytes(), again, err), nullptr,
                  "re-encode %s: %s", frame_name(s.type), err.message.c_str());
  CHILD_EXPECT(again == s.payload, nullptr, "%s differs after a re-encode", frame_name(s.type));
  return 0;
}

}  // namespace

// HEARTBEAT is the liveness watcher's (outside the frame counter; recv
// skips it): Channel::send_heartbeat sends it, not Channel::send.
bool watcher_only(uint16_t type) { return type == uint16_t(FrameType::Heartbeat); }

TEST_CASE("every frame type crosses real sockets between two processes in each direction it may travel") {
  TcpPair tp;
  auto samples = test::frame_samples();
  test::Child worker = test::Child::spawn(
      [&](int) {
        close(tp.a);
        tp.a = -1;
        Channel ch(tp.b, cfg(DS4TP_ROLE_WORKER));
        int bad = 0;  // samples that failed a check
        for (const auto &s : samples)
          if (frame_rule(s.type)->sender != Sender::Worker && !watcher_only(s.type)) bad += expect_sample(ch, s) ? 1 : 0;
        Error err;
        for (const auto &s : samples)
          if (frame_rule(s.type)->sender != Sender::Leader && !watcher_only(s.type)) {
            int rc = send_sample(ch, s, err);
            if (rc != DS4TP_OK) {
              test::expect_failed(__FILE__, __LINE__, "send_sample == DS4TP_OK", nullptr, true, rc,
                                  false, 0, "send %s: %s", frame_name(s.type), err.message.c_str());
              bad++;
            }
          }
        return bad;
      },
      "worker");
  close(tp.b);
  tp.b = -1;
  Channel ch(tp.a, cfg(DS4TP_ROLE_LEADER));
  Error err;
  int sent = 0, got = 0;
  for (const auto &s : samples)
    if (frame_rule(s.type)->sender != Sender::Worker && !watcher_only(s.type)) {
      REQUIRE(send_sample(ch, s, err) == DS4TP_OK);
      sent++;
    }
  for (const auto &s : samples)
    if (frame_rule(s.type)->sender != Sender::Leader && !watcher_only(s.type)) {
      INFO(frame_name(s.type));
      REQUIRE(expect_sample(ch, s) == 0);
      got++;
    }
  int status = worker.reap(60000);
  INFO(worker.describe(status));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  // Leader-only 15 + both 11 one way; worker-only 5 + both 11 back.
  REQUIRE(sent == 26);
  REQUIRE(got == 16);
  REQUIRE(ch.frames_sent() == 26);
  REQUIRE(ch.frames_received() == 16);
}

TEST_CASE("a hostile or broken peer gets a named protocol error, never an allocation or a hang") {
  TcpPair tp;
  Channel ch(tp.b, cfg(DS4TP_ROLE_WORKER, 64u << 20));
  Error err;
  Frame f;

  SECTION("a frame announcing 1 GiB is refused at its header") {
    raw_write(tp.a, frame_header(uint16_t(FrameType::Sync), 1u << 30));
    auto t0 = Clock::now();
    REQUIRE(ch.recv(f, 5000, "waiting for a command", err) == DS4TP_EPROTO);
    REQUIRE(ms_since(t0) < 1000);  // no wait for a payload that never comes
    REQUIRE_THAT(err.message, Catch::Contains("SYNC") && Catch::Contains("1073741824") &&
                                  Catch::Contains("max_frame_bytes 67108864"));
  }
  SECTION("bad magic") {
    raw_write(tp.a, frame_header(uint16_t(FrameType::Eval), 24, 1, 0x12345678u));
    REQUIRE(ch.recv(f, 5000, "waiting for a command", err) == DS4TP_EPROTO);
    REQUIRE_THAT(err.message, Catch::Contains("magic 0x12345678"));
  }
  SECTION("unknown type, named with its size") {
    raw_write(tp.a, frame_header(77, 12));
    REQUIRE(ch.recv(f, 5000, "waiting for a command", err) == DS4TP_EPROTO);
    REQUIRE_THAT(err.message, Catch::Contains("type 77") && Catch::Contains("12 payload bytes"));
  }
  SECTION("a size that breaks the type's rule") {
    raw_write(tp.a, frame_header(uint16_t(FrameType::Eval), 20));
    REQUIRE(ch.recv(f, 5000, "waiting for a command", err) == DS4TP_EPROTO);
    REQUIRE_THAT(err.message, Catch::Contains("EVAL") && Catch::Contains("20 bytes"));
  }
  SECTION("a frame only the receiver's own role may send") {
    raw_write(tp.a, frame_header(uint16_t(FrameType::CommandAck), 16));
    REQUIRE(ch.recv(f, 5000, "waiting for a command", err) == DS4TP_EPROTO);
    REQUIRE_THAT(err.message, Catch::Contains("COMMAND_ACK") && Catch::Contains("only the worker"));
  }
  SECTION("a lost or duplicated frame shows as a counter jump") {
    auto h = frame_header(uint16_t(FrameType::Stop), 0, 2);
    raw_write(tp.a, h);
    REQUIRE(ch.recv(f, 5000, "waiting for a command", err) == DS4TP_EPROTO);
    REQUIRE_THAT(err.message, Catch::Contains("counter jumped from 0 to 2"));
  }
  SECTION("a frame cut short by the peer closing") {
    auto h = frame_header(uint16_t(FrameType::Eval), 24);
    h.insert(h.end(), 10, 0);
    raw_write(tp.a, h);
    close(tp.a);
    tp.a = -1;
    REQUIRE(ch.recv(f, 5000, "waiting for a command", err) == DS4TP_EPEERCLOSED);
    REQUIRE_THAT(err.message, Catch::Contains("truncated") && Catch::Contains("26 of 40"));
  }
  SECTION("silence ends at the deadline, naming it") {
    auto t0 = Clock::now();
    REQUIRE(ch.recv(f, 200, "waiting for the COMMAND_ACK", err) == DS4TP_ETIMEDOUT);
    double took = ms_since(t0);
    REQUIRE(took >= 190);
    REQUIRE(took < 2000);
    REQUIRE_THAT(err.message, Catch::Contains("COMMAND_ACK") && Catch::Contains("200 ms"));
  }
  SECTION("abandon() wakes a wait without a deadline at once") {
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ch.abandon();
    });
    auto t0 = Clock::now();
    int rc = ch.recv(f, talk::kNoTimeout, "waiting for a command", err);
    t.join();
    REQUIRE(rc == DS4TP_EFAILED);
    REQUIRE(ms_since(t0) < 1500);
  }
  SECTION("the peer closing wakes a wait without a deadline at once") {
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ::shutdown(tp.a, SHUT_RDWR);
    });
    auto t0 = Clock::now();
    int rc = ch.recv(f, talk::kNoTimeout, "waiting for a command", err);
    t.join();
    REQUIRE(rc == DS4TP_EPEERCLOSED);
    REQUIRE(ms_since(t0) < 1500);
  }
  SECTION("a payload above max_frame_bytes is not sent") {
    Channel small(tp.a, cfg(DS4TP_ROLE_LEADER, 4096));
    int rc = small.send(FrameType::Sync, 5000, 1000, [](Writer &) {}, err);
    REQUIRE(rc == DS4TP_EINVAL);
    REQUIRE_THAT(err.message, Catch::Contains("max_frame_bytes 4096"));
  }
}

TEST_CASE("an EVAL and its logits half cross without allocating once warm") {
  SessionPair sessions(5000);
  session::Session &leader = sessions.leader, &worker = sessions.worker;
  session::Command cmd;
  std::vector<float> half(500, 1.25f), got(500);
  Error err;
  long allocs = 0;
  for (uint64_t seq = 1; seq <= 50; seq++) {
    uint64_t before = test::alloc::this_thread();
    int rc = leader.send_eval(7, seq, int32_t(seq), 500, err);
    if (rc == DS4TP_OK) rc = worker.recv_command(cmd, 5000, err);
    if (rc == DS4TP_OK) rc = worker.send_logits(half.data(), 500, err);
    if (rc == DS4TP_OK) rc = leader.recv_logits(got.data(), 500, err);
    uint64_t used = test::alloc::this_thread() - before;
    INFO(err.message);
    REQUIRE(rc == DS4TP_OK);
    REQUIRE(cmd.type == FrameType::Eval);
    REQUIRE(cmd.seq == seq);
    REQUIRE(got == half);
    if (seq > 2) allocs += long(used);  // the first rounds may size buffers
  }
  REQUIRE(allocs == 0);
}

TEST_CASE("the session refuses calls that would break the reply order, naming what is due") {
  SessionPair sessions(2000);
  session::Session &leader = sessions.leader, &worker = sessions.worker;
  session::Command cmd;
  Error err;
  int32_t status = -1;

  REQUIRE(leader.send_session_create(5, 4096, err) == DS4TP_OK);
  REQUIRE(leader.send_eval(5, 1, 1, 0, err) == DS4TP_ESTATE);
  REQUIRE_THAT(err.message, Catch::Contains("COMMAND_ACK") && Catch::Contains("SESSION_CREATE") &&
                                Catch::Contains("session 5"));
  REQUIRE(leader.wait_ack(6, &status, err) == DS4TP_EINVAL);
  REQUIRE(worker.recv_command(cmd, 2000, err) == DS4TP_OK);
  REQUIRE(worker.recv_command(cmd, 2000, err) == DS4TP_ESTATE);  // the ack is owed
  REQUIRE(worker.send_sync_ack(0, 0, err) == DS4TP_ESTATE);
  REQUIRE(worker.send_ack(0, err) == DS4TP_OK);
  REQUIRE(leader.wait_ack(5, &status, err) == DS4TP_OK);
  REQUIRE(status == 0);

  // Logits of an EVAL must be read before the next command.
  REQUIRE(leader.send_eval(5, 1, 3, 8, err) == DS4TP_OK);
  REQUIRE(leader.send_eval(5, 2, 3, 8, err) == DS4TP_ESTATE);
  REQUIRE_THAT(err.message, Catch::Contains("LOGITS"));
  float v[8] = {1, 2, 3, 4, 5, 6, 7, 8}, w[8] = {};
  REQUIRE(worker.recv_command(cmd, 2000, err) == DS4TP_OK);
  REQUIRE(worker.send_logits(v, 7, err) == DS4TP_EINVAL);  // the leader asked for 8
  REQUIRE(worker.send_logits(v, 8, err) == DS4TP_OK);
  REQUIRE(worker.send_logits(v, 8, err) == DS4TP_ESTATE);  // only one was due
  REQUIRE(leader.recv_logits(w, 8, err) == DS4TP_OK);
  REQUIRE(std::memcmp(v, w, sizeof v) == 0);
  REQUIRE(leader.recv_logits(w, 8, err) == DS4TP_ESTATE);

  // Eval seqs rise; a verify must be followed by its commit.
  REQUIRE(leader.send_eval(5, 1, 3, 0, err) == DS4TP_EINVAL);
  int32_t drafts[3] = {1, 2, 3};
  REQUIRE(leader.send_verify(5, drafts, 3, 0, err) == DS4TP_OK);
  REQUIRE(leader.send_eval(5, 9, 3, 0, err) == DS4TP_ESTATE);
  REQUIRE(leader.send_verify_commit(DS4TP_COMMIT_PREFIX, 3, 0, err) == DS4TP_EINVAL);  // 1..2
  REQUIRE(leader.send_verify_commit(DS4TP_COMMIT_PREFIX, 2, 0, err) == DS4TP_OK);
  REQUIRE(worker.recv_command(cmd, 2000, err) == DS4TP_OK);
  REQUIRE(cmd.type == FrameType::Verify);
  REQUIRE(worker.recv_command(cmd, 2000, err) == DS4TP_OK);
  REQUIRE(cmd.type == FrameType::VerifyCommit);
  REQUIRE(cmd.count == 2);

  // Role checks.
  REQUIRE(worker.send_eval(5, 10, 1, 0, err) == DS4TP_ESTATE);
  REQUIRE(leader.send_ack(0, err) == DS4TP_ESTATE);
  REQUIRE(worker.hash_check(5, 1, 1, err) == DS4TP_ESTATE);  // no HASH was received
  REQUIRE(worker.head_row_send(0, v, 8, err) == DS4TP_ESTATE);  // no verify block yet
}

TEST_CASE("a worker that stops reading makes the leader's send time out, not hang") {
  TcpPair tp;
  int small = 4096;
  setsockopt(tp.a, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  setsockopt(tp.b, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  session::SessionConfig lc;
  lc.role = DS4TP_ROLE_LEADER;
  lc.n_layer = 4;
  lc.n_embd = 64;
  lc.frame_timeout_ms = 300;
  Logger log(nullptr, nullptr, DS4TP_LOG_ERROR);
  session::Session leader(tp.a, lc, log);
  std::vector<int32_t> tokens(1u << 18, 1);  // 1 MiB: far more than the 4 KiB buffers hold
  Error err;
  auto t0 = Clock::now();
  REQUIRE(leader.send_sync(3, tokens.data(), uint32_t(tokens.size()), 0, err) == DS4TP_ETIMEDOUT);
  REQUIRE(ms_since(t0) < 3000);
  REQUIRE_THAT(err.message, Catch::Contains("SYNC") && Catch::Contains("300 ms"));
}

TEST_CASE("frames that arrive together are read in one go and returned one by one, heartbeats included") {
  TcpPair tp;
  // Three frames and a heartbeat in the socket before the first recv.
  auto samples = test::frame_samples();
  std::vector<uint8_t> bytes;
  auto add = [&](FrameType t, uint32_t counter, const std::vector<uint8_t> &payload) {
    auto f = test::frame_bytes(uint16_t(t), counter, payload);
    bytes.insert(bytes.end(), f.begin(), f.end());
  };
  std::vector<uint8_t> beat(kHeartbeatBytes);
  {
    HeartbeatMsg m;
    m.kind = 1;
    m.layer = 7;
    m.seq = 99;
    Writer w(beat.data(), beat.size());
    encode(w, m);
  }
  const auto &logits = samples[size_t(FrameType::Logits) - 1].payload;
  add(FrameType::Logits, 1, logits);
  add(FrameType::Logits, 2, logits);
  add(FrameType::Heartbeat, 0, beat);
  add(FrameType::CommandAck, 3, samples[size_t(FrameType::CommandAck) - 1].payload);
  raw_write(tp.b, bytes);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // all of it in the socket

  talk::PeerState peer;
  ChannelConfig c = cfg(DS4TP_ROLE_LEADER);
  c.peer = &peer;
  Channel ch(tp.a, c);
  Error err;
  Frame f;
  REQUIRE(ch.recv(f, 1000, "first", err) == DS4TP_OK);
  REQUIRE(f.type() == FrameType::Logits);
  // The rest came along: the watcher sees it as unread, from the buffer.
  REQUIRE(ch.bytes_received() == bytes.size());
  std::vector<uint8_t> unread;
  ch.peek_unread(unread, 1u << 20);
  REQUIRE(unread.size() == bytes.size() - (kFrameHeaderBytes + logits.size()));
  REQUIRE(std::equal(unread.begin(), unread.end(), bytes.end() - ptrdiff_t(unread.size())));
  REQUIRE(ch.recv(f, 1000, "second", err) == DS4TP_OK);
  REQUIRE(f.type() == FrameType::Logits);
  REQUIRE(f.header.counter == 2);
  // The session is not reading: the watcher takes the buffered heartbeat.
  REQUIRE(ch.drain_heartbeats() > 0);  // the ack is still unread behind it
  REQUIRE(peer.heartbeats.load() == 1);
  REQUIRE(ds4tp::talk::PeerState::seq_of(peer.peer_gate.load()) == 99);
  REQUIRE(ch.recv(f, 1000, "third", err) == DS4TP_OK);
  REQUIRE(f.type() == FrameType::CommandAck);
  REQUIRE(f.header.counter == 3);
  REQUIRE(ch.drain_heartbeats() == 0);
  // Nothing left: the next wait times out with the frame_timeout message.
  REQUIRE(ch.recv(f, 100, "fourth", err) == DS4TP_ETIMEDOUT);
  REQUIRE_THAT(err.message, Catch::Contains("fourth") && Catch::Contains("100 ms"));
}

TEST_CASE("a frame larger than the read buffer grows it and keeps the bytes behind it") {
  TcpPair tp;
  const size_t big = 300 * 1024;  // above the 64 KiB initial buffer
  std::vector<uint8_t> payload(big);
  for (size_t i = 0; i < big; i++) payload[i] = uint8_t(i * 7 + 3);
  auto samples = test::frame_samples();
  std::vector<uint8_t> bytes = frame_header(uint16_t(FrameType::Logits), uint32_t(big), 1);
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  auto ack = frame_header(uint16_t(FrameType::CommandAck), uint32_t(samples[size_t(FrameType::CommandAck) - 1].payload.size()), 2);
  bytes.insert(bytes.end(), ack.begin(), ack.end());
  bytes.insert(bytes.end(), samples[size_t(FrameType::CommandAck) - 1].payload.begin(),
               samples[size_t(FrameType::CommandAck) - 1].payload.end());
  std::thread writer([&] { raw_write(tp.b, bytes); });
  Channel ch(tp.a, cfg(DS4TP_ROLE_LEADER));
  Error err;
  Frame f;
  REQUIRE(ch.recv(f, 5000, "big", err) == DS4TP_OK);
  writer.join();
  REQUIRE(f.bytes() == big);
  REQUIRE(std::equal(payload.begin(), payload.end(), f.payload));
  REQUIRE(ch.recv(f, 5000, "ack", err) == DS4TP_OK);
  REQUIRE(f.type() == FrameType::CommandAck);
}
