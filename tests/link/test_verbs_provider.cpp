// The verbs binding (lib/link/rdma/verbs_*.cpp) end to end
// without hardware: two processes pair with transport=rdma through the
// test verbs provider (tests/verbs_provider), which moves messages through
// shared memory. Profiles: rc (mlx5-like) and uc-apple (Apple's
// Thunderbolt quirks, REFERENCE §4.4), and injected faults, each ending in
// its named error. Every ctest name contains "verbs_provider".
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <chrono>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "support/env.hpp"
#include "support/ranks.hpp"
#include "link/rdma/probe.hpp"

using namespace ds4tp::test;

namespace {

// The provider for both ranks (the forked worker inherits the environment).
struct Provider {
  Provider(const char *profile, const char *fault = nullptr, bool apple_exports = false)
      : lib("DS4TP_VERBS_LIB",
            apple_exports ? DS4TP_TEST_VERBS_PROVIDER_APPLE : DS4TP_TEST_VERBS_PROVIDER),
        prof("DS4TP_VERBS_PROVIDER_PROFILE", profile),
        flt("DS4TP_VERBS_PROVIDER_FAULT", fault) {}
  ScopedEnv lib, prof, flt;
};

std::mutex g_mu;
std::vector<std::string> g_log;
void capture(void *, int, const char *msg) {
  std::lock_guard<std::mutex> l(g_mu);
  g_log.emplace_back(msg);
}
bool logged(const char *what) {
  std::lock_guard<std::mutex> l(g_mu);
  for (auto &s : g_log)
    if (s.find(what) != std::string::npos) return true;
  return false;
}

RankSetup rdma_setup() {
  RankSetup s;
  s.transport = DS4TP_TRANSPORT_RDMA;
  s.leader_id = s.worker_id = small_identity(4, 4096);
  s.log_level = DS4TP_LOG_INFO;
  s.leader_tweak = [](ds4tp_options &o) {
    o.log_fn = capture;
    o.log_user_data = nullptr;
  };
  {
    std::lock_guard<std::mutex> l(g_mu);
    g_log.clear();
  }
  return s;
}

// The primary's own failure, as a pair without a standby link meets it
// (test_failover.cpp runs the same faults with one).
void without_failover(RankSetup &s) {
  auto lead = s.leader_tweak, work = s.worker_tweak;
  s.leader_tweak = [lead](ds4tp_options &o) {
    if (lead) lead(o);
    o.failover = 0;
  };
  s.worker_tweak = [work](ds4tp_options &o) {
    if (work) work(o);
    o.failover = 0;
  };
}

int attach_rdma(ds4tp_pair *tp) {
  if (int rc = connect_attach(tp)) return rc;
  CHILD_EXPECT(ds4tp_transport_active(tp) == DS4TP_TRANSPORT_RDMA, tp);
  return 0;
}

// Row gates of `tokens` tokens then one batch gate per token (rows 1..8),
// bit for bit.
struct Seqs {
  uint64_t row = 0, batch = 0;
};
int rows_and_batches(ds4tp_pair *tp, int tokens, Seqs &q) {
  int rank = ds4tp_rank(tp);
  auto *slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
  ds4tp_slab_layout l{};
  l.size = sizeof l;
  ds4tp_slab_layout_get(tp, &l);
  const uint64_t floats = l.vec_bytes / 4;
  for (int t = 0; t < tokens; t++) {
    for (uint32_t g = 0; g < l.slots; g++) {
      const uint64_t seq = ++q.row;
      auto *out = reinterpret_cast<float *>(slab + ds4tp_slab_out_offset(tp, g / 2, g % 2));
      auto *in = reinterpret_cast<float *>(slab + ds4tp_slab_in_offset(tp, g / 2, g % 2));
      for (uint64_t i = 0; i < floats; i++) out[i] = pattern(rank, seq, i);
      CHILD_EXPECT_OK(ds4tp_gate_exchange(tp, g / 2, g % 2, seq), tp);
      for (uint64_t i = 0; i < floats; i++) {
        float want = pattern(1 - rank, seq, i);
        CHILD_EXPECT(std::memcmp(&in[i], &want, 4) == 0, tp, "row seq %llu float %llu",
                     (unsigned long long)seq, (unsigned long long)i);
      }
    }
    uint32_t rows = uint32_t(t % 8) + 1, index = uint32_t(t) % l.batch_gates;
    const uint64_t bseq = ++q.batch;
    uint8_t *bout = slab + ds4tp_slab_batch_out_offset(tp, index);
    uint8_t *bin = slab + ds4tp_slab_batch_in_offset(tp, index);
    for (uint64_t i = 0; i < rows * l.vec_stride / 4; i++)
      reinterpret_cast<float *>(bout)[i] = pattern(rank, 1000000 + bseq, i);
    CHILD_EXPECT_OK(ds4tp_batch_gate_exchange(tp, index, rows, bseq), tp);
    for (uint32_t r = 0; r < rows; r++)
      for (uint64_t i = 0; i < floats; i++) {
        uint64_t k = r * l.vec_stride / 4 + i;
        float want = pattern(1 - rank, 1000000 + bseq, k);
        CHILD_EXPECT(std::memcmp(bin + 4 * k, &want, 4) == 0, tp, "batch %llu row %u",
                     (unsigned long long)bseq, r);
      }
  }
  return 0;
}

// A verify block: consecutive batch gates (next index, same rows, seq+1),
// the path where each gate's receives are posted by its predecessor.
int verify_block(ds4tp_pair *tp, Seqs &q) {
  int rank = ds4tp_rank(tp);
  auto *slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
  ds4tp_slab_layout l{};
  l.size = sizeof l;
  ds4tp_slab_layout_get(tp, &l);
  const uint32_t rows = 4;
  for (uint32_t g = 0; g < l.batch_gates; g++) {
    const uint64_t seq = ++q.batch;
    auto *out = reinterpret_cast<float *>(slab + ds4tp_slab_batch_out_offset(tp, g));
    auto *in = reinterpret_cast<float *>(slab + ds4tp_slab_batch_in_offset(tp, g));
    const uint64_t n = rows * l.vec_stride / 4;
    for (uint64_t i = 0; i < n; i++) out[i] = pattern(rank, 2000000 + seq, i);
    CHILD_EXPECT_OK(ds4tp_batch_gate_exchange(tp, g, rows, seq), tp);
    for (uint64_t i = 0; i < n; i++) {
      float want = pattern(1 - rank, 2000000 + seq, i);
      CHILD_EXPECT(std::memcmp(&in[i], &want, 4) == 0, tp, "block gate %u word %llu", g,
                   (unsigned long long)i);
    }
  }
  return 0;
}

int full_run(ds4tp_pair *tp, Ctx &) {
  Seqs q;
  if (int rc = attach_rdma(tp)) return rc;
  if (int rc = rows_and_batches(tp, 10, q)) return rc;
  if (int rc = verify_block(tp, q)) return rc;
  if (int rc = big_gate(tp, 16u << 20)) return rc;
  return rows_and_batches(tp, 2, q);
}

enum class At { Connect, Attach, Gates };

// Row gates until one fails (at most 64): its status.
int rows_and_batches_fail(ds4tp_pair *tp) {
  const uint32_t slots = 8;  // small_identity(4, ...): 4 layers x 2 gates
  int rc = DS4TP_OK;
  for (uint64_t seq = 1; seq <= 64 && rc == DS4TP_OK; seq++) {
    uint32_t g = uint32_t((seq - 1) % slots);
    rc = ds4tp_gate_exchange(tp, g / 2, g % 2, seq);
  }
  return rc;
}

// Both ranks fail at `at` with `want`, each message containing `text`.
// With `fault`, only rank `fault_rank`'s provider injects it (set before
// its bring-up); then only rank `checked` must fail with `want`, the other
// just has to fail.
void expect_failure(const RankSetup &s, At at, int want, const char *text,
                    const char *fault = nullptr, int fault_rank = 1, int checked = 0) {
  auto body = [=](ds4tp_pair *tp, Ctx &c) -> int {
    std::unique_ptr<ScopedEnv> f;
    if (fault != nullptr && c.rank == fault_rank)
      f = std::make_unique<ScopedEnv>("DS4TP_VERBS_PROVIDER_FAULT", fault);
    if (fault != nullptr && c.rank != checked) {
      CHILD_EXPECT(connect_attach(tp) == 0 && rows_and_batches_fail(tp) != DS4TP_OK, tp);
      return 0;
    }
    if (at == At::Connect) {
      CHILD_EXPECT_RC(ds4tp_connect(tp), want, tp);
    } else if (at == At::Attach) {
      CHILD_EXPECT_OK(ds4tp_connect(tp), tp);
      CHILD_EXPECT_RC(ds4tp_attach_slab(tp, nullptr, 0), want, tp);
      // Both ranks fail on their own; each stays a while so that a slow
      // peer (sanitizers, a loaded host) meets the same fault rather than
      // this rank's closed connection.
      std::string m = ds4tp_errmsg(tp);
      std::this_thread::sleep_for(std::chrono::milliseconds(c.rank == 1 ? 1500 : 1000));
      CHILD_EXPECT(m.find(text) != std::string::npos, tp, "message: %s", m.c_str());
      return 0;
    } else {
      CHILD_EXPECT_OK(connect_attach(tp), tp);
      CHILD_EXPECT_RC(rows_and_batches_fail(tp), want, tp);
      CHILD_EXPECT(ds4tp_failed(tp), tp);
    }
    CHILD_EXPECT(std::strstr(ds4tp_errmsg(tp), text) != nullptr, tp, "message: %s",
                 ds4tp_errmsg(tp));
    return 0;
  };
  Outcome o = run_pair(s, body, body, 30000);
  REQUIRE_RANKS_OK(o);
}

}  // namespace

TEST_CASE("verbs_provider rc: bring-up, rows, batches, verify block and big gate bit for bit") {
  Provider p("rc");
  RankSetup s = rdma_setup();
  Outcome o = run_pair(s, full_run, full_run);
  REQUIRE_RANKS_OK(o);
  CHECK(logged("fv0 port 1 GID 1 (RoCE v2) RC queue pair up"));
}

TEST_CASE("verbs_provider rc: big gates with one rank's buffers in its slab, the other's on the heap") {
  Provider p("rc");
  RankSetup s = rdma_setup();
  // The leader's buffers lie in its registered slab (its staging regions,
  // moved without a copy), the worker's on its heap (moved through
  // staging): each rank decides that alone, and both still move the gate
  // in rounds of the same size.
  auto body = [](ds4tp_pair *tp, Ctx &c) -> int {
    if (int rc = attach_rdma(tp)) return rc;
    ds4tp_slab_layout l{};
    l.size = sizeof l;
    ds4tp_slab_layout_get(tp, &l);
    auto *slab = static_cast<uint8_t *>(ds4tp_slab_base(tp));
    const uint64_t bytes = l.big_staging_bytes, words = bytes / 4;
    std::vector<uint32_t> heap_out(words), heap_in(words);
    auto *out = c.rank == 0 ? reinterpret_cast<uint32_t *>(slab + l.big_out_offset)
                            : heap_out.data();
    auto *in = c.rank == 0 ? reinterpret_cast<uint32_t *>(slab + l.big_in_offset)
                           : heap_in.data();
    for (uint64_t seq = 1; seq <= 3; seq++) {
      for (uint64_t i = 0; i < words; i++)
        out[i] = uint32_t(i * 2654435761u + seq) ^ uint32_t(c.rank);
      CHILD_EXPECT_OK(ds4tp_big_gate_exchange(tp, 1, seq, out, in, bytes), tp, "big seq %llu",
                      (unsigned long long)seq);
      for (uint64_t i = 0; i < words; i++)
        CHILD_EXPECT(in[i] == (uint32_t(i * 2654435761u + seq) ^ uint32_t(1 - c.rank)), tp,
                     "big seq %llu word %llu", (unsigned long long)seq, (unsigned long long)i);
    }
    // Over rdma all along: a failover to the standby would hide a desync.
    CHILD_EXPECT(ds4tp_transport_active(tp) == DS4TP_TRANSPORT_RDMA, tp, "transport %s",
                 ds4tp_transport_name(ds4tp_transport_active(tp)));
    return final_barrier(tp);
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("verbs_provider uc-apple: UC fallback, warm-up, 16 KiB messages, gates bit for bit") {
  Provider p("uc-apple", nullptr, true);
  RankSetup s = rdma_setup();
  Outcome o = run_pair(s, full_run, full_run);
  REQUIRE_RANKS_OK(o);
  CHECK(logged("UC queue pair up"));
  CHECK(logged("16384 byte messages"));
}

TEST_CASE("verbs_provider uc-apple: a dead direction at warm-up recreates the queue pair") {
  Provider p("uc-apple", "dead=1");
  RankSetup s = rdma_setup();
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = attach_rdma(tp)) return rc;
    Seqs q;
    return rows_and_batches(tp, 3, q);
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
  CHECK(logged("recreating the queue pair"));
  CHECK(logged("attempt 2"));
}

TEST_CASE("verbs_provider uc-apple: messages over 16 KiB are lost and warm-up says so") {
  Provider p("uc-apple");
  ScopedEnv big("DS4TP_VERBS_PROVIDER_MAX_MSG", "1048576");  // the port claims 1 MiB
  RankSetup s = rdma_setup();
  expect_failure(s, At::Attach, DS4TP_EIO, "warm-up");
}

TEST_CASE("verbs_provider fault: a lost message ends the gate at its deadline") {
  Provider p("rc");
  RankSetup s = rdma_setup();
  s.gate_timeout_ms = 500;
  s.worker_tweak = [](ds4tp_options &o) { o.gate_timeout_ms = 5000; };
  without_failover(s);
  // The worker's 20th message is lost: the leader waits for it in vain.
  expect_failure(s, At::Gates, DS4TP_ETIMEDOUT, "timed out", "drop=20", 1, 0);
}

TEST_CASE("verbs_provider fault: an error completion fails the gate naming its status") {
  Provider p("rc");
  RankSetup s = rdma_setup();
  s.worker_tweak = [](ds4tp_options &o) { o.gate_timeout_ms = 5000; };
  without_failover(s);
  // The leader's 20th send completes with IBV_WC_RETRY_EXC_ERR.
  expect_failure(s, At::Gates, DS4TP_EIO, "transport retry counter exceeded", "wc=12@20", 0, 0);
}

TEST_CASE("verbs_provider fault: a DOWN port refuses rdma on both ranks naming the state") {
  Provider p("rc", "port_down");
  RankSetup s = rdma_setup();
  expect_failure(s, At::Connect, DS4TP_EUNSUPPORTED, "fv0 port 1 is DOWN");
}

TEST_CASE("verbs_provider fault: no IPv4-mapped GID pairs on the link-local one") {
  Provider p("rc", "no_ipv4_gid");
  RankSetup s = rdma_setup();
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = attach_rdma(tp)) return rc;
    Seqs q;
    return rows_and_batches(tp, 2, q);
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
  CHECK(logged("fv0 port 1 GID 0 (RoCE v1)"));
}

TEST_CASE("verbs_provider fault: no GID at all refuses rdma naming the empty table") {
  Provider p("rc", "no_gid");
  RankSetup s = rdma_setup();
  expect_failure(s, At::Connect, DS4TP_EUNSUPPORTED, "has no usable GID");
}

TEST_CASE("verbs_provider probe: device, port and GID choices and refusals are named") {
  namespace rd = ds4tp::rdma;
  struct Case {
    const char *fault;
    const char *device;
    int port, gid_index;
    bool usable;
    const char *text;
  };
  const Case cases[] = {
      {nullptr, "", 1, -1, true, "fv0 port 1 GID 1 (RoCE v2)"},
      {nullptr, "fv0", 1, 0, true, "fv0 port 1 GID 0 (RoCE v1)"},
      {nullptr, "fv2", 1, -1, true, "fv2 port 1 GID 1 (RoCE v2)"},
      {nullptr, "", 1, 5, false, "fv0 port 1 has GID indices 0..1, not 5"},
      {"no_ipv4_gid", "", 1, 1, false, "fv0 port 1 GID index 1 is empty"},
      {nullptr, "mlx5_9", 1, -1, false, "RDMA device 'mlx5_9' not found (devices here: fv0, fv1, fv2)"},
      {nullptr, "", 2, -1, false, "fv0 has ports 1..1, not port 2"},
      {"fail=devices", "", 1, -1, false, "Function not implemented"},
      {"fail=open", "", 1, -1, false, "fv0: cannot open"},
      {"fail=query_device", "", 1, -1, false, "querying the device failed: Input/output error"},
  };
  for (const Case &c : cases) {
    ScopedEnv f("DS4TP_VERBS_PROVIDER_FAULT", c.fault);
    rd::ProbeRequest req;
    req.library = DS4TP_TEST_VERBS_PROVIDER;
    req.device = c.device;
    req.port = c.port;
    req.gid_index = c.gid_index;
    rd::ProbeResult r = rd::probe(req);
    INFO(r.reason);
    CHECK(r.usable == c.usable);
    CHECK(r.reason.find(c.text) != std::string::npos);
  }
  // Apple-style library: exported data path, no _ibv_query_gid_ex, no
  // sysfs GID types: the GID type is unknown and the first GID is taken.
  rd::ProbeRequest req;
  req.library = DS4TP_TEST_VERBS_PROVIDER_APPLE;
  rd::ProbeResult r = rd::probe(req);
  INFO(r.reason);
  CHECK(r.usable);
  CHECK(r.reason == "fv0 port 1 GID 0 (unknown type)");
}

TEST_CASE("verbs_provider fault: a failing verbs call ends bring-up naming the step") {
  struct Case {
    const char *fault;
    At at;
    const char *text;
  };
  const Case cases[] = {
      {"fail=pd", At::Connect, "allocating a protection domain on fv0"},
      {"fail=mr", At::Attach, "ulimit -l"},
      {"fail=cq", At::Attach, "creating a queue pair on fv0"},
      {"fail=qp", At::Attach, "creating a queue pair on fv0"},
      {"fail=init", At::Attach, "to INIT failed"},
      {"fail=rtr", At::Attach, "to RTR failed"},
      {"fail=rts", At::Attach, "to RTS failed"},
  };
  for (const Case &c : cases) {
    Provider p("rc", c.fault);
    RankSetup s = rdma_setup();
    INFO(c.fault);
    expect_failure(s, c.at, DS4TP_EIO, c.text);
  }
}
