// Hot path proof: once a pair is connected and its slab attached, row
// gates, batch gates and big gates allocate nothing, on either rank; nor
// do eval frames (EVAL with its logits reply, MTP with its ack) on the
// control connection.
// Allocations are counted by tests/alloc_count.cpp (malloc replaced, or
// the sanitizer's hook), so this covers everything a call does on the
// calling thread: the library, libstdc++, fmt and libuv alike.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "support/alloc_count.hpp"
#include "support/ranks.hpp"

using namespace ds4tp::test;

namespace {

struct Counts {
  uint64_t row = 0, batch = 0, big = 0;  // allocations on the gate thread
  uint64_t others = 0;                   // on other threads meanwhile (not asserted)
  int gates = 0, batches = 0, bigs = 0;  // exchanges that ran
};

constexpr int kTokens = 40;
constexpr uint64_t kBigBytes = 1 << 20;

// Runs the three kinds of gate on a connected pair and counts what each
// allocates. Returns 0, or a nonzero code naming the failed call.
// When set, each rank records a trace (lib/stats) during the gates: the
// ring is preallocated, so recording must not allocate either.
std::string g_trace_dir;

int run_gates(ds4tp_pair *tp, Counts &c) {
  int rc = connect_attach(tp);
  if (rc) return rc;
  const int rank = ds4tp_rank(tp);
  if (!g_trace_dir.empty()) {
    std::string path = g_trace_dir + "/rank" + std::to_string(rank) + ".json";
    CHILD_EXPECT_OK(ds4tp_trace_start(tp, path.c_str()), tp);
  }
  auto *slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
  ds4tp_slab_layout l{};
  l.size = sizeof l;
  ds4tp_slab_layout_get(tp, &l);
  const uint32_t n_layer = l.slots / 2;
  std::vector<uint8_t> big_out(kBigBytes, uint8_t(rank + 1)), big_in(kBigBytes, 0);
  // Set-up ends here: from now on nothing may allocate.

  const uint64_t all0 = alloc::all_threads();
  uint64_t t = alloc::this_thread();
  uint64_t seq = 0;
  for (int tok = 0; tok < kTokens; tok++)
    for (uint32_t layer = 0; layer < n_layer; layer++)
      for (uint32_t gate = 0; gate < 2; gate++) {
        seq++;
        uint8_t *out = slab + ds4tp_slab_out_offset(tp, layer, gate);
        std::memcpy(out, &seq, sizeof seq);
        out[8] = uint8_t(rank);
        rc = ds4tp_gate_exchange(tp, layer, gate, seq);
        CHILD_EXPECT_OK(rc, tp, "gate");
        const uint8_t *in = slab + ds4tp_slab_in_offset(tp, layer, gate);
        CHILD_EXPECT(std::memcmp(in, &seq, sizeof seq) == 0 && in[8] == uint8_t(1 - rank), tp);
        c.gates++;
      }
  c.row = alloc::this_thread() - t;

  t = alloc::this_thread();
  for (uint64_t b = 1; b <= 2 * DS4TP_BATCH_MAX_ROWS; b++) {
    uint32_t rows = uint32_t((b - 1) % DS4TP_BATCH_MAX_ROWS) + 1;
    uint32_t index = uint32_t(b % l.batch_gates);
    uint8_t *out = slab + ds4tp_slab_batch_out_offset(tp, index);
    uint8_t *last = out + (rows - 1) * l.vec_stride;
    std::memcpy(last, &b, sizeof b);
    rc = ds4tp_batch_gate_exchange(tp, index, rows, b);
    CHILD_EXPECT_OK(rc, tp, "batch");
    const uint8_t *in = slab + ds4tp_slab_batch_in_offset(tp, index) + (rows - 1) * l.vec_stride;
    CHILD_EXPECT(std::memcmp(in, &b, sizeof b) == 0, tp);
    c.batches++;
  }
  c.batch = alloc::this_thread() - t;

  t = alloc::this_thread();
  for (uint64_t b = 1; b <= 4; b++) {
    std::memcpy(big_out.data() + kBigBytes - 8, &b, sizeof b);
    CHILD_EXPECT_OK(ds4tp_big_gate_exchange(tp, 0, b, big_out.data(), big_in.data(), kBigBytes),
                    tp);
    CHILD_EXPECT(big_in[0] == uint8_t(2 - rank) &&
                     std::memcmp(big_in.data() + kBigBytes - 8, &b, sizeof b) == 0,
                 tp);
    c.bigs++;
  }
  c.big = alloc::this_thread() - t;
  c.others = alloc::all_threads() - all0 - c.row - c.batch - c.big;
  return 0;
}

}  // namespace

TEST_CASE("the allocation counter sees malloc and operator new", "[hotpath]") {
  uint64_t before = alloc::this_thread();
  void *volatile p = std::malloc(48);
  std::free(p);
  void *q = ::operator new(64);  // a direct call: never elided
  ::operator delete(q);
  std::vector<int> *v = new std::vector<int>(100);
  delete v;
  CHECK(alloc::this_thread() - before >= 3);
  CHECK(alloc::all_threads() >= alloc::this_thread());
}

TEST_CASE("gates allocate nothing after set-up", "[hotpath]") {
  int transport = GENERATE(from_range(local_transports()));
  // Stats are always on; tracing is the second pass.
  const bool trace = GENERATE(false, true);
  char dir[] = "/tmp/ds4tp-alloc-XXXXXX";
  g_trace_dir = trace && mkdtemp(dir) != nullptr ? dir : "";
  CAPTURE(trace);
  CAPTURE(ds4tp_transport_name(transport));
  RankSetup s;
  s.transport = transport;
  Counts lead;
  Outcome o = run_pair(
      s, [&](ds4tp_pair *tp, Ctx &) { return run_gates(tp, lead); },
      [](ds4tp_pair *tp, Ctx &) {
        Counts w;
        int rc = run_gates(tp, w);
        if (rc) return rc;
        CHILD_EXPECT(!w.row && !w.batch && !w.big, tp,
                     "allocations after set-up: %llu in %d row gates, %llu in %d batch gates, "
                     "%llu in %d big gates",
                     (unsigned long long)w.row, w.gates, (unsigned long long)w.batch, w.batches,
                     (unsigned long long)w.big, w.bigs);
        return 0;
      });
  INFO(o.describe());
  REQUIRE(o.leader == 0);
  CHECK(o.worker_exit == 0);
  INFO("allocations on other threads during the gates: " << lead.others);
  CHECK(lead.gates == kTokens * 8);  // small_identity: 4 layers x 2 gates
  CHECK(lead.batches == 2 * DS4TP_BATCH_MAX_ROWS);
  CHECK(lead.bigs == 4);
  CHECK(lead.row == 0);
  CHECK(lead.batch == 0);
  CHECK(lead.big == 0);
  if (!g_trace_dir.empty()) {  // both ranks wrote their trace at ds4tp_free
    std::string check = "/usr/bin/python3 -c 'import json,sys; [json.load(open(p)) for p in sys.argv[1:]]' " +
                        g_trace_dir + "/rank0.json " + g_trace_dir + "/rank1.json";
    CHECK(std::system(check.c_str()) == 0);
    std::string rm = "rm -rf " + g_trace_dir;
    CHECK(std::system(rm.c_str()) == 0);
    g_trace_dir.clear();
  }
}

namespace {

constexpr int kEvals = 200;

// Leader: EVAL + one logits half, then MTP + COMMAND_ACK, kEvals times
// each, then STOP. Counts what the round trips allocate on this thread.
int lead_evals(ds4tp_pair *tp, uint64_t &allocs, int &rounds) {
  int rc = ds4tp_connect(tp);
  CHILD_EXPECT_OK(rc, tp, "connect");
  float half[4] = {};
  uint64_t t = alloc::this_thread();
  for (uint64_t seq = 1; seq <= 2 * kEvals; seq++) {
    if (seq % 2) {
      rc = ds4tp_send_eval(tp, 7, seq, int32_t(seq), 4);
      CHILD_EXPECT_OK(rc, tp, "send_eval");
      rc = ds4tp_recv_logits(tp, half, 4);
      CHILD_EXPECT_OK(rc, tp, "recv_logits");
      CHILD_EXPECT(half[3] == float(seq), tp);
    } else {
      rc = ds4tp_send_mtp(tp, 7, seq, int32_t(seq), 2);
      CHILD_EXPECT_OK(rc, tp, "send_mtp");
      int32_t status = -1;
      rc = ds4tp_wait_ack(tp, 7, &status);
      CHILD_EXPECT_OK(rc, tp, "wait_ack");
      CHILD_EXPECT(status == DS4TP_ACK_DONE, tp);
    }
    rounds++;
  }
  allocs = alloc::this_thread() - t;
  rc = ds4tp_send_stop(tp);
  CHILD_EXPECT_OK(rc, tp, "send_stop");
  return 0;
}

// Worker: takes each command and answers it; STOP ends the loop. Returns
// 81 when anything allocated between the first command and STOP.
int serve_evals(ds4tp_pair *tp) {
  int rc = ds4tp_connect(tp);
  CHILD_EXPECT_OK(rc, tp, "connect");
  ds4tp_command cmd;
  ds4tp_command_init(&cmd);
  float half[4] = {};
  uint64_t t = alloc::this_thread();
  int served = 0;
  for (;;) {
    rc = ds4tp_recv_command(tp, &cmd, 5000);
    CHILD_EXPECT_OK(rc, tp, "recv_command");
    if (cmd.kind == DS4TP_CMD_STOP) break;
    if (cmd.kind == DS4TP_CMD_EVAL) {
      half[3] = float(cmd.seq);
      rc = ds4tp_send_logits(tp, half, cmd.logits_floats);
      CHILD_EXPECT_OK(rc, tp, "send_logits");
    } else if (cmd.kind == DS4TP_CMD_MTP) {
      rc = ds4tp_send_ack(tp, DS4TP_ACK_DONE);
      CHILD_EXPECT_OK(rc, tp, "send_ack");
    } else {
      CHILD_EXPECT(false, tp, "unexpected command kind %d", int(cmd.kind));
    }
    served++;
  }
  uint64_t n = alloc::this_thread() - t;
  ds4tp_command_free(&cmd);
  CHILD_EXPECT(served == 2 * kEvals, tp);
  CHILD_EXPECT(n == 0, tp, "%llu allocations while serving %d EVAL/MTP commands",
               (unsigned long long)n, served);
  return 0;
}

}  // namespace

TEST_CASE("eval frames allocate nothing after set-up", "[hotpath]") {
  RankSetup s;  // control frames use the control connection whatever the transport
  uint64_t allocs = 0;
  int rounds = 0;
  Outcome o = run_pair(
      s, [&](ds4tp_pair *tp, Ctx &) { return lead_evals(tp, allocs, rounds); },
      [](ds4tp_pair *tp, Ctx &) { return serve_evals(tp); });
  INFO(o.describe());
  REQUIRE(o.leader == 0);
  CHECK(o.worker_exit == 0);
  CHECK(rounds == 2 * kEvals);
  CHECK(allocs == 0);
}
