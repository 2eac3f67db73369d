// GPU streams, pair side: CPU threads stand in for the engine's stream
// (stream_util.hpp) and drive ds4tp_gate_stream_start's words. Two real
// processes: in-order gates bit for bit, out-of-order ready rejected,
// poison on stop, mark_failed and a killed peer; no lost or doubled
// release.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <thread>
#include <tuple>

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include "support/stream_util.hpp"
#include "support/ranks.hpp"

using namespace ds4tp::test;

namespace {

float *vec(ds4tp_pair *tp, uint64_t region, uint32_t slot) {
  const ds4tp_slab_layout l = layout_of(tp);
  return reinterpret_cast<float *>(static_cast<uint8_t *>(ds4tp_slab_base(tp)) + region +
                                   slot * l.slot_stride);
}

int start_stream(ds4tp_pair *tp, CpuStream &st, uint32_t bits, int mode) {
  ds4tp_gate_service_options svc = test_service_options();
  ds4tp_stream_options o;
  ds4tp_stream_options_init(&o);
  o.word_bits = bits;
  o.mode = mode;
  CHILD_EXPECT_OK(ds4tp_gate_stream_start(tp, &svc, &o, &st.w), tp, "stream start");
  const long page = sysconf(_SC_PAGESIZE);
  CHILD_EXPECT(st.w.word_bits == bits && st.w.mode == mode && st.w.stride == 64, tp);
  CHILD_EXPECT(reinterpret_cast<uintptr_t>(st.w.base) % uintptr_t(page) == 0, tp,
               "base %p is not page-aligned", st.w.base);
  CHILD_EXPECT(st.w.bytes % uint64_t(page) == 0 && st.w.slots == layout_of(tp).slots, tp);
  CHILD_EXPECT(st.w.poison_gap == uint64_t(1) << (bits - 2), tp);
  return 0;
}

// `tokens` tokens of every gate through the stream words, each peer
// partial checked bit for bit; `seq` is the last gate seq, updated.
int stream_tokens(ds4tp_pair *tp, const CpuStream &st, int tokens, uint64_t &seq) {
  const int rank = ds4tp_rank(tp);
  const ds4tp_slab_layout l = layout_of(tp);
  const uint64_t floats = l.vec_bytes / 4;
  int code = 0;
  auto stream = [&]() -> int {
    for (int t = 0; t < tokens; t++) {
      for (uint32_t slot = 0; slot < l.slots; slot++) {
        ++seq;
        const uint64_t v = st.value(slot, seq);
        float *out = vec(tp, l.out_offset, slot);
        for (uint64_t i = 0; i < floats; i++) out[i] = pattern(rank, seq, slot * 100000 + i);
        // Not released before its ready: no early or doubled release.
        CHILD_EXPECT(!st.geq(st.load(st.release(slot)), v) || st.w.mode == DS4TP_STREAM_FIXED, tp,
                     "slot %u already released %llu before the ready of seq %llu", slot,
                     (unsigned long long)st.load(st.release(slot)), (unsigned long long)seq);
        if (st.w.mode == DS4TP_STREAM_FIXED)
          CHILD_EXPECT(st.load(st.release(slot)) == 0, tp, "fixed slot %u release not cleared",
                       slot);
        st.write(slot, v);
        bool timed_out = false;
        st.wait(slot, v, timed_out);
        CHILD_EXPECT(!timed_out, tp, "no release at slot %u seq %llu", slot,
                     (unsigned long long)seq);
        CHILD_EXPECT(!st.poisoned(slot, v), tp, "poisoned at slot %u seq %llu", slot,
                     (unsigned long long)seq);
        const float *in = vec(tp, l.in_offset, slot);
        for (uint64_t i = 0; i < floats; i++) {
          float want = pattern(1 - rank, seq, slot * 100000 + i);
          CHILD_EXPECT(std::memcmp(&in[i], &want, 4) == 0, tp, "seq %llu float %llu",
                       (unsigned long long)seq, (unsigned long long)i);
        }
      }
    }
    return 0;
  };
  std::thread t([&] { code = stream(); });
  t.join();
  return code;
}

// Every release word is poisoned: a wait for the next value passes at
// once and the device-side check sees poison.
int expect_poisoned(ds4tp_pair *tp, const CpuStream &st, uint64_t seq) {
  for (uint32_t slot = 0; slot < st.w.slots; slot++) {
    const uint64_t next = st.value(slot, seq + 1 + slot);
    bool timed_out = false;
    st.wait(slot, next, timed_out, 5000);
    CHILD_EXPECT(!timed_out && st.poisoned(slot, next), tp, "slot %u release %llu not poison",
                 slot, (unsigned long long)st.load(st.release(slot)));
  }
  return 0;
}

}  // namespace

TEST_CASE("gate stream: in-order ready words run every gate bit for bit, and stop poisons") {
  auto [bits, mode] = GENERATE(std::make_tuple(64u, int(DS4TP_STREAM_SEQ)),
                               std::make_tuple(32u, int(DS4TP_STREAM_SEQ)),
                               std::make_tuple(64u, int(DS4TP_STREAM_FIXED)),
                               std::make_tuple(32u, int(DS4TP_STREAM_FIXED)));
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  CAPTURE(bits, mode, transport);
  auto body = [bits = bits, mode = mode](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    CpuStream st;
    if (int rc = start_stream(tp, st, bits, mode)) return rc;
    CHILD_EXPECT(ds4tp_gate_service_state(tp) == DS4TP_SERVICE_RUNNING, tp);
    CHILD_EXPECT_RC(ds4tp_gate_exchange(tp, 0, 0, 1), DS4TP_ESTATE, tp);
    uint64_t seq = 0;
    if (int rc = stream_tokens(tp, st, 3, seq)) return rc;
    CHILD_EXPECT(ds4tp_gate_seq(tp) == seq, tp, "gate seq %llu, stream seq %llu",
                 (unsigned long long)ds4tp_gate_seq(tp), (unsigned long long)seq);
    CHILD_EXPECT_OK(ds4tp_gate_service_stop(tp), tp, "stop");
    if (int rc = expect_poisoned(tp, st, seq)) return rc;
    CHILD_EXPECT(!ds4tp_failed(tp), tp);
    // Other bits on the kept block: accepted, words reset; stopped again.
    ds4tp_stream_options other;
    ds4tp_stream_options_init(&other);
    other.word_bits = bits == 64 ? 32 : 64;
    other.mode = mode;
    CpuStream again;
    CHILD_EXPECT_OK(ds4tp_gate_stream_start(tp, nullptr, &other, &again.w), tp, "other bits");
    CHILD_EXPECT(again.w.base == st.w.base && again.w.word_bits == other.word_bits, tp);
    CHILD_EXPECT(again.load(again.release(0)) == 0, tp);
    CHILD_EXPECT_OK(ds4tp_gate_service_stop(tp), tp, "stop other bits");
    // Restart re-arms the same words; the seq count continues.
    const void *base = st.w.base;
    if (int rc = start_stream(tp, again, bits, mode)) return rc;
    CHILD_EXPECT(again.w.base == base, tp);
    if (int rc = stream_tokens(tp, again, 1, seq)) return rc;
    CHILD_EXPECT_OK(ds4tp_gate_service_stop(tp), tp, "stop 2");
    CHILD_EXPECT(!ds4tp_failed(tp) && ds4tp_gate_seq(tp) == seq, tp);
    return final_barrier(tp);
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("gate stream: an out-of-order ready fails the pair with EDESYNC naming slot and seq") {
  RankSetup s;
  // The leader writes ready (slot, value) against a schedule that wants
  // seq 1 at slot 0; the worker stays until the leader has checked.
  auto run = [&](uint32_t slot, uint64_t value, const char *a, const char *b) {
    Hold attached, checked;
    auto leader = [&](ds4tp_pair *tp, Ctx &) -> int {
      struct Sig {
        const Hold &h;
        ~Sig() { h.done(); }
      } sig{checked};
      if (int rc = connect_attach(tp)) return rc;
      CHILD_EXPECT(attached.wait(15000), tp);
      CpuStream st;
      if (int rc = start_stream(tp, st, 64, DS4TP_STREAM_SEQ)) return rc;
      st.write(slot, value);
      bool timed_out = false;
      st.wait(slot, value, timed_out, 5000);
      CHILD_EXPECT(!timed_out && st.poisoned(slot, value), tp, "slot %u not poisoned", slot);
      CHILD_EXPECT(ds4tp_failed(tp) == 1, tp);
      std::string m = ds4tp_errmsg(tp);
      CHILD_EXPECT(m.find("out-of-order ready") != std::string::npos && m.find(a) != std::string::npos &&
                       m.find(b) != std::string::npos,
                   tp, "wanted \"%s\" and \"%s\"", a, b);
      CHILD_EXPECT(ds4tp_gate_seq(tp) == 0, tp);  // nothing exchanged
      return 0;
    };
    auto worker = [&](ds4tp_pair *tp, Ctx &) -> int {
      int rc = connect_attach(tp);
      attached.done();
      checked.wait(15000);
      return rc;
    };
    Outcome o = run_pair(s, leader, worker);
    REQUIRE_RANKS_OK(o);
  };
  SECTION("ready at a slot the schedule does not expect") {
    run(3, 1, "slot 3 (layer 1, gate 1)", "seq 1 at slot 0");
  }
  SECTION("ready at the right slot for a seq that is not next") {
    run(0, 9, "slot 0 (layer 0, gate 0) holds 9", "next gate is seq 1");
  }
}

TEST_CASE("gate stream: ds4tp_mark_failed poisons a waiting stream") {
  RankSetup s;
  Hold leader_checked, worker_streamed;
  auto leader = [&](ds4tp_pair *tp, Ctx &) -> int {
    struct Sig {
      const Hold &h;
      ~Sig() { h.done(); }
    } sig{leader_checked};
    if (int rc = connect_attach(tp)) return rc;
    CpuStream st;
    if (int rc = start_stream(tp, st, 64, DS4TP_STREAM_SEQ)) return rc;
    uint64_t seq = 0;
    if (int rc = stream_tokens(tp, st, 1, seq)) return rc;
    // Our last release says the worker's partial came, not that ours
    // reached its stream: failing now could end its last gate too.
    CHILD_EXPECT(worker_streamed.wait(15000), tp, "the worker did not finish its token");
    // The engine's watchdog fails the pair from another thread; the
    // stream then heads for its next gate and must not wait forever.
    std::thread engine([tp] { ds4tp_mark_failed(tp, "GPU fault at layer 3"); });
    engine.join();
    const uint32_t slot = 0;
    const uint64_t v = st.value(slot, seq + 1);
    st.write(slot, v);
    bool timed_out = false;
    st.wait(slot, v, timed_out, 10000);
    CHILD_EXPECT(!timed_out && st.poisoned(slot, v), tp, "release %llu",
                 (unsigned long long)st.load(st.release(slot)));
    if (int rc = expect_poisoned(tp, st, seq + 1)) return rc;
    CHILD_EXPECT(std::string(ds4tp_errmsg(tp)).find("GPU fault at layer 3") != std::string::npos,
                 tp);
    return 0;
  };
  auto worker = [&](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    CpuStream st;
    if (int rc = start_stream(tp, st, 64, DS4TP_STREAM_SEQ)) return rc;
    uint64_t seq = 0;
    if (int rc = stream_tokens(tp, st, 1, seq)) return rc;
    worker_streamed.done();
    leader_checked.wait(15000);
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("gate stream: a killed peer poisons the waiting stream within the deadline") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  s.gate_timeout_ms = 1500;
  auto worker = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    CpuStream st;
    if (int rc = start_stream(tp, st, 32, DS4TP_STREAM_SEQ)) return rc;
    uint64_t seq = 0;
    if (int rc = stream_tokens(tp, st, 1, seq)) return rc;
    pause();  // the leader kills us here
    return 0;
  };
  auto leader = [](ds4tp_pair *tp, Ctx &c) -> int {
    if (int rc = connect_attach(tp)) return rc;
    CpuStream st;
    if (int rc = start_stream(tp, st, 32, DS4TP_STREAM_SEQ)) return rc;
    uint64_t seq = 0;
    if (int rc = stream_tokens(tp, st, 1, seq)) return rc;
    kill(c.worker_pid, SIGKILL);
    const uint64_t v = st.value(0, seq + 1);
    st.write(0, v);
    auto t0 = Clock::now();
    bool timed_out = false;
    st.wait(0, v, timed_out, 10000);
    const double took = ms_since(t0);
    CHILD_EXPECT(!timed_out && st.poisoned(0, v), tp);
    CHILD_EXPECT(took <= 1500 + 3000, tp, "took %.0f ms", took);
    auto deadline = Clock::now() + std::chrono::seconds(5);
    while (ds4tp_gate_service_state(tp) != DS4TP_SERVICE_FAILED && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHILD_EXPECT(ds4tp_gate_service_state(tp) == DS4TP_SERVICE_FAILED, tp);
    if (int rc = expect_poisoned(tp, st, seq + 1)) return rc;
    CHILD_EXPECT(ds4tp_failed(tp) && !std::string(ds4tp_errmsg(tp)).empty(), tp);
    CHILD_EXPECT_OK(ds4tp_gate_service_stop(tp), tp);
    CpuStream again;
    ds4tp_stream_options so;
    ds4tp_stream_options_init(&so);
    so.word_bits = 32;
    CHILD_EXPECT_RC(ds4tp_gate_stream_start(tp, nullptr, &so, &again.w), DS4TP_EFAILED, tp);
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  INFO(o.describe());
  REQUIRE(o.leader == 0);
  REQUIRE(o.worker_signal == SIGKILL);
}

TEST_CASE("gate stream: bad arguments are refused with EINVAL") {
  RankSetup s;
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    CpuStream st;
    // No slab yet.
    CHILD_EXPECT_RC(ds4tp_gate_stream_start(tp, nullptr, nullptr, &st.w), DS4TP_ESTATE, tp);
    if (int rc = connect_attach(tp)) return rc;
    CHILD_EXPECT_RC(ds4tp_gate_stream_start(tp, nullptr, nullptr, nullptr), DS4TP_EINVAL, tp);
    ds4tp_stream_words small{};
    small.size = 8;
    CHILD_EXPECT_RC(ds4tp_gate_stream_start(tp, nullptr, nullptr, &small), DS4TP_EINVAL, tp);
    ds4tp_stream_options o;
    ds4tp_stream_options_init(&o);
    o.word_bits = 16;
    CHILD_EXPECT_RC(ds4tp_gate_stream_start(tp, nullptr, &o, &st.w), DS4TP_EINVAL, tp);
    CHILD_EXPECT(std::string(ds4tp_errmsg(tp)).find("word_bits is 16") != std::string::npos, tp);
    ds4tp_stream_options_init(&o);
    o.mode = 7;
    CHILD_EXPECT_RC(ds4tp_gate_stream_start(tp, nullptr, &o, &st.w), DS4TP_EINVAL, tp);
    CHILD_EXPECT(ds4tp_gate_service_state(tp) == DS4TP_SERVICE_STOPPED && !ds4tp_failed(tp), tp);
    return final_barrier(tp);
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}
