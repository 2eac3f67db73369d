// GPU streams, group side: one CPU thread per rank stands in for that
// rank's stream (stream_util.hpp) on ds4tp_group_stream_start's words and
// vectors, over ds4tp_group_new_local. In-order slots all-reduce bit for
// bit; out-of-order ready, mark_failed, a departed rank and stop poison.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ds4tp/ds4tp.hpp"
#include "support/group_util.hpp"
#include "support/stream_util.hpp"
#include "support/ranks.hpp"

using namespace ds4tp::test;

namespace {

constexpr uint64_t kCount = 4096;  // 16 KiB of f32 per slot, one gate's vector

struct Local {
  std::vector<ds4tp_group *> gs;
  explicit Local(int n) : gs(size_t(n), nullptr) {
    ds4tp_group_options o;
    ds4tp_group_options_init(&o);
    o.op_timeout_ms = 3000;
    REQUIRE(ds4tp_group_new_local(gs.data(), n, &o, nullptr) == DS4TP_OK);
  }
  ~Local() {
    for (auto *g : gs) ds4tp_group_free(g);
  }
};

// What a failed rank check says: the condition and the library's message.
struct Why {
  std::string text;
  int fail(ds4tp_group *g, const std::string &cond) {
    text = cond + " | library: \"" + ds4tp_group_errmsg(g) + "\"";
    return 1;
  }
};
#define RANK_EXPECT(cond, g, why) \
  do {                            \
    if (!(cond)) return (why).fail((g), #cond); \
  } while (0)

int start(ds4tp_group *g, CpuStream &st, uint32_t bits, int mode, uint32_t slots, Why &why) {
  ds4tp_gate_service_options svc = test_service_options();
  ds4tp_stream_options o;
  ds4tp_stream_options_init(&o);
  o.word_bits = bits;
  o.mode = mode;
  o.slots = slots;
  o.count = kCount;
  o.dtype = DS4TP_DTYPE_F32;
  RANK_EXPECT(ds4tp_group_stream_start(g, &svc, &o, &st.w) == DS4TP_OK, g, why);
  RANK_EXPECT(st.w.slots == slots && st.w.slot_bytes == kCount * 4 && st.w.data != nullptr, g,
              why);
  RANK_EXPECT(reinterpret_cast<uintptr_t>(st.w.data) % 4096 == 0, g, why);
  return 0;
}

// seqs first+1 .. first+n through the words, every result checked against
// the rank-order reference bit for bit.
int run_seqs(ds4tp_group *g, const CpuStream &st, int size, uint64_t first, uint64_t n, Why &why) {
  const int rank = ds4tp_group_rank(g);
  std::vector<float> want(kCount);
  for (uint64_t seq = first + 1; seq <= first + n; seq++) {
    const auto slot = uint32_t((seq - 1) % st.w.slots);
    const uint64_t v = st.value(slot, seq);
    auto *vecp = static_cast<uint8_t *>(st.w.data) + slot * st.w.slot_bytes;
    RANK_EXPECT(!st.geq(st.load(st.release(slot)), v) || st.w.mode == DS4TP_STREAM_FIXED, g,
                why);  // not released before its ready
    group_fill(DS4TP_DTYPE_F32, rank, kCount, seq, vecp);
    st.write(slot, v);
    bool timed_out = false;
    st.wait(slot, v, timed_out);
    RANK_EXPECT(!timed_out, g, why);
    RANK_EXPECT(!st.poisoned(slot, v), g, why);
    group_reference(DS4TP_DTYPE_F32, size, kCount, seq, want.data());
    if (std::memcmp(vecp, want.data(), kCount * 4) != 0)
      return why.fail(g, "all-reduce result at seq " + std::to_string(seq) + " differs");
  }
  return 0;
}

// Every release word poisoned: the next waits pass at once, the check fails.
int all_poisoned(ds4tp_group *g, const CpuStream &st, uint64_t seq, Why &why) {
  for (uint32_t s = 0; s < st.w.slots; s++) {
    const uint64_t next = st.value(s, seq + 1 + s);
    bool timed_out = false;
    st.wait(s, next, timed_out, 5000);
    if (timed_out || !st.poisoned(s, next))
      return why.fail(g, "slot " + std::to_string(s) + " not poisoned");
  }
  return 0;
}

template <class F>
void per_rank(Local &l, F f) {
  const int n = int(l.gs.size());
  std::vector<int> rcs(size_t(n), -1);
  std::vector<Why> whys(static_cast<size_t>(n));
  std::vector<std::thread> ts;
  for (int r = 0; r < n; r++)
    ts.emplace_back([&, r] { rcs[size_t(r)] = f(l.gs[size_t(r)], r, whys[size_t(r)]); });
  for (auto &t : ts) t.join();
  for (int r = 0; r < n; r++) {
    INFO("rank " << r << ": " << whys[size_t(r)].text);
    CHECK(rcs[size_t(r)] == 0);
  }
}

}  // namespace

TEST_CASE("group stream: in-order slots all-reduce bit for bit, and stop poisons", "[group]") {
  const int n = GENERATE(2, 3);
  auto [bits, mode] = GENERATE(std::make_tuple(64u, int(DS4TP_STREAM_SEQ)),
                               std::make_tuple(32u, int(DS4TP_STREAM_SEQ)),
                               std::make_tuple(64u, int(DS4TP_STREAM_FIXED)),
                               std::make_tuple(32u, int(DS4TP_STREAM_FIXED)));
  CAPTURE(n, bits, mode);
  Local l(n);
  per_rank(l, [&, bits = bits, mode = mode](ds4tp_group *g, int, Why &why) -> int {
    CpuStream st;
    if (int rc = start(g, st, bits, mode, 4, why)) return rc;
    float x = 0;
    RANK_EXPECT(ds4tp_group_all_reduce(g, &x, 1, DS4TP_DTYPE_F32, DS4TP_OP_SUM) == DS4TP_ESTATE,
                g, why);
    if (int rc = run_seqs(g, st, n, 0, 3 * 4, why)) return rc;
    RANK_EXPECT(ds4tp_group_stream_seq(g) == 12, g, why);
    RANK_EXPECT(ds4tp_group_stream_stop(g) == DS4TP_OK, g, why);
    RANK_EXPECT(ds4tp_group_stream_state(g) == DS4TP_SERVICE_STOPPED, g, why);
    if (int rc = all_poisoned(g, st, 12, why)) return rc;
    RANK_EXPECT(ds4tp_group_failed(g) == 0, g, why);
    // Direct collectives again, then a restart on the same words.
    RANK_EXPECT(ds4tp_group_barrier(g) == DS4TP_OK, g, why);
    CpuStream again;
    if (int rc = start(g, again, bits, mode, 4, why)) return rc;
    RANK_EXPECT(again.w.base == st.w.base, g, why);
    if (int rc = run_seqs(g, again, n, 12, 5, why)) return rc;
    RANK_EXPECT(ds4tp_group_stream_stop(g) == DS4TP_OK && ds4tp_group_stream_seq(g) == 17, g, why);
    return 0;
  });
}

TEST_CASE("group stream: an out-of-order ready fails the group with EDESYNC", "[group]") {
  Local l(2);
  per_rank(l, [&](ds4tp_group *g, int rank, Why &why) -> int {
    CpuStream st;
    if (int rc = start(g, st, 64, DS4TP_STREAM_SEQ, 4, why)) return rc;
    // Rank 0 readies slot 2 first (seq 1 belongs to slot 0); rank 1 is in order.
    const uint32_t slot = rank == 0 ? 2 : 0;
    st.write(slot, 1);
    bool timed_out = false;
    st.wait(slot, 1, timed_out, 10000);
    RANK_EXPECT(!timed_out && st.poisoned(slot, 1), g, why);
    if (int rc = all_poisoned(g, st, 1, why)) return rc;
    RANK_EXPECT(ds4tp_group_stream_state(g) == DS4TP_SERVICE_FAILED, g, why);
    RANK_EXPECT(ds4tp_group_failed(g) != 0, g, why);
    if (rank == 0) {
      const std::string m = ds4tp_group_errmsg(g);
      RANK_EXPECT(ds4tp_group_failed(g) == DS4TP_EDESYNC, g, why);
      RANK_EXPECT(m.find("out-of-order ready: slot 2 (layer 1, gate 0) holds 1") !=
                      std::string::npos && m.find("seq 1 at slot 0") != std::string::npos,
                  g, why);
    }
    RANK_EXPECT(ds4tp_group_stream_stop(g) == DS4TP_OK, g, why);
    CpuStream again;
    RANK_EXPECT(ds4tp_group_stream_start(g, nullptr, nullptr, &again.w) == DS4TP_EFAILED, g, why);
    return 0;
  });
}

TEST_CASE("group stream: mark_failed on one rank poisons every rank's stream", "[group]") {
  Local l(2);
  per_rank(l, [&](ds4tp_group *g, int rank, Why &why) -> int {
    CpuStream st;
    if (int rc = start(g, st, 32, DS4TP_STREAM_SEQ, 2, why)) return rc;
    if (int rc = run_seqs(g, st, 2, 0, 2, why)) return rc;
    if (rank == 1) ds4tp_group_mark_failed(g);
    // Both streams head for seq 3: rank 1's service sees its own failure,
    // rank 0's all-reduce sees the abort.
    st.write(0, 3);
    bool timed_out = false;
    st.wait(0, 3, timed_out, 10000);
    RANK_EXPECT(!timed_out && st.poisoned(0, 3), g, why);
    if (int rc = all_poisoned(g, st, 3, why)) return rc;
    RANK_EXPECT(ds4tp_group_failed(g) != 0, g, why);
    if (rank == 1)
      RANK_EXPECT(std::string(ds4tp_group_errmsg(g)).find("ds4tp_group_mark_failed") !=
                      std::string::npos,
                  g, why);
    RANK_EXPECT(ds4tp_group_stream_stop(g) == DS4TP_OK, g, why);
    return 0;
  });
}

TEST_CASE("group stream: a rank that leaves poisons the others' streams", "[group]") {
  Local l(3);
  per_rank(l, [&](ds4tp_group *g, int rank, Why &why) -> int {
    CpuStream st;
    if (int rc = start(g, st, 64, DS4TP_STREAM_FIXED, 2, why)) return rc;
    if (int rc = run_seqs(g, st, 3, 0, 4, why)) return rc;
    if (rank == 2) {
      // Gone mid-run, as a dying process: its handle is freed (the stream
      // service with it) while the others wait at their next slot.
      ds4tp_group_free(g);
      l.gs[2] = nullptr;
      return 0;
    }
    const uint64_t v = st.value(0, 5);
    st.write(0, v);
    bool timed_out = false;
    st.wait(0, v, timed_out, 15000);
    RANK_EXPECT(!timed_out && st.poisoned(0, v), g, why);
    RANK_EXPECT(ds4tp_group_failed(g) != 0 && ds4tp_group_stream_state(g) == DS4TP_SERVICE_FAILED,
                g, why);
    RANK_EXPECT(std::string(ds4tp_group_errmsg(g)).size() > 0, g, why);
    return 0;
  });
}

TEST_CASE("group stream: the C++ wrapper starts and stops it", "[group]") {
  Local l(2);
  per_rank(l, [&](ds4tp_group *g, int, Why &why) -> int {
    ds4tp::StreamOptions o;
    o.count = kCount;
    CpuStream st;
    try {
      st.w = ds4tp::group_stream_start(g, o);
    } catch (const ds4tp::Error &e) {
      return why.fail(g, std::string("group_stream_start threw ") + e.what());
    }
    if (int rc = run_seqs(g, st, 2, 0, 3, why)) return rc;
    try {
      ds4tp::group_stream_stop(g);
    } catch (const ds4tp::Error &e) {
      return why.fail(g, std::string("group_stream_stop threw ") + e.what());
    }
    return 0;
  });
}

TEST_CASE("group stream: a count whose slot would pass 1 GiB is refused, never wrapped", "[group]") {
  Local l(2);
  ds4tp_stream_options o;
  ds4tp_stream_options_init(&o);
  o.dtype = DS4TP_DTYPE_F32;
  o.count = (uint64_t(1) << 62) + 1;  // times 4 bytes wraps to 4
  ds4tp_stream_words w{};
  w.size = sizeof w;
  const int rc = ds4tp_group_stream_start(l.gs[0], nullptr, &o, &w);
  INFO(ds4tp_group_errmsg(l.gs[0]));
  CHECK(rc == DS4TP_EINVAL);
  CHECK(std::string(ds4tp_group_errmsg(l.gs[0])).find("above 1 GiB") != std::string::npos);
  CHECK(ds4tp_group_failed(l.gs[0]) == 0);
}
