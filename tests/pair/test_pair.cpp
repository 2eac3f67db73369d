// Two real processes over loopback: bring-up, identity, gates, faults.
// Every case runs over each local transport.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <signal.h>
#include <unistd.h>

#include "support/ranks.hpp"
#include "wire/codec.hpp"
#include "wire/gate_header.hpp"
#include "wire/hello.hpp"

using namespace ds4tp::test;

namespace {

// N tokens of every row gate plus one batch gate per token, each payload
// checked bit for bit against the peer's pattern.
int token_loop(ds4tp_pair *tp, int tokens) {
  int rank = ds4tp_rank(tp);
  auto *slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
  ds4tp_slab_layout l{};
  l.size = sizeof l;
  ds4tp_slab_layout_get(tp, &l);
  uint32_t n_layer = l.slots / 2;
  uint64_t floats = l.vec_bytes / 4;
  uint64_t seq = 0, bseq = 0;
  for (int t = 0; t < tokens; t++) {
    for (uint32_t layer = 0; layer < n_layer; layer++) {
      for (uint32_t gate = 0; gate < 2; gate++) {
        seq++;
        auto *out = reinterpret_cast<float *>(slab + ds4tp_slab_out_offset(tp, layer, gate));
        auto *in = reinterpret_cast<float *>(slab + ds4tp_slab_in_offset(tp, layer, gate));
        for (uint64_t i = 0; i < floats; i++) out[i] = pattern(rank, seq, i);
        CHILD_EXPECT_OK(ds4tp_gate_exchange(tp, layer, gate, seq), tp);
        for (uint64_t i = 0; i < floats; i++) {
          float want = pattern(1 - rank, seq, i);
          CHILD_EXPECT(std::memcmp(&in[i], &want, 4) == 0, tp, "gate seq %llu float %llu",
                       (unsigned long long)seq, (unsigned long long)i);
        }
      }
    }
    uint32_t rows = uint32_t(t % 8) + 1, index = uint32_t(t) % l.batch_gates;
    bseq++;
    uint8_t *bout = slab + ds4tp_slab_batch_out_offset(tp, index);
    uint8_t *bin = slab + ds4tp_slab_batch_in_offset(tp, index);
    for (uint32_t r = 0; r < rows; r++) {
      auto *row = reinterpret_cast<float *>(bout + r * l.vec_stride);
      for (uint64_t i = 0; i < floats; i++) row[i] = pattern(rank, 1000000 + bseq, r * floats + i);
    }
    CHILD_EXPECT_OK(ds4tp_batch_gate_exchange(tp, index, rows, bseq), tp);
    for (uint32_t r = 0; r < rows; r++) {
      auto *row = reinterpret_cast<float *>(bin + r * l.vec_stride);
      for (uint64_t i = 0; i < floats; i++) {
        float want = pattern(1 - rank, 1000000 + bseq, r * floats + i);
        CHILD_EXPECT(std::memcmp(&row[i], &want, 4) == 0, tp, "batch seq %llu row %u float %llu",
                     (unsigned long long)bseq, r, (unsigned long long)i);
      }
    }
  }
  return 0;
}

}  // namespace

TEST_CASE("row gates, batch gates and a 64 MiB big gate cross two processes bit for bit") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  s.leader_id = s.worker_id = small_identity(6, 4096);
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    int rc = connect_attach(tp);
    if (rc) return rc;
    rc = token_loop(tp, 20);
    if (rc) return rc;
    return big_gate(tp, 64ull << 20);
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

// Row-gate slots: 64 bytes of header room, then the vector, then padding
// up to the next slot. A gate writes only its own in vector and, over tcp,
// the peer's gate header into the 32 bytes just before it: one contiguous
// receive (tcp/gate_stream.hpp). Everything else keeps the sentinel.
TEST_CASE("a row gate writes its in vector and, over tcp, the header room before it only") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  s.leader_id = s.worker_id = small_identity(3, 4100);  // 16400-byte vectors: 48 bytes of padding
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    const int rank = ds4tp_rank(tp);
    auto *slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
    ds4tp_slab_layout l{};
    l.size = sizeof l;
    ds4tp_slab_layout_get(tp, &l);
    CHILD_EXPECT(l.slot_stride == l.vec_stride + 64 && l.vec_stride > l.vec_bytes, tp,
                 "slot_stride %llu vec_stride %llu", (unsigned long long)l.slot_stride,
                 (unsigned long long)l.vec_stride);
    uint8_t *region = slab + l.in_offset - 64;
    std::memset(region, 0xEE, l.slots * l.slot_stride);
    // A batch gate as a barrier: over shm the peer writes our in vectors
    // directly, so neither rank may start row gates before both have set
    // the sentinel.
    CHILD_EXPECT_OK(ds4tp_batch_gate_exchange(tp, 0, 1, 1), tp);
    const bool tcp = ds4tp_transport_active(tp) == DS4TP_TRANSPORT_TCP;
    const uint64_t floats = l.vec_bytes / 4;
    for (uint32_t slot = 0; slot < l.slots; slot++) {
      const uint64_t seq = slot + 1;
      auto *out = reinterpret_cast<float *>(slab + l.out_offset + slot * l.slot_stride);
      for (uint64_t i = 0; i < floats; i++) out[i] = pattern(rank, seq, i);
      CHILD_EXPECT_OK(ds4tp_gate_exchange(tp, slot / 2, slot % 2, seq), tp);
    }
    for (uint32_t slot = 0; slot < l.slots; slot++) {
      const uint8_t *room = region + slot * l.slot_stride, *vec = room + 64;
      for (uint64_t i = 0; i < floats; i++) {
        float want = pattern(1 - rank, slot + 1, i);
        CHILD_EXPECT(std::memcmp(vec + 4 * i, &want, 4) == 0, tp, "slot %u float %llu", slot,
                     (unsigned long long)i);
      }
      for (uint64_t b = l.vec_bytes; b < l.vec_stride; b++)
        CHILD_EXPECT(vec[b] == 0xEE, tp, "slot %u padding byte %llu was written", slot,
                     (unsigned long long)b);
      for (int b = 0; b < 32; b++)
        CHILD_EXPECT(room[b] == 0xEE, tp, "slot %u room byte %d was written", slot, b);
      ds4tp::wire::GateHeader h;
      ds4tp::Error err;
      const int rc = ds4tp::wire::decode_gate_header(room + 32, 32, h, err);
      if (tcp) {
        CHILD_EXPECT(rc == DS4TP_OK && h.seq == slot + 1 && h.layer == slot / 2, tp,
                     "slot %u: the peer's header is not in the room (%s)", slot,
                     err.message.c_str());
      } else {
        for (int b = 32; b < 64; b++)
          CHILD_EXPECT(room[b] == 0xEE, tp, "slot %u room byte %d was written", slot, b);
      }
    }
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("an identity mismatch aborts both ranks naming the field and values") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  s.worker_id.n_vocab = 1001;
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    CHILD_EXPECT_RC(ds4tp_connect(tp), DS4TP_EIDENTITY, tp);
    std::string m = ds4tp_errmsg(tp);
    CHILD_EXPECT(m.find("n_vocab") != std::string::npos && m.find("1000") != std::string::npos &&
                     m.find("1001") != std::string::npos,
                 tp);
    CHILD_EXPECT(ds4tp_failed(tp), tp);
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("an engine blob mismatch is an identity mismatch, and ctx_size is only reported") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  static const char a[] = "sha256:aaaa", b[] = "sha256:aaab";
  s.leader_id.engine_blob = a;
  s.leader_id.engine_blob_bytes = sizeof a;
  s.worker_id.engine_blob = b;
  s.worker_id.engine_blob_bytes = sizeof b;
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    CHILD_EXPECT_RC(ds4tp_connect(tp), DS4TP_EIDENTITY, tp);
    CHILD_EXPECT(std::string(ds4tp_errmsg(tp)).find("engine_blob") != std::string::npos, tp);
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);

  RankSetup s2;
  s2.transport = transport;
  s2.worker_id.ctx_size = 0;  // "adopt the leader's"
  auto body2 = [](ds4tp_pair *tp, Ctx &c) -> int {
    CHILD_EXPECT_OK(ds4tp_connect(tp), tp);
    CHILD_EXPECT(ds4tp_peer_ctx_size(tp) == (c.rank == 0 ? 0u : 2048u), tp);
    return 0;
  };
  o = run_pair(s2, body2, body2);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("the worker killed in the middle of a gate: the leader fails in time") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  s.gate_timeout_ms = 2000;
  auto worker = [](ds4tp_pair *tp, Ctx &) -> int {
    int rc = connect_attach(tp);
    if (rc) return rc;
    rc = token_loop(tp, 2);
    if (rc) return rc;
    pause();  // never reaches the next gate; the leader kills us
    return 0;
  };
  auto leader = [](ds4tp_pair *tp, Ctx &c) -> int {
    int rc = connect_attach(tp);
    if (rc) return rc;
    rc = token_loop(tp, 2);
    if (rc) return rc;
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      kill(c.worker_pid, SIGKILL);
    });
    auto t0 = Clock::now();
    rc = ds4tp_gate_exchange(tp, 0, 0, 4 * 2 * 2 + 1);
    double took = ms_since(t0);
    killer.join();
    CHILD_EXPECT_RC(rc, DS4TP_EPEERCLOSED, tp);
    // The close is seen at once, not at the deadline.
    CHILD_EXPECT(took <= 1500, tp, "took %.0f ms", took);
    CHILD_EXPECT(ds4tp_failed(tp), tp);
    CHILD_EXPECT_RC(ds4tp_gate_exchange(tp, 0, 1, 4 * 2 * 2 + 2), DS4TP_EFAILED, tp);
    CHILD_EXPECT_RC(ds4tp_big_gate_exchange(tp, 0, 1, "x", (void *)"y", 0), DS4TP_EFAILED, tp);
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  INFO(o.describe());
  REQUIRE(o.leader == 0);
  REQUIRE(o.worker_signal == SIGKILL);
}

TEST_CASE("a stalled worker: the gate times out within its deadline") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  s.gate_timeout_ms = 300;
  auto worker = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    // Alive but never at the gate.
    std::this_thread::sleep_for(std::chrono::seconds(3));
    return 0;
  };
  auto leader = [](ds4tp_pair *tp, Ctx &) -> int {
    int rc = connect_attach(tp);
    if (rc) return rc;
    auto t0 = Clock::now();
    rc = ds4tp_gate_exchange(tp, 0, 0, 1);
    double took = ms_since(t0);
    CHILD_EXPECT_RC(rc, DS4TP_ETIMEDOUT, tp);
    CHILD_EXPECT(took >= 250 && took <= 2000, tp, "took %.0f ms", took);
    CHILD_EXPECT(std::string(ds4tp_errmsg(tp)).find("300 ms") != std::string::npos, tp);
    CHILD_EXPECT(ds4tp_failed(tp), tp);
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("ranks at different gates report a desync naming both") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  auto leader = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    char in[4];
    CHILD_EXPECT_RC(ds4tp_big_gate_exchange(tp, 1, 7, "abcd", in, 4), DS4TP_EDESYNC, tp);
    std::string m = ds4tp_errmsg(tp);
    CHILD_EXPECT(m.find("seq 7") != std::string::npos && m.find("seq 8") != std::string::npos, tp);
    return 0;
  };
  auto worker = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    char in[4];
    CHILD_EXPECT_RC(ds4tp_big_gate_exchange(tp, 1, 8, "abcd", in, 4), DS4TP_EDESYNC, tp);
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("gate order is checked against the schedule before any traffic") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    // seq 1 must be slot 0 (layer 0 ATTN) under the identity schedule.
    CHILD_EXPECT_RC(ds4tp_gate_exchange(tp, 0, 1, 1), DS4TP_EINVAL, tp);
    CHILD_EXPECT(std::string(ds4tp_errmsg(tp)).find("schedule") != std::string::npos, tp);
    CHILD_EXPECT(!ds4tp_failed(tp), tp);  // caller bug, not a pair failure
    CHILD_EXPECT_RC(ds4tp_gate_exchange(tp, 0, 0, 2), DS4TP_EINVAL, tp);  // seq starts at 1
    CHILD_EXPECT_OK(ds4tp_gate_exchange(tp, 0, 0, 1), tp);
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("stray connections cannot wedge the leader") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  s.connect_timeout_ms = 20000;
  s.leader_tweak = [](ds4tp_options &o) { o.hello_timeout_ms = 500; };
  auto leader = [&](ds4tp_pair *tp, Ctx &) -> int {
    // Before the worker can complete: one connection sends garbage, one
    // stays silent, one sends a half preamble, one a foreign-endian magic.
    int p = ds4tp_listen_port(tp);
    int garbage = loopback_connect(p), silent = loopback_connect(p), half = loopback_connect(p),
        swapped = loopback_connect(p);
    CHILD_EXPECT(garbage >= 0 && silent >= 0 && half >= 0 && swapped >= 0, tp);
    const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    (void)!write(garbage, junk, sizeof junk - 1);
    (void)!write(half, "D4TP", 4);
    (void)!write(swapped, "PT4D\x01\x00\x01\x00\x10\x00\x00\x00", 12);
    int rc = connect_attach(tp);
    close(garbage), close(silent), close(half), close(swapped);
    if (rc) return rc;
    return token_loop(tp, 1);
  };
  auto worker = [](ds4tp_pair *tp, Ctx &) -> int {
    usleep(100000);  // let the strays arrive first
    if (int rc = connect_attach(tp)) return rc;
    return token_loop(tp, 1);
  };
  Outcome o = run_pair(s, leader, worker);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("a peer speaking another protocol version gets a version error") {
  ds4tp_options o;
  ds4tp_options_init(&o);
  o.role = DS4TP_ROLE_LEADER;
  o.log_level = DS4TP_LOG_ERROR;
  o.connect_timeout_ms = 5000;
  ds4tp_identity id = small_identity();
  ds4tp_pair *tp = nullptr;
  REQUIRE(ds4tp_new(&tp, &o, &id) == DS4TP_OK);
  int port = ds4tp_listen_port(tp);
  std::thread fake([port] {
    int fd = loopback_connect(port);
    uint8_t pre[12];
    ds4tp::wire::put_u32(pre, ds4tp::wire::kMagic);
    ds4tp::wire::put_u16(pre + 4, 99);
    ds4tp::wire::put_u16(pre + 6, 1);
    ds4tp::wire::put_u32(pre + 8, 0);
    (void)!write(fd, pre, sizeof pre);
    char buf[256];
    (void)!read(fd, buf, sizeof buf);  // the leader answers with its hello
    close(fd);
  });
  int rc = ds4tp_connect(tp);
  fake.join();
  REQUIRE(rc == DS4TP_EVERSION);
  REQUIRE_THAT(std::string(ds4tp_errmsg(tp)), Catch::Contains("99") &&
                                                     Catch::Contains("version " + std::to_string(DS4TP_PROTOCOL_VERSION)));
  ds4tp_free(tp);
}

TEST_CASE("a worker with nobody listening gives up at its connect deadline") {
  int port = unused_loopback_port();

  ds4tp_options o;
  ds4tp_options_init(&o);
  o.role = DS4TP_ROLE_WORKER;
  o.leader_port = port;
  o.connect_timeout_ms = 700;
  o.log_level = DS4TP_LOG_ERROR;
  ds4tp_identity id = small_identity();
  ds4tp_pair *tp = nullptr;
  REQUIRE(ds4tp_new(&tp, &o, &id) == DS4TP_OK);
  auto t0 = Clock::now();
  int rc = ds4tp_connect(tp);
  double took = ms_since(t0);
  REQUIRE(rc == DS4TP_ETIMEDOUT);
  REQUIRE(took >= 650);
  REQUIRE(took < 3000);
  REQUIRE_THAT(std::string(ds4tp_errmsg(tp)),
               Catch::Contains("is the leader running") && Catch::Contains(std::to_string(port)));
  ds4tp_free(tp);
}

TEST_CASE("forcing a transport the ranks cannot share is refused with the reason") {
  RankSetup s;
  s.leader_tweak = [](ds4tp_options &o) { o.transport = DS4TP_TRANSPORT_TCP; };
  s.worker_tweak = [](ds4tp_options &o) { o.transport = DS4TP_TRANSPORT_RDMA; };
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    CHILD_EXPECT_RC(ds4tp_connect(tp), DS4TP_EUNSUPPORTED, tp);
    CHILD_EXPECT(std::string(ds4tp_errmsg(tp)).find("conflict") != std::string::npos, tp);
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}
