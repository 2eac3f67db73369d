// The shared-memory transport: handshake messages, negotiation on one and
// on "two" hosts, the library's shared slab and engine-owned slabs, slot
// reuse, big gates through the staging ring, and peers that die mid-gate
// without leaving a segment behind. Cases that hold for every transport
// run over each local one.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include "support/ranks.hpp"
#include "link/shm/segment.hpp"
#include "wire/codec.hpp"
#include "wire/shm_offer.hpp"

using namespace ds4tp::test;
namespace wire = ds4tp::wire;

namespace {

// Linux hosts have /dev/shm; a host without it fails these cases loudly.
bool shm_here() {
  std::string why;
  bool ok = ds4tp::shm::usable(0, why);
  if (!ok) UNSCOPED_INFO("shared memory is not usable here: " << why);
  return ok;
}

// Segment files in /dev/shm created by process `pid` (names carry it).
std::vector<std::string> segments_of(pid_t pid) {
  std::vector<std::string> found;
  std::string tag = "-" + std::to_string(pid) + "-";
  if (DIR *d = opendir("/dev/shm")) {
    while (dirent *e = readdir(d)) {
      std::string n = e->d_name;
      if (n.rfind("ds4tp-", 0) == 0 && n.find(tag) != std::string::npos) found.push_back(n);
    }
    closedir(d);
  }
  return found;
}

int connect_only(ds4tp_pair *tp, int want_transport) {
  CHILD_EXPECT_OK(ds4tp_connect(tp), tp);
  CHILD_EXPECT(
      want_transport == DS4TP_TRANSPORT_AUTO || ds4tp_transport_active(tp) == want_transport, tp,
      "transport %s, wanted %s", ds4tp_transport_name(ds4tp_transport_active(tp)),
      ds4tp_transport_name(want_transport));
  return 0;
}

struct View {
  uint8_t *slab = nullptr;
  ds4tp_slab_layout l{};
};

View view(ds4tp_pair *tp) {
  View v;
  v.slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
  v.l.size = sizeof v.l;
  ds4tp_slab_layout_get(tp, &v.l);
  return v;
}

// One row gate with a (rank, seq) pattern, checked bit for bit.
int row_gate(ds4tp_pair *tp, uint32_t layer, uint32_t gate, uint64_t seq) {
  View v = view(tp);
  int rank = ds4tp_rank(tp);
  uint64_t floats = v.l.vec_bytes / 4;
  auto *out = reinterpret_cast<float *>(v.slab + ds4tp_slab_out_offset(tp, layer, gate));
  auto *in = reinterpret_cast<float *>(v.slab + ds4tp_slab_in_offset(tp, layer, gate));
  for (uint64_t i = 0; i < floats; i++) out[i] = pattern(rank, seq, i);
  CHILD_EXPECT_OK(ds4tp_gate_exchange(tp, layer, gate, seq), tp);
  for (uint64_t i = 0; i < floats; i++) {
    float want = pattern(1 - rank, seq, i);
    CHILD_EXPECT(std::memcmp(&in[i], &want, 4) == 0, tp, "gate seq %llu float %llu",
                 (unsigned long long)seq, (unsigned long long)i);
  }
  return 0;
}

int batch_gate(ds4tp_pair *tp, uint32_t index, uint32_t rows, uint64_t seq) {
  View v = view(tp);
  int rank = ds4tp_rank(tp);
  uint64_t floats = v.l.vec_bytes / 4;
  uint8_t *bout = v.slab + ds4tp_slab_batch_out_offset(tp, index);
  uint8_t *bin = v.slab + ds4tp_slab_batch_in_offset(tp, index);
  for (uint32_t r = 0; r < rows; r++) {
    auto *row = reinterpret_cast<float *>(bout + r * v.l.vec_stride);
    for (uint64_t i = 0; i < floats; i++) row[i] = pattern(rank, 5000 + seq, r * floats + i);
  }
  CHILD_EXPECT_OK(ds4tp_batch_gate_exchange(tp, index, rows, seq), tp);
  for (uint32_t r = 0; r < rows; r++) {
    auto *row = reinterpret_cast<float *>(bin + r * v.l.vec_stride);
    for (uint64_t i = 0; i < floats; i++) {
      float want = pattern(1 - rank, 5000 + seq, r * floats + i);
      CHILD_EXPECT(std::memcmp(&row[i], &want, 4) == 0, tp, "batch seq %llu row %u float %llu",
                   (unsigned long long)seq, r, (unsigned long long)i);
    }
  }
  return 0;
}

int big_gate(ds4tp_pair *tp, uint64_t seq, uint64_t bytes) {
  int rank = ds4tp_rank(tp);
  std::vector<uint8_t> out(bytes), in(bytes, 0xee);
  for (uint64_t i = 0; i < bytes; i++) out[i] = uint8_t((i * 131 + seq * 7) ^ uint64_t(rank * 0x5a));
  CHILD_EXPECT_OK(ds4tp_big_gate_exchange(tp, 3, seq, out.data(), in.data(), bytes), tp);
  for (uint64_t i = 0; i < bytes; i++)
    CHILD_EXPECT(in[i] == uint8_t((i * 131 + seq * 7) ^ uint64_t((1 - rank) * 0x5a)), tp,
                 "big gate of %llu bytes differs at byte %llu", (unsigned long long)bytes,
                 (unsigned long long)i);
  return 0;
}

// Row gates for `tokens` tokens (every slot in order), a batch gate after each.
int tokens_loop(ds4tp_pair *tp, int tokens, uint64_t &seq, uint64_t &bseq) {
  View v = view(tp);
  uint32_t n_layer = v.l.slots / 2;
  for (int t = 0; t < tokens; t++) {
    for (uint32_t layer = 0; layer < n_layer; layer++)
      for (uint32_t gate = 0; gate < 2; gate++)
        if (int rc = row_gate(tp, layer, gate, ++seq)) return rc;
    if (int rc = batch_gate(tp, uint32_t(t) % v.l.batch_gates, uint32_t(t % 8) + 1, ++bseq))
      return rc;
  }
  return 0;
}

}  // namespace

TEST_CASE("shm handshake messages round-trip and reject malformed shapes") {
  using namespace ds4tp;
  Error err;
  wire::ShmOffer o;
  o.ok = true;
  o.pid = 4242;
  o.start_time = 987654321;
  o.segment_bytes = 0x123456789ull;
  o.name = "/ds4tp-00000000deadbeef-r1-4242-0123456789abcdef";
  std::vector<uint8_t> m = wire::encode_shm_offer(o);
  REQUIRE(m.size() == wire::kShmHeaderBytes + wire::kShmOfferFixedBytes + o.name.size());
  wire::ShmHeader h;
  REQUIRE(wire::decode_shm_header(m.data(), m.size(), h, err) == DS4TP_OK);
  REQUIRE(h.body_bytes == m.size() - wire::kShmHeaderBytes);
  wire::ShmOffer back;
  const uint8_t *body = m.data() + wire::kShmHeaderBytes;
  REQUIRE(wire::decode_shm_offer(h, body, h.body_bytes, back, err) == DS4TP_OK);
  CHECK(back.ok);
  CHECK(back.pid == o.pid);
  CHECK(back.start_time == o.start_time);
  CHECK(back.segment_bytes == o.segment_bytes);
  CHECK(back.name == o.name);

  // Every truncation of the body is refused, never read past.
  for (size_t len = 0; len < h.body_bytes; len++)
    CHECK(wire::decode_shm_offer(h, body, len, back, err) == DS4TP_EPROTO);
  // Header: bad magic, unknown kind, status, oversized body.
  for (int field = 0; field < 4; field++) {
    std::vector<uint8_t> bad = m;
    if (field == 0) bad[0] ^= 1;
    if (field == 1) wire::put_u16(bad.data() + 4, 9);
    if (field == 2) wire::put_u16(bad.data() + 6, 2);
    if (field == 3) wire::put_u32(bad.data() + 8, uint32_t(wire::kShmMaxBody + 1));
    CHECK(wire::decode_shm_header(bad.data(), bad.size(), h, err) == DS4TP_EPROTO);
  }
  CHECK(wire::decode_shm_header(m.data(), wire::kShmHeaderBytes - 1, h, err) == DS4TP_EPROTO);

  // Names must be one plain shm name: no directories, no odd bytes.
  for (const char *bad_name : {"ds4tp-x", "/a/b", "/..", "/a b", "/"}) {
    wire::ShmOffer b = o;
    b.name = bad_name;
    std::vector<uint8_t> e = wire::encode_shm_offer(b);
    REQUIRE(wire::decode_shm_header(e.data(), e.size(), h, err) == DS4TP_OK);
    CHECK(wire::decode_shm_offer(h, e.data() + 12, h.body_bytes, back, err) == DS4TP_EPROTO);
  }

  // A refusal carries its reason and no name.
  wire::ShmOffer no;
  no.reason = "cannot create a segment in /dev/shm: Permission denied";
  m = wire::encode_shm_offer(no);
  REQUIRE(wire::decode_shm_header(m.data(), m.size(), h, err) == DS4TP_OK);
  REQUIRE(h.status == 1);
  REQUIRE(wire::decode_shm_offer(h, m.data() + 12, h.body_bytes, back, err) == DS4TP_OK);
  CHECK_FALSE(back.ok);
  CHECK(back.reason == no.reason);

  // Ready: round trip, wrong kind, lengths that do not add up.
  wire::ShmReady r{false, "the peer's segment is 1 bytes"};
  m = wire::encode_shm_ready(r);
  REQUIRE(wire::decode_shm_header(m.data(), m.size(), h, err) == DS4TP_OK);
  wire::ShmReady rb;
  REQUIRE(wire::decode_shm_ready(h, m.data() + 12, h.body_bytes, rb, err) == DS4TP_OK);
  CHECK_FALSE(rb.ok);
  CHECK(rb.reason == r.reason);
  CHECK(wire::decode_shm_ready(h, m.data() + 12, h.body_bytes - 1, rb, err) == DS4TP_EPROTO);
  CHECK(wire::decode_shm_offer(h, m.data() + 12, h.body_bytes, back, err) == DS4TP_EPROTO);
}

TEST_CASE("auto picks shm on one host and attach_slab(NULL) hands out the shared segment") {
  REQUIRE(shm_here());
  RankSetup s;
  s.transport = DS4TP_TRANSPORT_AUTO;
  s.leader_id = s.worker_id = small_identity(3, 1000);  // rows not a multiple of 64 bytes
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_only(tp, DS4TP_TRANSPORT_SHM)) return rc;
    CHILD_EXPECT_OK(ds4tp_attach_slab(tp, nullptr, 0), tp, "attach");
    auto base = reinterpret_cast<uintptr_t>(ds4tp_slab_base(tp));
    CHILD_EXPECT(base != 0 && base % 4096 == 0, tp);
    uint64_t seq = 0, bseq = 0;
    if (int rc = tokens_loop(tp, 5, seq, bseq)) return rc;
    return big_gate(tp, 1, 100000);
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("two ranks on one CPU: adaptive shm gates yield to each other and stay bit for bit") {
  // Where the kernel puts both ranks on one CPU, the adaptive wait yields
  // instead of spinning (it sees the peer's CPU in the control page).
  REQUIRE(shm_here());
  RankSetup s;
  s.transport = DS4TP_TRANSPORT_SHM;
  s.spin_us = DS4TP_SPIN_ADAPTIVE;
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    cpu_set_t ours, one;
    CHILD_EXPECT(sched_getaffinity(0, sizeof ours, &ours) == 0, tp, "reading the CPU mask");
    int cpu = 0;
    while (cpu < CPU_SETSIZE - 1 && !CPU_ISSET(cpu, &ours)) cpu++;  // both pick the same one
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    CHILD_EXPECT(sched_setaffinity(0, sizeof one, &one) == 0, tp, "pinning to CPU %d", cpu);
    if (int rc = connect_only(tp, DS4TP_TRANSPORT_SHM)) return rc;
    CHILD_EXPECT_OK(ds4tp_attach_slab(tp, nullptr, 0), tp, "attach");
    uint64_t seq = 0, bseq = 0;
    return tokens_loop(tp, 20, seq, bseq);
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("explicit tcp still forces tcp on one host") {
  RankSetup s;
  s.transport = DS4TP_TRANSPORT_AUTO;
  s.worker_tweak = [](ds4tp_options &o) { o.transport = DS4TP_TRANSPORT_TCP; };
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_only(tp, DS4TP_TRANSPORT_TCP)) return rc;
    CHILD_EXPECT_OK(ds4tp_attach_slab(tp, nullptr, 0), tp, "attach");
    return row_gate(tp, 0, 0, 1);
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("an engine-owned slab works over shm with one extra copy") {
  REQUIRE(shm_here());
  // Either rank may own its slab: leader engine memory, worker the library's.
  RankSetup s;
  s.transport = DS4TP_TRANSPORT_SHM;
  s.leader_id = s.worker_id = small_identity(4, 512);
  auto body = [](ds4tp_pair *tp, Ctx &c) -> int {
    if (int rc = connect_only(tp, DS4TP_TRANSPORT_SHM)) return rc;
    uint64_t bytes = ds4tp_slab_bytes(tp);
    void *mem = nullptr;
    if (c.rank == 0) {
      mem = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
      CHILD_EXPECT(mem != nullptr, tp);
      std::memset(mem, 0x5c, bytes);
    }
    auto steps = [&]() -> int {
      CHILD_EXPECT_OK(ds4tp_attach_slab(tp, mem, mem ? bytes : 0), tp);
      CHILD_EXPECT(c.rank != 0 || ds4tp_slab_base(tp) == mem, tp);
      uint64_t seq = 0, bseq = 0;
      if (int rc = tokens_loop(tp, 4, seq, bseq)) return rc;
      if (int rc = big_gate(tp, 1, 5u << 20)) return rc;
      // Detach and re-attach the other kind: the data plane follows.
      ds4tp_detach_slab(tp);
      CHILD_EXPECT_OK(ds4tp_attach_slab(tp, nullptr, 0), tp, "re-attach");
      return tokens_loop(tp, 1, seq, bseq);
    };
    int rc = steps();
    std::free(mem);
    return rc;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("a slot hit twice in a row: the next partial never lands while the last is read") {
  // One gate per token, always slot 0: the fast rank's next gate writes the
  // same in vector the slow rank is still reading. It must wait.
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  s.leader_id = s.worker_id = small_identity(2, 256);
  s.leader_id.gates_per_token = s.worker_id.gates_per_token = 1;
  auto body = [](ds4tp_pair *tp, Ctx &c) -> int {
    int rc = connect_attach(tp);
    if (rc) return rc;
    View v = view(tp);
    uint64_t floats = v.l.vec_bytes / 4;
    auto *out = reinterpret_cast<float *>(v.slab + ds4tp_slab_out_offset(tp, 0, 0));
    auto *in = reinterpret_cast<float *>(v.slab + ds4tp_slab_in_offset(tp, 0, 0));
    for (uint64_t seq = 1; seq <= 6; seq++) {
      for (uint64_t i = 0; i < floats; i++) out[i] = pattern(c.rank, seq, i);
      rc = ds4tp_gate_exchange(tp, 0, 0, seq);
      CHILD_EXPECT_OK(rc, tp, "gate");
      // The leader reads slowly; the worker rushes on to the next gate.
      for (int pass = 0; pass < (c.rank == 0 ? 3 : 1); pass++) {
        for (uint64_t i = 0; i < floats; i++) {
          float want = pattern(1 - c.rank, seq, i);
          CHILD_EXPECT(std::memcmp(&in[i], &want, 4) == 0, tp);
        }
        if (c.rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(15));
      }
    }
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("big gates larger than the staging ring are pipelined bit for bit") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    int rc = connect_attach(tp);
    if (rc) return rc;
    const uint64_t mib = 1u << 20;
    const uint64_t sizes[] = {0, 1, 4 * mib - 1, 4 * mib, 4 * mib + 3, 9 * mib + 5, 512 * 1024};
    uint64_t seq = 0, rseq = 0;
    for (uint64_t bytes : sizes) {
      if ((rc = big_gate(tp, ++seq, bytes))) return rc;
      // Row gates in between keep the kinds interleaved.
      if ((rc = row_gate(tp, uint32_t(rseq / 2 % 4), uint32_t(rseq % 2), rseq + 1))) return rc;
      rseq++;
    }
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("a big gate whose buffer lies in the big-in staging is refused, naming it") {
  RankSetup s;
  s.transport = DS4TP_TRANSPORT_SHM;
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    CHILD_EXPECT_OK(connect_attach(tp), tp);  // the shared segment: the peer writes its big-in
    ds4tp_slab_layout l{};
    l.size = sizeof l;
    ds4tp_slab_layout_get(tp, &l);
    auto *slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
    std::vector<uint8_t> out(1u << 20, 1);
    CHILD_EXPECT_RC(ds4tp_big_gate_exchange(tp, 0, 1, out.data(), slab + l.big_in_offset,
                                            out.size()),
                    DS4TP_EINVAL, tp);
    CHILD_EXPECT(std::strstr(ds4tp_errmsg(tp), "in buffer overlaps the slab's big-in staging"),
                 tp);
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("ranks at different kinds of gates report a desync naming both") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  auto leader = [](ds4tp_pair *tp, Ctx &) -> int {
    int rc = connect_attach(tp);
    if (rc) return rc;
    rc = ds4tp_gate_exchange(tp, 0, 0, 1);
    CHILD_EXPECT_RC(rc, DS4TP_EDESYNC, tp, "desync");
    std::string m = ds4tp_errmsg(tp);
    CHILD_EXPECT(m.find("this rank is at gate") != std::string::npos &&
                     m.find("peer sent batch gate") != std::string::npos,
                 tp);
    return 0;
  };
  auto worker = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    CHILD_EXPECT_RC(ds4tp_batch_gate_exchange(tp, 0, 1, 1), DS4TP_EDESYNC, tp);
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("shm forced across hosts is refused with the reason, and auto falls back to tcp") {
  // The worker pretends to run elsewhere (test-only host identity).
  auto elsewhere = [](ds4tp_options &) { setenv("DS4TP_HOST_ID", "another-host", 1); };
  SECTION("both ask for shm") {
    RankSetup s;
    s.transport = DS4TP_TRANSPORT_SHM;
    s.worker_tweak = elsewhere;
    auto body = [](ds4tp_pair *tp, Ctx &) -> int {
      int rc = ds4tp_connect(tp);
      CHILD_EXPECT_RC(rc, DS4TP_EUNSUPPORTED, tp, "connect");
      std::string m = ds4tp_errmsg(tp);
      CHILD_EXPECT(
          m.find("shm") != std::string::npos && m.find("different hosts") != std::string::npos, tp);
      return 0;
    };
    Outcome o = run_pair(s, body, body);
    REQUIRE_RANKS_OK(o);
  }
  SECTION("only the leader asks for shm") {
    RankSetup s;
    s.transport = DS4TP_TRANSPORT_AUTO;
    s.leader_tweak = [](ds4tp_options &o) { o.transport = DS4TP_TRANSPORT_SHM; };
    s.worker_tweak = elsewhere;
    auto body = [](ds4tp_pair *tp, Ctx &) -> int {
      int rc = ds4tp_connect(tp);
      CHILD_EXPECT_RC(rc, DS4TP_EUNSUPPORTED, tp, "connect");
      CHILD_EXPECT(std::string(ds4tp_errmsg(tp)).find("different hosts") != std::string::npos, tp);
      return 0;
    };
    Outcome o = run_pair(s, body, body);
    REQUIRE_RANKS_OK(o);
  }
  SECTION("auto on both") {
    RankSetup s;
    s.transport = DS4TP_TRANSPORT_AUTO;
    s.worker_tweak = elsewhere;
    auto body = [](ds4tp_pair *tp, Ctx &) -> int {
      if (int rc = connect_only(tp, DS4TP_TRANSPORT_TCP)) return rc;
      CHILD_EXPECT_OK(ds4tp_attach_slab(tp, nullptr, 0), tp, "attach");
      return row_gate(tp, 0, 0, 1);
    };
    Outcome o = run_pair(s, body, body);
    REQUIRE_RANKS_OK(o);
  }
}

TEST_CASE("a peer killed mid-gate over shm: the survivor returns in time, no segment is left") {
  REQUIRE(shm_here());
  // spin 0: the survivor sleeps on the connection; 100000: it is still spinning.
  int spin_us = GENERATE(0, 100000);
  bool in_big_gate = GENERATE(false, true);
  RankSetup s;
  s.transport = DS4TP_TRANSPORT_SHM;
  s.spin_us = spin_us;
  s.gate_timeout_ms = 3000;
  s.leader_tweak = [](ds4tp_options &o) { o.big_gate_timeout_ms = 3000; };
  s.worker_tweak = s.leader_tweak;
  auto worker = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_only(tp, DS4TP_TRANSPORT_SHM)) return rc;
    CHILD_EXPECT_OK(ds4tp_attach_slab(tp, nullptr, 0), tp, "attach");
    if (int rc = row_gate(tp, 0, 0, 1)) return rc;
    pause();  // never reaches the next gate; the leader kills us
    return 0;
  };
  auto leader = [in_big_gate](ds4tp_pair *tp, Ctx &c) -> int {
    if (int rc = connect_only(tp, DS4TP_TRANSPORT_SHM)) return rc;
    // Both segment names are gone as soon as both ranks mapped them.
    CHILD_EXPECT(segments_of(getpid()).empty() && segments_of(c.worker_pid).empty(), tp);
    CHILD_EXPECT_OK(ds4tp_attach_slab(tp, nullptr, 0), tp, "attach");
    if (int rc = row_gate(tp, 0, 0, 1)) return rc;
    std::vector<uint8_t> out(6u << 20, 1), in(6u << 20);
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      kill(c.worker_pid, SIGKILL);
    });
    auto t0 = Clock::now();
    int rc = in_big_gate ? ds4tp_big_gate_exchange(tp, 0, 1, out.data(), in.data(), out.size())
                         : ds4tp_gate_exchange(tp, 0, 1, 2);
    double took = ms_since(t0);
    killer.join();
    CHILD_EXPECT_RC(rc, DS4TP_EPEERCLOSED, tp, "gate after kill");
    CHILD_EXPECT(took <= 1500, tp, "took %.0f ms", took);  // seen at once, not at the 3 s deadline
    // This call's own message (the control plane may word the pair's).
    CHILD_EXPECT(std::string(ds4tp_last_error()).find("over shm") != std::string::npos, tp);
    CHILD_EXPECT(ds4tp_failed(tp), tp);
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  INFO(o.describe());
  REQUIRE(o.leader == 0);
  REQUIRE(o.worker_signal == SIGKILL);
  REQUIRE(segments_of(getpid()).empty());
}

TEST_CASE("a dead peer whose connection lives on in a child is noticed by its pid") {
  REQUIRE(shm_here());
  RankSetup s;
  s.transport = DS4TP_TRANSPORT_SHM;
  s.spin_us = 0;
  s.gate_timeout_ms = 4000;
  auto worker = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_only(tp, DS4TP_TRANSPORT_SHM)) return rc;
    CHILD_EXPECT_OK(ds4tp_attach_slab(tp, nullptr, 0), tp, "attach");
    // A child inherits the sockets, so they stay open when we are killed.
    if (fork() == 0) {
      sleep(2);
      _exit(0);
    }
    pause();
    return 0;
  };
  auto leader = [](ds4tp_pair *tp, Ctx &c) -> int {
    if (int rc = connect_only(tp, DS4TP_TRANSPORT_SHM)) return rc;
    CHILD_EXPECT_OK(ds4tp_attach_slab(tp, nullptr, 0), tp, "attach");
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      kill(c.worker_pid, SIGKILL);  // stays a zombie: we reap it only later
    });
    auto t0 = Clock::now();
    int rc = ds4tp_gate_exchange(tp, 0, 0, 1);
    double took = ms_since(t0);
    killer.join();
    CHILD_EXPECT_RC(rc, DS4TP_EPEERCLOSED, tp, "gate after kill");
    CHILD_EXPECT(took <= 1500, tp, "took %.0f ms", took);
    CHILD_EXPECT(std::string(ds4tp_last_error()).find("process has exited") != std::string::npos,
                 tp);
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  INFO(o.describe());
  REQUIRE(o.leader == 0);
  REQUIRE(o.worker_signal == SIGKILL);
}
