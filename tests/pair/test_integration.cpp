// Engine integration: gate callbacks, staging hooks, the gate service.
// Two real processes; every data-moving case runs over each local
// transport. Worker bodies return codes (no Catch macros there).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <dirent.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include "service/gate_service.hpp"
#include "support/ranks.hpp"

using namespace ds4tp::test;

namespace {

// True when a thread of this process carries `name` (Linux: its comm);
// true where the OS cannot say.
bool has_thread_named(const std::string &name) {
#if defined(__linux__)
  DIR *d = opendir("/proc/self/task");
  if (d == nullptr) return false;
  bool found = false;
  while (dirent *e = readdir(d)) {
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string comm;
    if (e->d_name[0] != '.' && std::getline(f, comm) && comm == name) found = true;
  }
  closedir(d);
  return found;
#else
  (void)name;
  return true;
#endif
}

uint8_t *slab(ds4tp_pair *tp) { return static_cast<uint8_t *>(ds4tp_slab_base(tp)); }

// The words a kernel touches, accessed as a kernel would: plain u64 in
// the slab, with acquire/release ordering.
struct Words {
  uint8_t *base;
  ds4tp_slab_layout l;
  uint64_t *ready(uint32_t slot) const {
    return reinterpret_cast<uint64_t *>(base + l.gpu_flags_offset + slot * l.flag_stride);
  }
  uint64_t *release(uint32_t slot) const {
    return reinterpret_cast<uint64_t *>(base + l.gpu_release_offset + slot * l.flag_stride);
  }
  float *out(uint32_t slot) const {
    return reinterpret_cast<float *>(base + l.out_offset + slot * l.slot_stride);
  }
  float *in(uint32_t slot) const {
    return reinterpret_cast<float *>(base + l.in_offset + slot * l.slot_stride);
  }
};

Words words_of(ds4tp_pair *tp) { return Words{slab(tp), layout_of(tp)}; }

// A CPU "kernel" at a gate: publish arrival, wait for the release.
// Returns the release word's value (seq, or the poison), or 0 when
// nothing came within `limit_ms`.
uint64_t kernel_gate(const Words &w, uint32_t slot, uint64_t seq, int limit_ms = 20000) {
  __atomic_store_n(w.ready(slot), seq, __ATOMIC_RELEASE);
  auto t0 = Clock::now();
  for (unsigned spins = 0;; spins++) {
    uint64_t v = __atomic_load_n(w.release(slot), __ATOMIC_ACQUIRE);
    if (v >= seq) return v;
    if (spins > 1000) sched_yield();
    if ((spins & 0xfff) == 0 && ms_since(t0) > limit_ms) return 0;
  }
}

// Runs `tokens` tokens of every row gate through the service from a
// kernel thread, checking every peer partial bit for bit. Returns 0 or a
// nonzero code. `seq` is the last row gate seq before, updated.
int kernel_tokens(ds4tp_pair *tp, int tokens, uint64_t &seq) {
  const int rank = ds4tp_rank(tp);
  const Words w = words_of(tp);
  const uint32_t slots = w.l.slots;
  const uint64_t floats = w.l.vec_bytes / 4;
  const uint64_t target = seq + uint64_t(tokens) * slots;
  int code = 0;
  auto run_kernel = [&]() -> int {
    for (int t = 0; t < tokens; t++) {
      for (uint32_t slot = 0; slot < slots; slot++) {
        ++seq;
        float *out = w.out(slot);
        for (uint64_t i = 0; i < floats; i++) out[i] = pattern(rank, seq, slot * 100000 + i);
        uint64_t v = kernel_gate(w, slot, seq);
        CHILD_EXPECT(v == seq, tp, "kernel at slot %u got release %s%llu", slot,
                     v == DS4TP_GATE_POISON ? "POISON " : "", (unsigned long long)v);
        const float *in = w.in(slot);
        for (uint64_t i = 0; i < floats; i++) {
          float want = pattern(1 - rank, seq, slot * 100000 + i);
          CHILD_EXPECT(std::memcmp(&in[i], &want, 4) == 0, tp, "seq %llu float %llu",
                       (unsigned long long)seq, (unsigned long long)i);
        }
      }
    }
    return 0;
  };
  std::thread kernel([&] { code = run_kernel(); });
  // The host side meanwhile: queries are safe from any thread.
  while (ds4tp_gate_seq(tp) < target && ds4tp_gate_service_state(tp) == DS4TP_SERVICE_RUNNING)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  kernel.join();
  return code;
}

}  // namespace

TEST_CASE("gate callbacks are registered as function pointers and return 1 on success") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    // What a GPU backend holds: function pointers and one user-data word.
    struct {
      ds4tp_gate_fn row;
      ds4tp_batch_gate_fn batch;
      ds4tp_big_gate_fn big;
      void *ud;
    } machinery = {ds4tp_gate_callback, ds4tp_batch_gate_callback, ds4tp_big_gate_callback, tp};
    const int rank = ds4tp_rank(tp);
    const Words w = words_of(tp);
    const uint64_t floats = w.l.vec_bytes / 4;
    uint64_t seq = 0;
    for (int t = 0; t < 2; t++) {
      for (uint32_t slot = 0; slot < w.l.slots; slot++) {
        ++seq;
        for (uint64_t i = 0; i < floats; i++) w.out(slot)[i] = pattern(rank, seq, i);
        CHILD_EXPECT(machinery.row(machinery.ud, slot / 2, slot % 2, seq) == 1, tp, "row callback");
        for (uint64_t i = 0; i < floats; i++) {
          float want = pattern(1 - rank, seq, i);
          CHILD_EXPECT(std::memcmp(&w.in(slot)[i], &want, 4) == 0, tp);
        }
      }
    }
    // Batch: 5 rows of batch gate 3.
    auto *bout = reinterpret_cast<float *>(w.base + ds4tp_slab_batch_out_offset(tp, 3));
    auto *bin = reinterpret_cast<float *>(w.base + ds4tp_slab_batch_in_offset(tp, 3));
    const uint64_t rstride = w.l.vec_stride / 4;
    for (uint32_t r = 0; r < 5; r++)
      for (uint64_t i = 0; i < floats; i++)
        bout[r * rstride + i] = pattern(rank, 777, r * 7919 + i);
    CHILD_EXPECT(machinery.batch(machinery.ud, 3, 5, 1) == 1, tp, "batch callback");
    for (uint32_t r = 0; r < 5; r++)
      for (uint64_t i = 0; i < floats; i++) {
        float want = pattern(1 - rank, 777, r * 7919 + i);
        CHILD_EXPECT(std::memcmp(&bin[r * rstride + i], &want, 4) == 0, tp);
      }
    // Big: any memory.
    std::vector<float> bigo(10000), bigi(10000);
    for (size_t i = 0; i < bigo.size(); i++) bigo[i] = pattern(rank, 999, i);
    CHILD_EXPECT(machinery.big(machinery.ud, 1, 1, bigo.data(), bigi.data(), bigo.size() * 4) == 1,
                 tp, "big callback");
    for (size_t i = 0; i < bigi.size(); i++) {
      float want = pattern(1 - rank, 999, i);
      CHILD_EXPECT(std::memcmp(&bigi[i], &want, 4) == 0, tp);
    }
    // (No ds4tp_failed check after the last exchange: the peer may be gone
    // by then, and its liveness watcher rightly fails this pair.)
    CHILD_EXPECT(ds4tp_gate_seq(tp) == seq, tp);
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("a failing gate callback returns 0 and leaves the pair failed") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  s.gate_timeout_ms = 2000;
  Hold worker_attached;
  auto leader = [&](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    CHILD_EXPECT(worker_attached.wait(15000), tp);
    // A caller mistake (seq 5 first) is a plain EINVAL for a call, but a
    // callback's 0 always means "this pair is failed".
    CHILD_EXPECT(ds4tp_gate_exchange(tp, 0, 0, 5) == DS4TP_EINVAL && !ds4tp_failed(tp), tp);
    CHILD_EXPECT(ds4tp_gate_callback(tp, 0, 0, 5) == 0, tp);
    CHILD_EXPECT(ds4tp_failed(tp), tp);
    std::string m = ds4tp_errmsg(tp);
    CHILD_EXPECT(m.find("seq 5") != std::string::npos, tp);
    CHILD_EXPECT(ds4tp_gate_callback(tp, 0, 0, 1) == 0, tp);  // refused: failed earlier
    CHILD_EXPECT_RC(ds4tp_gate_exchange(tp, 0, 0, 1), DS4TP_EFAILED, tp);
    CHILD_EXPECT(ds4tp_batch_gate_callback(tp, 0, 1, 1) == 0, tp);
    return 0;  // the pair is freed: the worker's gate sees the peer go
  };
  auto worker = [&](ds4tp_pair *tp, Ctx &) -> int {
    int rc = connect_attach(tp);
    worker_attached.done();
    if (rc) return rc;
    CHILD_EXPECT(ds4tp_gate_callback(tp, 0, 0, 1) == 0, tp);
    CHILD_EXPECT(ds4tp_failed(tp), tp);
    return std::string(ds4tp_errmsg(tp)).empty() ? 42 : 0;
  };
  Outcome o = run_pair(s, leader, worker);
  REQUIRE_RANKS_OK(o);
  // NULL user data: 0, and the thread's message says why.
  REQUIRE(ds4tp_gate_callback(nullptr, 0, 0, 1) == 0);
  REQUIRE_THAT(std::string(ds4tp_last_error()), Catch::Contains("NULL"));
  REQUIRE(ds4tp_batch_gate_callback(nullptr, 0, 1, 1) == 0);
  REQUIRE(ds4tp_big_gate_callback(nullptr, 0, 1, "a", (void *)"b", 1) == 0);
}

namespace {

// A fake device: partials live in engine memory the transport never sees;
// the hooks stage them through the slab and record every call.
struct FakeDevice {
  ds4tp_pair *tp = nullptr;
  uint8_t *slab = nullptr;
  ds4tp_slab_layout l{};
  std::vector<float> out, in;  // slots * floats each
  std::vector<float> bout, bin;  // batch rows, packed (no stride)
  int before = 0, after = 0, bad = 0;
  uint64_t last_seq = 0;
  int fail_before_at = 0, fail_after_at = 0;  // seq at which a hook fails
  uint64_t floats() const { return l.vec_bytes / 4; }
};

int before_hook(void *ud, int kind, uint32_t a, uint32_t b, uint64_t seq, void *slab_out,
                uint64_t bytes) {
  auto *d = static_cast<FakeDevice *>(ud);
  d->before++;
  if (d->fail_before_at && seq == uint64_t(d->fail_before_at) && kind == DS4TP_STAGE_ROW) return -7;
  if (kind == DS4TP_STAGE_ROW) {
    if (slab_out != d->slab + ds4tp_slab_out_offset(d->tp, a, b) || bytes != d->l.vec_bytes) d->bad++;
    if (seq != d->last_seq + 1) d->bad++;
    d->last_seq = seq;
    std::memcpy(slab_out, &d->out[(a * 2 + b) * d->floats()], bytes);
  } else if (kind == DS4TP_STAGE_BATCH) {
    if (slab_out != d->slab + ds4tp_slab_batch_out_offset(d->tp, a) ||
        bytes != (b - 1) * d->l.vec_stride + d->l.vec_bytes)
      d->bad++;
    for (uint32_t r = 0; r < b; r++)
      std::memcpy(static_cast<uint8_t *>(slab_out) + r * d->l.vec_stride,
                  &d->bout[r * d->floats()], d->l.vec_bytes);
  } else {
    d->bad++;
  }
  return 0;
}

int after_hook(void *ud, int kind, uint32_t a, uint32_t b, uint64_t seq, const void *slab_in,
               uint64_t bytes) {
  auto *d = static_cast<FakeDevice *>(ud);
  d->after++;
  if (d->fail_after_at && seq == uint64_t(d->fail_after_at) && kind == DS4TP_STAGE_ROW) return 9;
  if (kind == DS4TP_STAGE_ROW) {
    if (slab_in != d->slab + ds4tp_slab_in_offset(d->tp, a, b) || bytes != d->l.vec_bytes ||
        seq != d->last_seq)
      d->bad++;
    std::memcpy(&d->in[(a * 2 + b) * d->floats()], slab_in, bytes);
  } else if (kind == DS4TP_STAGE_BATCH) {
    if (slab_in != d->slab + ds4tp_slab_batch_in_offset(d->tp, a)) d->bad++;
    for (uint32_t r = 0; r < b; r++)
      std::memcpy(&d->bin[r * d->floats()],
                  static_cast<const uint8_t *>(slab_in) + r * d->l.vec_stride, d->l.vec_bytes);
  } else {
    d->bad++;
  }
  return 0;
}

int install_hooks(ds4tp_pair *tp, FakeDevice &d) {
  d.tp = tp;
  d.slab = slab(tp);
  d.l = layout_of(tp);
  d.out.assign(d.l.slots * d.floats(), 0.0f);
  d.in.assign(d.l.slots * d.floats(), 0.0f);
  d.bout.assign(8 * d.floats(), 0.0f);
  d.bin.assign(8 * d.floats(), 0.0f);
  ds4tp_staging_hooks h;
  std::memset(&h, 0, sizeof h);
  h.size = sizeof h;
  h.user_data = &d;
  h.before_exchange = before_hook;
  h.after_exchange = after_hook;
  return ds4tp_set_staging_hooks(tp, &h);
}

}  // namespace

TEST_CASE("staging hooks copy through the slab around every gate, bit-exact") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  auto body = [](ds4tp_pair *tp, Ctx &) -> int {
    int rc = connect_attach(tp);
    if (rc) return rc;
    ds4tp_staging_hooks bad;
    std::memset(&bad, 0, sizeof bad);
    CHILD_EXPECT_RC(ds4tp_set_staging_hooks(tp, &bad), DS4TP_EINVAL, tp);  // size 0
    FakeDevice d;
    CHILD_EXPECT_OK(install_hooks(tp, d), tp, "hooks");
    const int rank = ds4tp_rank(tp);
    const uint64_t n = d.floats();
    uint64_t seq = 0;
    int gates = 0;
    for (int t = 0; t < 3; t++) {
      for (uint32_t slot = 0; slot < d.l.slots; slot++) {
        ++seq;
        // The engine writes only its device buffer, never the slab.
        for (uint64_t i = 0; i < n; i++) d.out[slot * n + i] = pattern(rank, seq, i);
        rc = ds4tp_gate_exchange(tp, slot / 2, slot % 2, seq);
        CHILD_EXPECT_OK(rc, tp, "gate");
        gates++;
        for (uint64_t i = 0; i < n; i++) {
          float want = pattern(1 - rank, seq, i);
          CHILD_EXPECT(std::memcmp(&d.in[slot * n + i], &want, 4) == 0, tp);
        }
      }
    }
    for (uint32_t r = 0; r < 4; r++)
      for (uint64_t i = 0; i < n; i++) d.bout[r * n + i] = pattern(rank, 4242, r * 31 + i);
    rc = ds4tp_batch_gate_exchange(tp, 5, 4, 1);
    CHILD_EXPECT_OK(rc, tp, "batch");
    for (uint32_t r = 0; r < 4; r++)
      for (uint64_t i = 0; i < n; i++) {
        float want = pattern(1 - rank, 4242, r * 31 + i);
        CHILD_EXPECT(std::memcmp(&d.bin[r * n + i], &want, 4) == 0, tp);
      }
    // Too late to change them now.
    CHILD_EXPECT_RC(ds4tp_set_staging_hooks(tp, nullptr), DS4TP_ESTATE, tp);
    CHILD_EXPECT(!ds4tp_failed(tp), tp);
    // Big gates take caller buffers: no hook calls. (The last exchange.)
    char bo[64] = {char(rank)}, bi[64] = {};
    rc = ds4tp_big_gate_exchange(tp, 0, 1, bo, bi, sizeof bo);
    CHILD_EXPECT_OK(rc, tp, "big");
    CHILD_EXPECT(!d.bad, tp);
    CHILD_EXPECT(d.before == gates + 1 && d.after == gates + 1, tp);
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("a failing staging hook fails the gate with EIO naming the hook and value") {
  RankSetup s;
  s.gate_timeout_ms = 2000;
  auto run = [](ds4tp_pair *tp, bool fail_before) -> int {
    int rc = connect_attach(tp);
    if (rc) return rc;
    FakeDevice d;
    if (fail_before) d.fail_before_at = 3;
    else d.fail_after_at = 2;
    CHILD_EXPECT_OK(install_hooks(tp, d), tp, "hooks");
    for (uint64_t seq = 1; seq <= 4; seq++) {
      rc = ds4tp_gate_exchange(tp, uint32_t((seq - 1) / 2), uint32_t((seq - 1) % 2), seq);
      if (rc == DS4TP_OK) continue;
      std::string m = ds4tp_errmsg(tp);
      CHILD_EXPECT_RC(rc, DS4TP_EIO, tp, "at seq %llu", (unsigned long long)seq);
      CHILD_EXPECT(ds4tp_failed(tp), tp);
      if (fail_before) {
        CHILD_EXPECT(seq == 3 && d.after == 2, tp, "seq %llu, %d after-hook calls",
                     (unsigned long long)seq, d.after);
        CHILD_EXPECT(m.find("before_exchange returned -7") != std::string::npos &&
                         m.find("seq 3") != std::string::npos,
                     tp);
      } else {
        CHILD_EXPECT(seq == 2, tp, "seq %llu", (unsigned long long)seq);
        CHILD_EXPECT(m.find("after_exchange returned 9") != std::string::npos, tp);
      }
      return 0;
    }
    CHILD_EXPECT(false, tp, "every gate succeeded; the %s hook should have failed one",
                 fail_before ? "before" : "after");
    return 0;
  };
  // One rank's before-hook fails at seq 3 (before any traffic), or its
  // after-hook at seq 2 (after the exchange succeeded); the peer only
  // gates until the failing rank goes away.
  auto before_fails = [&](ds4tp_pair *tp, Ctx &) -> int { return run(tp, true); };
  auto after_fails = [&](ds4tp_pair *tp, Ctx &) -> int { return run(tp, false); };
  auto plain = [](ds4tp_pair *tp, Ctx &) -> int {
    if (int rc = connect_attach(tp)) return rc;
    for (uint64_t seq = 1; seq <= 4; seq++)
      if (ds4tp_gate_exchange(tp, uint32_t((seq - 1) / 2), uint32_t((seq - 1) % 2), seq)) break;
    return 0;
  };
  Outcome o = run_pair(s, before_fails, plain);
  REQUIRE_RANKS_OK(o);
  o = run_pair(s, plain, after_fails);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("gate service: CPU kernel threads drive the gates, stop and start again") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  auto main_body = [](ds4tp_pair *tp, Ctx &) -> int {
    int rc = connect_attach(tp);
    if (rc) return rc;
    ds4tp_gate_service_options o = test_service_options();
    ds4tp_gate_service_options bad = o;
    bad.cpu = 1 << 20;
    CHILD_EXPECT_RC(ds4tp_gate_service_start(tp, &bad), DS4TP_EINVAL, tp);
    CHILD_EXPECT(std::string(ds4tp_errmsg(tp)).find("affinity") != std::string::npos, tp);
    rc = ds4tp_gate_service_start(tp, &o);
    CHILD_EXPECT_OK(rc, tp, "service start");
    CHILD_EXPECT(ds4tp_gate_service_state(tp) == DS4TP_SERVICE_RUNNING, tp);
    CHILD_EXPECT_RC(ds4tp_gate_service_start(tp, &o), DS4TP_ESTATE, tp);
    CHILD_EXPECT_RC(ds4tp_gate_exchange(tp, 0, 0, 1), DS4TP_ESTATE, tp);
    CHILD_EXPECT_RC(ds4tp_big_gate_exchange(tp, 0, 1, "a", (void *)"b", 1), DS4TP_ESTATE, tp);
    FakeDevice d;
    CHILD_EXPECT_RC(install_hooks(tp, d), DS4TP_ESTATE, tp);
    CHILD_EXPECT(!ds4tp_failed(tp), tp);
    uint64_t seq = 0;
    rc = kernel_tokens(tp, 3, seq);
    if (rc) return rc;
    CHILD_EXPECT(ds4tp_gate_seq(tp) == seq, tp);
    CHILD_EXPECT(has_thread_named("ds4tp-svc"), tp);
    rc = ds4tp_gate_service_stop(tp);
    CHILD_EXPECT_OK(rc, tp, "service stop");
    CHILD_EXPECT(ds4tp_gate_service_state(tp) == DS4TP_SERVICE_STOPPED, tp);
    CHILD_EXPECT_OK(ds4tp_gate_service_stop(tp), tp);  // idempotent
    // Stopped: the engine calls gates itself, the seq count continues.
    const Words w = words_of(tp);
    const int rank = ds4tp_rank(tp);
    for (uint32_t slot = 0; slot < w.l.slots; slot++) {
      ++seq;
      for (uint64_t i = 0; i < w.l.vec_bytes / 4; i++) w.out(slot)[i] = pattern(rank, seq, i);
      rc = ds4tp_gate_exchange(tp, slot / 2, slot % 2, seq);
      CHILD_EXPECT_OK(rc, tp, "direct gate");
      float want = pattern(1 - rank, seq, 0);
      CHILD_EXPECT(std::memcmp(&w.in(slot)[0], &want, 4) == 0, tp);
    }
    rc = ds4tp_batch_gate_exchange(tp, 0, 2, 1);
    CHILD_EXPECT_OK(rc, tp, "batch while stopped");
    // And the service again, picking up at the next seq.
    rc = ds4tp_gate_service_start(tp, &o);
    CHILD_EXPECT_OK(rc, tp, "service restart");
    rc = kernel_tokens(tp, 2, seq);
    if (rc) return rc;
    rc = ds4tp_gate_service_stop(tp);
    CHILD_EXPECT_OK(rc, tp, "service stop 2");
    CHILD_EXPECT(!ds4tp_failed(tp) && ds4tp_gate_seq(tp) == seq, tp);
    return final_barrier(tp);
  };
  Outcome o = run_pair(s, main_body, main_body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("gate service: detaching the slab stops it and poisons the release words") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  Hold leader_ran, worker_ran;
  auto body = [&](ds4tp_pair *tp, Ctx &c) -> int {
    int rc = ds4tp_connect(tp);
    CHILD_EXPECT_OK(rc, tp, "connect");
    // Engine-owned slab memory, readable after the detach.
    const uint64_t bytes = ds4tp_slab_bytes(tp);
    void *mem = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    CHILD_EXPECT(mem != nullptr, tp);
    std::memset(mem, 0, bytes);
    struct Free {  // detach before the memory goes, on every path
      ds4tp_pair *tp;
      void *p;
      ~Free() {
        ds4tp_detach_slab(tp);
        std::free(p);
      }
    } owned{tp, mem};
    rc = ds4tp_attach_slab(tp, mem, bytes);
    CHILD_EXPECT_OK(rc, tp, "attach");
    ds4tp_gate_service_options o = test_service_options();
    rc = ds4tp_gate_service_start(tp, &o);
    CHILD_EXPECT_OK(rc, tp, "service start");
    uint64_t seq = 0;
    rc = kernel_tokens(tp, 1, seq);
    // Both kernels saw their last release before either rank detaches
    // (a pair that fails poisons even a release its kernel has not read).
    (c.rank == 0 ? leader_ran : worker_ran).done();
    CHILD_EXPECT((c.rank == 0 ? worker_ran : leader_ran).wait(15000), tp);
    if (rc) return rc;
    const Words w{static_cast<uint8_t *>(mem), layout_of(tp)};
    ds4tp_detach_slab(tp);  // the service is still running here
    CHILD_EXPECT(ds4tp_gate_service_state(tp) != DS4TP_SERVICE_RUNNING, tp);
    for (uint32_t slot = 0; slot < w.l.slots; slot++)
      CHILD_EXPECT(__atomic_load_n(w.release(slot), __ATOMIC_ACQUIRE) == DS4TP_GATE_POISON, tp);
    CHILD_EXPECT(ds4tp_slab_base(tp) == nullptr, tp);
    rc = ds4tp_gate_service_start(tp, &o);
    CHILD_EXPECT(rc == DS4TP_ESTATE || rc == DS4TP_EFAILED, tp);
    return 0;
  };
  Outcome o = run_pair(s, body, body);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("gate service: a killed peer poisons every waiting kernel within the deadline") {
  int transport = GENERATE(from_range(local_transports()));
  RankSetup s;
  s.transport = transport;
  s.gate_timeout_ms = 1500;
  auto worker = [](ds4tp_pair *tp, Ctx &) -> int {
    int rc = connect_attach(tp);
    if (rc) return rc;
    ds4tp_gate_service_options o = test_service_options();
    rc = ds4tp_gate_service_start(tp, &o);
    CHILD_EXPECT_OK(rc, tp, "service start");
    uint64_t seq = 0;
    rc = kernel_tokens(tp, 1, seq);
    if (rc) return rc;
    pause();  // the leader kills us here
    return 0;
  };
  auto leader = [](ds4tp_pair *tp, Ctx &c) -> int {
    int rc = connect_attach(tp);
    if (rc) return rc;
    ds4tp_gate_service_options o = test_service_options();
    rc = ds4tp_gate_service_start(tp, &o);
    CHILD_EXPECT_OK(rc, tp, "service start");
    uint64_t seq = 0;
    rc = kernel_tokens(tp, 1, seq);
    if (rc) return rc;
    kill(c.worker_pid, SIGKILL);
    const Words w = words_of(tp);
    auto t0 = Clock::now();
    uint64_t v = kernel_gate(w, 0, seq + 1);  // the next gate: never served
    double took = ms_since(t0);
    CHILD_EXPECT(v == DS4TP_GATE_POISON, tp);
    CHILD_EXPECT(took <= 1500 + 3000, tp, "took %.0f ms", took);  // the gate deadline plus slack
    // Once the service has ended FAILED, every release word is poisoned, so
    // a kernel arriving later gives up at once. (Our own word can be
    // poisoned before the service has finished the others.)
    auto deadline = Clock::now() + std::chrono::seconds(5);
    while (ds4tp_gate_service_state(tp) != DS4TP_SERVICE_FAILED && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHILD_EXPECT(ds4tp_gate_service_state(tp) == DS4TP_SERVICE_FAILED, tp);
    for (uint32_t slot = 0; slot < w.l.slots; slot++)
      CHILD_EXPECT(__atomic_load_n(w.release(slot), __ATOMIC_ACQUIRE) == DS4TP_GATE_POISON, tp);
    CHILD_EXPECT(ds4tp_failed(tp), tp);
    // The service's own error, or the liveness watcher's if it saw the
    // death first: either way a message.
    CHILD_EXPECT(!std::string(ds4tp_errmsg(tp)).empty(), tp);
    CHILD_EXPECT_OK(ds4tp_gate_service_stop(tp), tp);
    CHILD_EXPECT(ds4tp_gate_service_state(tp) == DS4TP_SERVICE_FAILED, tp);
    CHILD_EXPECT_RC(ds4tp_gate_service_start(tp, &o), DS4TP_EFAILED, tp);
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  INFO(o.describe());
  REQUIRE(o.leader == 0);
  REQUIRE(o.worker_signal == SIGKILL);
}

TEST_CASE("gate service: ds4tp_mark_failed from the engine poisons and stops it") {
  RankSetup s;
  Hold worker_checked;
  auto leader = [&](ds4tp_pair *tp, Ctx &) -> int {
    int rc = connect_attach(tp);
    if (rc) return rc;
    // Keep this pair alive until the worker has checked its own.
    struct Wait {
      const Hold &h;
      ~Wait() { h.wait(15000); }
    } keep{worker_checked};
    ds4tp_gate_service_options o = test_service_options();
    o.yield_us = 0;  // straight to the sleep phase: the idle path notices too
    rc = ds4tp_gate_service_start(tp, &o);
    CHILD_EXPECT_OK(rc, tp, "service start");
    std::thread engine([tp] { ds4tp_mark_failed(tp, "GPU fault at layer 3"); });
    engine.join();
    const Words w = words_of(tp);
    CHILD_EXPECT(kernel_gate(w, 0, 1, 5000) == DS4TP_GATE_POISON, tp);
    auto deadline = Clock::now() + std::chrono::seconds(5);
    while (ds4tp_gate_service_state(tp) != DS4TP_SERVICE_FAILED && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHILD_EXPECT(ds4tp_gate_service_state(tp) == DS4TP_SERVICE_FAILED, tp);
    CHILD_EXPECT(std::string(ds4tp_errmsg(tp)).find("GPU fault at layer 3") != std::string::npos,
                 tp);
    CHILD_EXPECT(ds4tp_gate_seq(tp) == 0, tp);  // no exchange ran after the failure
    return 0;
  };
  auto worker = [&](ds4tp_pair *tp, Ctx &) -> int {
    struct Signal {
      const Hold &h;
      ~Signal() { h.done(); }
    } checked{worker_checked};
    int rc = connect_attach(tp);
    if (rc) return rc;
    ds4tp_gate_service_options o = test_service_options();
    rc = ds4tp_gate_service_start(tp, &o);
    CHILD_EXPECT_OK(rc, tp, "service start");
    usleep(100000);
    // Idle (no kernel at a gate): a plain stop, nothing failed here.
    rc = ds4tp_gate_service_stop(tp);
    CHILD_EXPECT_OK(rc, tp, "service stop");
    CHILD_EXPECT(ds4tp_gate_service_state(tp) == DS4TP_SERVICE_STOPPED && !ds4tp_failed(tp), tp);
    return 0;
  };
  Outcome o = run_pair(s, leader, worker);
  REQUIRE_RANKS_OK(o);
}

TEST_CASE("gate service: a ready word that contradicts the schedule fails loudly") {
  RankSetup s;
  // The worker outlives the leader's checks: its exit would fail the
  // leader's pair (liveness) before the service finds the real problem.
  struct Signal {
    const Hold &h;
    ~Signal() { h.done(); }
  };
  auto idle_worker = [](const Hold &attached, const Hold &leader_checked) {
    return [&attached, &leader_checked](ds4tp_pair *tp, Ctx &) -> int {
      int rc = connect_attach(tp);
      attached.done();
      leader_checked.wait(15000);
      return rc;
    };
  };
  // A leader whose "kernel" waits at `slot` with `seq`, which the schedule
  // contradicts: the service poisons it and its message names `a` and `b`.
  auto contradicted_leader = [](const Hold &attached, const Hold &checked, uint32_t slot,
                                uint64_t seq, const char *a, const char *b) {
    return [=, &attached, &checked](ds4tp_pair *tp, Ctx &) -> int {
      Signal sig{checked};
      if (int rc = connect_attach(tp)) return rc;
      CHILD_EXPECT(attached.wait(15000), tp);
      ds4tp_gate_service_options o = test_service_options();
      CHILD_EXPECT_OK(ds4tp_gate_service_start(tp, &o), tp, "service start");
      const Words w = words_of(tp);
      CHILD_EXPECT(kernel_gate(w, slot, seq, 5000) == DS4TP_GATE_POISON, tp);
      std::string m = ds4tp_errmsg(tp);
      CHILD_EXPECT(m.find(a) != std::string::npos && m.find(b) != std::string::npos, tp,
                   "wanted \"%s\" and \"%s\"", a, b);
      CHILD_EXPECT(ds4tp_gate_service_state(tp) == DS4TP_SERVICE_FAILED, tp);
      return 0;
    };
  };
  Hold first, second, first_attached, second_attached;
  // seq 1 belongs to slot 0 (layer 0 ATTN); the "kernel" waits at slot 3.
  Outcome o = run_pair(s,
                       contradicted_leader(first_attached, first, 3, 1, "slot 3 (layer 1, gate 1)",
                                           "slot 0 (layer 0, gate 0)"),
                       idle_worker(first_attached, first));
  REQUIRE_RANKS_OK(o);
  // Right slot, but a seq from the future.
  o = run_pair(s, contradicted_leader(second_attached, second, 0, 9, "holds seq 9", "seq 1"),
               idle_worker(second_attached, second));
  REQUIRE_RANKS_OK(o);
}

TEST_CASE(
    "gate service and staging hooks: option defaults, and bad arguments or states refused without "
    "failing the pair") {
  ds4tp_gate_service_options d;
  ds4tp_gate_service_options_init(&d);
  REQUIRE(d.size == sizeof d);
  REQUIRE(d.spin_us == DS4TP_SPIN_ADAPTIVE);
  REQUIRE(d.cpu == -1);
  REQUIRE(ds4tp_gate_service_start(nullptr, nullptr) == DS4TP_EINVAL);
  REQUIRE(ds4tp_gate_service_stop(nullptr) == DS4TP_EINVAL);
  REQUIRE(ds4tp_gate_service_state(nullptr) == DS4TP_SERVICE_STOPPED);
  REQUIRE(ds4tp_gate_seq(nullptr) == 0);
  REQUIRE(ds4tp_set_staging_hooks(nullptr, nullptr) == DS4TP_EINVAL);

  ds4tp_options o;
  ds4tp_options_init(&o);
  o.role = DS4TP_ROLE_LEADER;
  o.log_level = DS4TP_LOG_ERROR;
  ds4tp_identity id = small_identity();
  ds4tp_pair *p = nullptr;
  REQUIRE(ds4tp_new(&p, &o, &id) == DS4TP_OK);
  REQUIRE(ds4tp_gate_service_start(p, nullptr) == DS4TP_ESTATE);
  REQUIRE_THAT(std::string(ds4tp_errmsg(p)), Catch::Contains("ds4tp_attach_slab"));
  struct {
    const char *expect;
    void (*change)(ds4tp_gate_service_options &);
  } cases[] = {
      {"size", [](ds4tp_gate_service_options &x) { x.size = 0; }},
      {"spin_us", [](ds4tp_gate_service_options &x) { x.spin_us = -2; }},
      {"yield_us", [](ds4tp_gate_service_options &x) { x.yield_us = 20000000; }},
      {"sleep_us", [](ds4tp_gate_service_options &x) { x.sleep_us = 0; }},
      {"stop_timeout_ms", [](ds4tp_gate_service_options &x) { x.stop_timeout_ms = -1; }},
      {"cpu", [](ds4tp_gate_service_options &x) { x.cpu = -2; }},
  };
  for (auto &c : cases) {
    ds4tp_gate_service_options x = d;
    c.change(x);
    INFO(c.expect);
    REQUIRE(ds4tp_gate_service_start(p, &x) == DS4TP_EINVAL);
    REQUIRE_THAT(std::string(ds4tp_errmsg(p)), Catch::Contains(c.expect));
  }
  REQUIRE(ds4tp_gate_service_stop(p) == DS4TP_OK);  // none running
  REQUIRE(ds4tp_set_staging_hooks(p, nullptr) == DS4TP_OK);
  REQUIRE(ds4tp_failed(p) == 0);
  ds4tp_free(p);

  // The slab layout reports the release words, apart from everything else.
  ds4tp_slab_layout l{};
  l.size = sizeof l;
  REQUIRE(ds4tp_slab_layout_compute(&id, &l) == DS4TP_OK);
  REQUIRE(l.gpu_release_offset >= l.gpu_flags_offset + l.slots * l.flag_stride);
  REQUIRE(l.gpu_release_offset % 4096 == 0);
  REQUIRE(l.gpu_release_offset + l.slots * l.flag_stride <= l.total_bytes);
}

// Pair::service_gate skips the pair's "the service is the only gate
// caller" refusal; it takes a pass only GateService can make, so no other
// code reaches it.
TEST_CASE("gate service: only the service can make the pass its row gate takes") {
  STATIC_REQUIRE(!std::is_default_constructible_v<ds4tp::GateService::Pass>);
  STATIC_REQUIRE(!std::is_constructible_v<ds4tp::GateService::Pass, int>);
}
