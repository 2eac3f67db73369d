// The RDMA transport's protocol logic against the in-memory UC queue pair
// (tests/support/fake_qp.hpp): set-up and warm-up frames on the data
// connection,
// receive windows keyed by seq, slot placement by the schedule, message
// splitting, drains at shape changes, bulk rounds, loss, error
// completions, peer death and stalls. Both ranks run as threads of this
// process; their data connection goes through a counting relay so a test
// can see exactly what crossed TCP. Every wait has a deadline.
#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.hpp"
#include "net/socket.hpp"
#include "slab/layout.hpp"
#include "slab/schedule.hpp"
#include "support/ranks.hpp"
#include "support/fake_qp.hpp"
#include "support/gate_calls.hpp"
#include "link/rdma/pair_link.hpp"
#include "link/rdma/setup_link.hpp"

using namespace ds4tp;
namespace fk = ds4tp::rdma::fake;
using ds4tp::test::pattern;

namespace {

// Forwards bytes between the two ranks' data sockets, counting them per
// direction; an EOF on one side is passed on as a shutdown of the other.
class Relay {
 public:
  Relay(int a, int b) : fd_{a, b} { th_ = std::thread([this] { loop(); }); }
  ~Relay() {
    stop_ = true;
    th_.join();
    ::close(fd_[0]);
    ::close(fd_[1]);
  }
  uint64_t bytes(int from) const { return n_[from].load(); }

 private:
  void loop() {
    std::vector<char> buf(1 << 16);
    bool open[2] = {true, true};
    while (!stop_) {
      pollfd p[2] = {{open[0] ? fd_[0] : -1, POLLIN, 0}, {open[1] ? fd_[1] : -1, POLLIN, 0}};
      if (::poll(p, 2, 5) <= 0) continue;
      for (int i = 0; i < 2; i++) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = ::read(fd_[i], buf.data(), buf.size());
        if (n <= 0) {
          open[i] = false;
          ::shutdown(fd_[1 - i], SHUT_RDWR);
          continue;
        }
        n_[i] += uint64_t(n);
        for (ssize_t off = 0; off < n;) {
          ssize_t w = ::write(fd_[1 - i], buf.data() + off, size_t(n - off));
          if (w > 0) {
            off += w;
          } else {
            pollfd q{fd_[1 - i], POLLOUT, 0};
            if (::poll(&q, 1, 100) < 0 || stop_) break;
          }
        }
      }
    }
  }
  int fd_[2];
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> n_[2]{};
  std::thread th_;
};

struct RigConfig {
  uint32_t n_layer = 4;
  uint32_t n_embd = 256;
  slab::Schedule sched;  // slots filled in by the rig
  rdma::Tuning tun;
  fk::EndOptions ends[2];
  int gate_timeout_ms = 3000;
  int big_timeout_ms = 5000;
  int spin_us = 20;

  RigConfig() {
    tun.recv_depth = 128;
    tun.send_depth = 64;
    tun.setup_timeout_ns = 5000000000ull;
  }
};

// Two ranks, each a transport over one end of a fake fabric, with their
// own 4096-aligned slab; control via a socket pair, data via the relay.
class Rig {
 public:
  explicit Rig(const RigConfig &c) : cfg(c), fabric(c.ends[0], c.ends[1]) {
    REQUIRE(slab::compute_layout(c.n_layer, c.n_embd, layout));
    sched = c.sched;
    sched.slots = layout.slots;
    REQUIRE(slab::validate_schedule(sched).empty());
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, ctl) == 0);
    int d0[2], d1[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, d0) == 0);
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, d1) == 0);
    for (int fd : {ctl[0], ctl[1], d0[0], d1[0]}) net::set_nonblocking(fd);
    relay = std::make_unique<Relay>(d0[1], d1[1]);
    DataConfig &dc = data;
    dc.gate_timeout_ns = uint64_t(c.gate_timeout_ms) * 1000000;
    dc.big_gate_timeout_ns = uint64_t(c.big_timeout_ms) * 1000000;
    dc.spin_ns = uint64_t(c.spin_us) * 1000;
    bytes = (layout.total + 4095) / 4096 * 4096;
    for (int r = 0; r < 2; r++) {
      slab[r] = static_cast<uint8_t *>(std::aligned_alloc(4096, bytes));
      std::memset(slab[r], 0, bytes);
      rdma::Endpoint ep;
      ep.device = fabric.device(r);
      ep.link = rdma::make_socket_setup_link(r == 0 ? d0[0] : d1[0]);
      ep.data = net::Fd(r == 0 ? d0[0] : d1[0]);
      ep.control_fd = ctl[r];
      ep.rank = r;
      t[r] = rdma::make_pair_link(std::move(ep), dc, c.tun, sched,
                                       Logger(nullptr, nullptr, DS4TP_LOG_ERROR));
    }
  }
  ~Rig() {
    t[0].reset();
    t[1].reset();
    for (int r = 0; r < 2; r++) {
      if (ctl[r] >= 0) ::close(ctl[r]);
      std::free(slab[r]);
    }
  }

  // Runs f(rank) on two threads (rank 1 on a new one); both results.
  std::array<int, 2> run(const std::function<int(int)> &f) {
    std::array<int, 2> rc{-100, -100};
    std::thread th([&] { rc[1] = f(1); });
    rc[0] = f(0);
    th.join();
    return rc;
  }

  std::array<int, 2> attach() {
    auto rc = run([&](int r) { return t[r]->bind(slab[r], layout, err[r]); });
    setup_bytes[0] = relay->bytes(0);
    setup_bytes[1] = relay->bytes(1);
    return rc;
  }
  // Data-connection bytes sent by `rank` since the slab was attached.
  uint64_t tcp_bytes(int rank) const { return relay->bytes(rank) - setup_bytes[rank]; }

  // This rank's simulated death: queue pair, data and control sockets go.
  void kill_rank(int r) {
    t[r].reset();
    ::close(ctl[r]);
    ctl[r] = -1;
  }

  // Row gate `seq` on rank r: fills out[slot], exchanges, checks in[slot]
  // bit for bit against the peer's pattern. Returns the status (or 99 for
  // a wrong payload, with `err[r]` saying where).
  int row(int r, uint64_t seq) {
    int64_t slot = slab::slot_for_seq(sched, seq);
    auto *out = reinterpret_cast<float *>(slab[r] + layout.out_vec(uint32_t(slot)));
    auto *in = reinterpret_cast<float *>(slab[r] + layout.in_vec(uint32_t(slot)));
    uint64_t n = layout.vec_bytes / 4;
    for (uint64_t i = 0; i < n; i++) out[i] = pattern(r, seq, i);
    int rc = test::row_gate(*t[r], slab[r], layout, data, uint32_t(slot / 2), uint32_t(slot % 2),
                            seq, now_ns(), err[r]);
    if (rc) return rc;
    return check(r, in, n, seq, 0, "row gate");
  }

  int batch(int r, uint32_t index, uint32_t rows, uint64_t seq) {
    uint64_t n = layout.vec_bytes / 4;
    for (uint32_t row = 0; row < rows; row++) {
      auto *out = reinterpret_cast<float *>(slab[r] + layout.batch_out_gate(index) +
                                            row * layout.vec_stride);
      for (uint64_t i = 0; i < n; i++) out[i] = pattern(r, seq * 1000 + row, i);
    }
    int rc = test::batch_gate(*t[r], slab[r], layout, data, index, rows, seq, now_ns(), err[r]);
    if (rc) return rc;
    for (uint32_t row = 0; row < rows; row++) {
      auto *in = reinterpret_cast<float *>(slab[r] + layout.batch_in_gate(index) +
                                           row * layout.vec_stride);
      if (int c = check(r, in, n, seq * 1000 + row, 0, "batch gate row")) return c;
    }
    return 0;
  }

  // Big gate of `n` bytes between the given buffers (nullptr: heap ones).
  int big(int r, uint64_t seq, uint64_t n, uint8_t *out = nullptr, uint8_t *in = nullptr) {
    std::vector<uint8_t> ho, hi;
    if (out == nullptr) {
      ho.resize(n + 1);
      hi.resize(n + 1);
      out = ho.data();
      in = hi.data();
    }
    for (uint64_t i = 0; i < n; i++) out[i] = uint8_t((i * 2654435761u) >> 7) ^ uint8_t(r * 91 + seq);
    int rc = test::big_gate(*t[r], data, 0, seq, out, in, n, now_ns(), err[r]);
    if (rc) return rc;
    for (uint64_t i = 0; i < n; i++)
      if (in[i] != (uint8_t((i * 2654435761u) >> 7) ^ uint8_t((1 - r) * 91 + seq))) {
        err[r].set(99, "big gate seq {} byte {} of {} differs", seq, i, n);
        return 99;
      }
    return 0;
  }

  int check(int r, const float *in, uint64_t n, uint64_t seq, int, const char *what) {
    for (uint64_t i = 0; i < n; i++) {
      float want = pattern(1 - r, seq, i);
      if (std::memcmp(&in[i], &want, 4) != 0) {
        err[r].set(99, "{} seq {} float {} differs", what, seq, i);
        return 99;
      }
    }
    return 0;
  }

  RigConfig cfg;
  DataConfig data;
  fk::Fabric fabric;
  slab::Layout layout;
  slab::Schedule sched;
  int ctl[2] = {-1, -1};
  std::unique_ptr<Relay> relay;
  uint64_t bytes = 0;
  uint64_t setup_bytes[2] = {0, 0};
  uint8_t *slab[2] = {nullptr, nullptr};
  std::unique_ptr<link::Link> t[2];
  Error err[2];
};

#define REQUIRE_ATTACHED(rig)                                   \
  do {                                                          \
    auto a_ = (rig).attach();                                   \
    INFO("rank 0: " << (rig).err[0].message);                   \
    INFO("rank 1: " << (rig).err[1].message);                   \
    REQUIRE(a_[0] == DS4TP_OK);                                 \
    REQUIRE(a_[1] == DS4TP_OK);                                 \
  } while (0)

#define CHECK_BOTH_OK(rc, rig)                                  \
  do {                                                          \
    INFO("rank 0: " << (rig).err[0].message);                   \
    INFO("rank 1: " << (rig).err[1].message);                   \
    CHECK((rc)[0] == 0);                                        \
    CHECK((rc)[1] == 0);                                        \
  } while (0)

constexpr uint64_t kBarrier = 32;  // one gate header on the data connection

}  // namespace

TEST_CASE("rdma set-up: both ranks exchange addresses, connect and warm up") {
  RigConfig c;
  Rig rig(c);
  REQUIRE_ATTACHED(rig);
  // One full-size warm-up message each way, nothing lost, one queue pair.
  CHECK(rig.fabric.delivered(0) == 1);
  CHECK(rig.fabric.delivered(1) == 1);
  CHECK(rig.fabric.lost(0) == 0);
  CHECK(rig.fabric.lost(1) == 0);
  CHECK(rig.fabric.qps_created(0) == 1);
  CHECK(rig.fabric.posted_receives(0) == 0);
  // The set-up frames, each a 16-byte header plus its payload, each way:
  // RDMA_INFO 68, RDMA_READY 4, RDMA_POSTED 8, RDMA_WARM 12.
  CHECK(rig.relay->bytes(0) == 16 * 4 + 68 + 4 + 8 + 12);
  CHECK(rig.relay->bytes(1) == 16 * 4 + 68 + 4 + 8 + 12);
}

TEST_CASE("row gates: receives posted ahead land in the schedule's slots, no TCP per gate") {
  RigConfig c;
  std::string name;
  SECTION("every slot in order") { name = "identity"; }
  SECTION("start/step: one FFN gate per layer") {
    c.sched.start = 1;
    c.sched.step = 2;
    c.sched.per_token = 4;
  }
  SECTION("mask: slots 0, 3, 4 and 7") {
    c.sched.mask[0] = (1u << 0) | (1u << 3) | (1u << 4) | (1u << 7);
    c.sched.per_token = 4;
  }
  SECTION("window of 16") { c.tun.row_window = 16; }
  Rig rig(c);
  // Sentinel in every in vector: slots outside the schedule must keep it.
  for (int r = 0; r < 2; r++)
    std::memset(rig.slab[r] + rig.layout.in, 0xEE, rig.layout.slots * rig.layout.slot_stride);
  REQUIRE_ATTACHED(rig);
  const uint64_t gates = 40;
  auto rc = rig.run([&](int r) {
    for (uint64_t s = 1; s <= gates; s++)
      if (int e = rig.row(r, s)) return e;
    return 0;
  });
  CHECK_BOTH_OK(rc, rig);
  std::vector<bool> used(rig.layout.slots, false);
  for (uint64_t s = 1; s <= gates; s++) used[size_t(slab::slot_for_seq(rig.sched, s))] = true;
  for (int r = 0; r < 2; r++)
    for (uint32_t slot = 0; slot < rig.layout.slots; slot++)
      if (!used[slot]) {
        INFO("rank " << r << " slot " << slot);
        CHECK(rig.slab[r][rig.layout.in_vec(slot)] == 0xEE);
        CHECK(rig.slab[r][rig.layout.in_vec(slot) + rig.layout.vec_bytes - 1] == 0xEE);
      }
  // The window is armed once (one header each way), then gates are pure RDMA.
  CHECK(rig.tcp_bytes(0) == kBarrier);
  CHECK(rig.tcp_bytes(1) == kBarrier);
  CHECK(rig.fabric.lost(0) == 0);
  CHECK(rig.fabric.lost(1) == 0);
  CHECK(rig.fabric.delivered(0) == 1 + gates);
}

TEST_CASE("a vector larger than the message size travels as several messages") {
  RigConfig c;
  c.n_embd = 1000;  // 4000-byte vectors
  c.tun.max_msg = 1024;
  Rig rig(c);
  REQUIRE_ATTACHED(rig);
  const uint64_t gates = 24;
  auto rc = rig.run([&](int r) {
    for (uint64_t s = 1; s <= gates; s++)
      if (int e = rig.row(r, s)) return e;
    if (int e = rig.batch(r, 0, 3, 1)) return e;
    if (int e = rig.big(r, 2, 10000)) return e;
    for (uint64_t s = gates + 1; s <= gates + 4; s++)
      if (int e = rig.row(r, s)) return e;
    return 0;
  });
  CHECK_BOTH_OK(rc, rig);
  // 4 messages per vector (3 x 1024 + 928): rows, 3 batch rows, then the
  // big gate's 10 messages, and the drains' zero-length messages.
  const uint64_t window_drain = (c.tun.row_window - 1) * 4;
  const uint64_t batch_pred_drain = 3 * 4;  // the predicted next batch gate
  CHECK(rig.fabric.delivered(0) ==
        1 + (gates + 4) * 4 + window_drain + 3 * 4 + batch_pred_drain + 10);
  CHECK(rig.fabric.lost(0) == 0);
  CHECK(rig.fabric.lost(1) == 0);
}

TEST_CASE("consecutive gates that share a slot: rows are staged, never overwritten early") {
  RigConfig c;
  SECTION("one gate per token") {
    c.sched.start = 5;
    c.sched.step = 0;
    c.sched.per_token = 1;
  }
  SECTION("step 0: every gate of the token on one slot") {
    c.sched.start = 2;
    c.sched.step = 0;
    c.sched.per_token = 3;
  }
  Rig rig(c);
  REQUIRE_ATTACHED(rig);
  auto rc = rig.run([&](int r) {
    for (uint64_t s = 1; s <= 30; s++)
      if (int e = rig.row(r, s)) return e;
    return 0;
  });
  CHECK_BOTH_OK(rc, rig);
}

TEST_CASE("the fake behaves like UC: no posted receive, or a short one, loses the message") {
  fk::Fabric fabric;
  std::vector<uint8_t> mem[2] = {std::vector<uint8_t>(4096), std::vector<uint8_t>(4096)};
  std::unique_ptr<rdma::Device> dev[2] = {fabric.device(0), fabric.device(1)};
  std::unique_ptr<rdma::QueuePair> qp[2];
  Error err;
  for (int r = 0; r < 2; r++) {
    uint32_t rkey;
    REQUIRE(dev[r]->register_memory(mem[r].data(), mem[r].size(), rkey, err) == 0);
    REQUIRE(dev[r]->create_qp(rdma::QpRequest{}, qp[r], err) == 0);
  }
  REQUIRE(qp[0]->connect(qp[1]->local_info(), err) == 0);
  REQUIRE(qp[1]->connect(qp[0]->local_info(), err) == 0);
  rdma::Completion wc[4];
  auto send = [&](uint64_t id, uint32_t n) {
    rdma::SendWork s{(1ull << 63) | id, mem[0].data(), n, 7};
    REQUIRE(qp[0]->post_send(&s, 1, err) == 0);
    REQUIRE(qp[0]->poll(wc, 4, err) == 1);  // the sender always sees success
    CHECK(wc[0].status == 0);
  };
  send(0, 16);
  CHECK(fabric.lost(0) == 1);
  CHECK(qp[1]->poll(wc, 4, err) == 0);
  rdma::RecvWork rw{5, mem[1].data(), 8};
  REQUIRE(qp[1]->post_recv(&rw, 1, err) == 0);
  send(1, 16);  // larger than the receive: lost, the receive stays posted
  CHECK(fabric.lost(0) == 2);
  CHECK(fabric.posted_receives(1) == 1);
  CHECK(qp[1]->poll(wc, 4, err) == 0);
  send(2, 8);
  CHECK(fabric.delivered(0) == 1);
  REQUIRE(qp[1]->poll(wc, 4, err) == 1);
  CHECK(wc[0].wr_id == 5);
  CHECK(wc[0].bytes == 8);
  CHECK(wc[0].imm == 7);
  // Work requests outside registered memory are refused.
  rdma::RecvWork bad{6, mem[1].data() + 4090, 16};
  CHECK(qp[1]->post_recv(&bad, 1, err) == DS4TP_EIO);
}

TEST_CASE("a message lost on the connection is named, never placed in the wrong slot") {
  RigConfig c;
  c.gate_timeout_ms = 400;
  Rig rig(c);
  REQUIRE_ATTACHED(rig);
  auto rc = rig.run([&](int r) {
    for (uint64_t s = 1; s <= 6; s++)
      if (int e = rig.row(r, s)) return e;
    return 0;
  });
  CHECK_BOTH_OK(rc, rig);
  rig.fabric.drop_next(1, 1);  // rank 1's seq 7 vanishes, as UC allows
  rc = rig.run([&](int r) {
    for (uint64_t s = 7; s <= 12; s++)
      if (int e = rig.row(r, s)) return e;
    return 0;
  });
  // Rank 1's seq 8 lands where rank 0 waits for seq 7: the tag says so.
  CHECK(rc[0] == DS4TP_EDESYNC);
  CHECK_THAT(rig.err[0].message, Catch::Contains("expected the peer's row gate seq ...7") &&
                                     Catch::Contains("seq ...8") &&
                                     Catch::Contains("lost"));
  CHECK(rc[1] == DS4TP_ETIMEDOUT);
  CHECK_THAT(rig.err[1].message, Catch::Contains("seq 8") && Catch::Contains("400 ms"));
}

TEST_CASE("shape changes drain the receive window while rows, batches and big gates interleave") {
  RigConfig c;
  SECTION("completions on time") {}
  SECTION("completions late, waits past the spin window") { c.spin_us = 0; }
  Rig rig(c);
  REQUIRE_ATTACHED(rig);
  if (c.spin_us == 0) {
    rig.fabric.delay_completions(0, 3);
    rig.fabric.delay_completions(1, 5);
  }
  std::vector<uint8_t> bo[2], bi[2];
  auto rc = rig.run([&](int r) {
    uint64_t s = 0;
    for (int i = 0; i < 10; i++)
      if (int e = rig.row(r, ++s)) return e;
    // A verify block: gates 0..3 of 3 rows; then 4..5 of 8 rows.
    for (uint32_t g = 0; g < 4; g++)
      if (int e = rig.batch(r, g, 3, 100 + g)) return e;
    for (uint32_t g = 4; g < 6; g++)
      if (int e = rig.batch(r, g, 8, 200 + g)) return e;
    for (int i = 0; i < 10; i++)
      if (int e = rig.row(r, ++s)) return e;
    if (int e = rig.big(r, 1, 300000)) return e;
    if (int e = rig.batch(r, 7, 2, 300)) return e;
    if (int e = rig.batch(r, 7, 2, 301)) return e;  // same index: never predicted
    if (int e = rig.big(r, 2, 70000)) return e;
    for (int i = 0; i < 10; i++)
      if (int e = rig.row(r, ++s)) return e;
    return 0;
  });
  CHECK_BOTH_OK(rc, rig);
  CHECK(rig.fabric.lost(0) == 0);
  CHECK(rig.fabric.lost(1) == 0);
  CHECK(rig.fabric.posted_receives(0) == (c.tun.row_window - 1));
}

TEST_CASE("consecutive batch gates of a verify block cross TCP once") {
  RigConfig c;
  Rig rig(c);
  REQUIRE_ATTACHED(rig);
  auto rc = rig.run([&](int r) {
    for (uint64_t s = 1; s <= 4; s++)
      if (int e = rig.row(r, s)) return e;
    for (uint32_t g = 0; g < 8; g++)
      if (int e = rig.batch(r, g, 4, 50 + g)) return e;
    for (uint64_t s = 5; s <= 8; s++)
      if (int e = rig.row(r, s)) return e;
    return 0;
  });
  CHECK_BOTH_OK(rc, rig);
  // Barriers: row window, first batch gate, row window again. The other
  // seven batch gates ran on receives posted by their predecessor.
  CHECK(rig.tcp_bytes(0) == 3 * kBarrier);
  CHECK(rig.tcp_bytes(1) == 3 * kBarrier);
  CHECK(rig.fabric.lost(0) == 0);
}

TEST_CASE("big gates: pipelined rounds through staging, and straight from slab memory") {
  RigConfig c;
  c.tun.max_msg = 256 << 10;
  c.tun.recv_depth = 64;  // rounds of min(64/4 x 256 KiB, 2 MiB) = 2 MiB
  Rig rig(c);
  REQUIRE_ATTACHED(rig);
  const uint64_t n = (9ull << 20) + 123;
  auto rc = rig.run([&](int r) {
    if (int e = rig.big(r, 1, n)) return e;
    if (int e = rig.big(r, 2, 0)) return e;
    // Inside the registered slab: no staging copies.
    uint64_t span = rig.layout.batch_in - rig.layout.batch_out;
    if (int e = rig.big(r, 3, span, rig.slab[r] + rig.layout.batch_out,
                        rig.slab[r] + rig.layout.batch_in))
      return e;
    return 0;
  });
  CHECK_BOTH_OK(rc, rig);
  // Staged: 5 rounds of up to 2 MiB = a header plus 4 credits each way;
  // the empty gate a header; the direct one a header (it fits one round).
  CHECK(rig.tcp_bytes(0) == (5 + 1 + 1) * kBarrier);
  CHECK(rig.fabric.lost(0) == 0);
  CHECK(rig.fabric.lost(1) == 0);
}

TEST_CASE("an error completion fails the gate with the work request's status in words") {
  RigConfig c;
  c.gate_timeout_ms = 400;
  Rig rig(c);
  REQUIRE_ATTACHED(rig);
  auto first = rig.run([&](int r) {
    for (uint64_t s = 1; s <= 3; s++)
      if (int e = rig.row(r, s)) return e;
    return 0;
  });
  CHECK_BOTH_OK(first, rig);
  SECTION("a send fails") {
    rig.fabric.fail_next_send(0, fk::kStatusRetryExcErr);
    auto rc = rig.run([&](int r) {
      for (uint64_t s = 4; s <= 8; s++)
        if (int e = rig.row(r, s)) return e;
      return 0;
    });
    CHECK(rc[0] == DS4TP_EIO);
    CHECK_THAT(rig.err[0].message, Catch::Contains("send work request failed") &&
                                       Catch::Contains("transport retry counter exceeded") &&
                                       Catch::Contains("status 12") &&
                                       Catch::Contains("seq 4"));
    CHECK(rc[1] == DS4TP_ETIMEDOUT);
  }
  SECTION("a receive fails") {
    rig.fabric.fail_next_recv(1, fk::kStatusLocLenErr);
    auto rc = rig.run([&](int r) {
      for (uint64_t s = 4; s <= 8; s++)
        if (int e = rig.row(r, s)) return e;
      return 0;
    });
    CHECK(rc[1] == DS4TP_EIO);
    CHECK_THAT(rig.err[1].message, Catch::Contains("receive work request failed") &&
                                       Catch::Contains("local length error") &&
                                       Catch::Contains("status 1"));
    CHECK(rc[0] != DS4TP_OK);
  }
}

TEST_CASE("a dead peer is noticed while polling, long before the gate timeout") {
  RigConfig c;
  c.gate_timeout_ms = 20000;  // a timeout would be ETIMEDOUT, not EPEERCLOSED
  Rig rig(c);
  REQUIRE_ATTACHED(rig);
  bool whole_process = false;
  SECTION("the peer process is gone") { whole_process = true; }
  SECTION("only the peer's control connection closed") {}
  auto rc = rig.run([&](int r) {
    for (uint64_t s = 1; s <= 5; s++)
      if (int e = rig.row(r, s)) return e;
    if (r == 1) {
      if (whole_process) {
        rig.kill_rank(1);
      } else {
        ::close(rig.ctl[1]);
        rig.ctl[1] = -1;
      }
      return 0;
    }
    return rig.row(0, 6);
  });
  CHECK(rc[1] == 0);
  CHECK(rc[0] == DS4TP_EPEERCLOSED);
  CHECK_THAT(rig.err[0].message, Catch::Contains("seq 6") && Catch::Contains("peer closed"));
  if (!whole_process) CHECK_THAT(rig.err[0].message, Catch::Contains("control connection"));
}

TEST_CASE("a stalled peer: the gate times out at its deadline, naming what is missing") {
  RigConfig c;
  c.gate_timeout_ms = 300;
  Rig rig(c);
  REQUIRE_ATTACHED(rig);
  SECTION("never reaches the first gate (header barrier)") {
    auto rc = rig.run([&](int r) { return r == 0 ? rig.row(0, 1) : 0; });
    CHECK(rc[0] == DS4TP_ETIMEDOUT);
    CHECK_THAT(rig.err[0].message, Catch::Contains("did not reach this gate within 300 ms"));
  }
  SECTION("stops inside the receive window") {
    auto rc = rig.run([&](int r) {
      for (uint64_t s = 1; s <= 5; s++)
        if (int e = rig.row(r, s)) return e;
      return r == 0 ? rig.row(0, 6) : 0;
    });
    CHECK(rc[0] == DS4TP_ETIMEDOUT);
    CHECK_THAT(rig.err[0].message, Catch::Contains("seq 6") &&
                                       Catch::Contains("nothing completed for 300 ms") &&
                                       Catch::Contains("1 receive(s)"));
  }
}

TEST_CASE("ranks at different gates: EDESYNC naming both sides") {
  RigConfig c;
  c.gate_timeout_ms = 1000;
  Rig rig(c);
  REQUIRE_ATTACHED(rig);
  auto rc = rig.run([&](int r) { return r == 0 ? rig.batch(0, 0, 2, 1) : rig.row(1, 1); });
  CHECK(rc[0] == DS4TP_EDESYNC);
  CHECK(rc[1] == DS4TP_EDESYNC);
  CHECK_THAT(rig.err[0].message, Catch::Contains("this rank is at batch gate") &&
                                     Catch::Contains("peer sent gate"));
}

TEST_CASE("warm-up: a dead UC direction is caught and both ranks recreate the queue pair") {
  RigConfig c;
  c.tun.warm_timeout_ns = 200000000;
  SECTION("recovers on the second queue pair") {
    Rig rig(c);
    rig.fabric.kill_direction(1);
    REQUIRE_ATTACHED(rig);
    CHECK(rig.fabric.qps_created(0) == 2);
    CHECK(rig.fabric.qps_created(1) == 2);
    auto rc = rig.run([&](int r) {
      for (uint64_t s = 1; s <= 8; s++)
        if (int e = rig.row(r, s)) return e;
      return 0;
    });
    CHECK_BOTH_OK(rc, rig);
  }
  SECTION("with one attempt the failure names the direction") {
    c.tun.setup_attempts = 1;
    Rig rig(c);
    rig.fabric.kill_direction(1);
    auto rc = rig.attach();
    CHECK(rc[0] == DS4TP_EIO);
    CHECK(rc[1] == DS4TP_EIO);
    CHECK_THAT(rig.err[0].message, Catch::Contains("peer -> this rank lost the message"));
    CHECK_THAT(rig.err[1].message, Catch::Contains("this rank -> peer lost the message"));
  }
}

TEST_CASE("a rank that offers RC and one that offers only UC agree on UC") {
  RigConfig c;
  c.ends[0].offer_rc = true;
  Rig rig(c);
  REQUIRE_ATTACHED(rig);
  CHECK(rig.fabric.qps_created(0) == 2);
  CHECK(rig.fabric.qps_created(1) == 2);
  auto rc = rig.run([&](int r) { return rig.row(r, 1); });
  CHECK_BOTH_OK(rc, rig);
}

TEST_CASE("queue depths too small for the window are refused at attach with the numbers") {
  RigConfig c;
  c.ends[0].max_recv_depth = 8;
  c.n_embd = 1000;
  c.tun.max_msg = 1024;
  Rig rig(c);
  auto rc = rig.attach();
  CHECK(rc[0] == DS4TP_EUNSUPPORTED);
  CHECK(rc[1] == DS4TP_EUNSUPPORTED);
  CHECK_THAT(rig.err[1].message, Catch::Contains("receive queue depth of 8") &&
                                     Catch::Contains("1024 byte message size"));
}

// The pair reads the clock once as a gate begins and hands the value in
// (start_ns); the gate's first wait counts from it. Handed a start two
// gate timeouts ago, rank 0's deadline has passed before its first wait,
// though rank 1 arrives well within a timeout of the call.
TEST_CASE("a row gate's deadline counts from the start_ns it is handed") {
  RigConfig c;
  c.gate_timeout_ms = 1500;
  Rig rig(c);
  REQUIRE_ATTACHED(rig);
  const uint64_t timeout_ns = uint64_t(c.gate_timeout_ms) * 1000000;
  auto rc = rig.run([&](int r) {
    if (r == 0)
      return test::row_gate(*rig.t[0], rig.slab[0], rig.layout, rig.data, 0, 0, 1,
                            now_ns() - 2 * timeout_ns, rig.err[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return rig.row(1, 1);
  });
  INFO("rank 0: " << rig.err[0].message);
  INFO("rank 1: " << rig.err[1].message);
  CHECK(rc[0] == DS4TP_ETIMEDOUT);
  CHECK(rc[1] != DS4TP_OK);  // rank 0 gave up before sending its partial
}
