// Group hot path: once connected, all_reduce (every dtype, one chunk and
// several), all_gather, broadcast and barrier allocate nothing on the
// calling thread, over shared slots (threads) and over the tcp mesh.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "support/alloc_count.hpp"
#include "support/group_util.hpp"
#include "os/os.hpp"

using namespace ds4tp::test;

namespace {

// Runs the calls once to warm up, then counts a second round. Returns
// the allocations of the second round, or UINT64_MAX on a failed call.
uint64_t counted_round(ds4tp_group *g) {
  std::vector<uint8_t> buf(200000 * 4), out(200000 * 4 * size_t(ds4tp_group_size(g)));
  void *lib = nullptr;
  uint64_t lib_bytes = 0;
  if (ds4tp_group_buffer(g, &lib, &lib_bytes) != 0) return UINT64_MAX;
  uint64_t before = 0;
  for (int round = 0; round < 2; round++) {
    if (round == 1) before = alloc::this_thread();
    for (int dt : {DS4TP_DTYPE_F32, DS4TP_DTYPE_F16, DS4TP_DTYPE_BF16})
      for (uint64_t c : {uint64_t(2560), uint64_t(200000)})
        if (ds4tp_group_all_reduce(g, buf.data(), c, dt, DS4TP_OP_SUM) != 0) return UINT64_MAX;
    if (ds4tp_group_all_reduce(g, lib, lib_bytes / 2, DS4TP_DTYPE_BF16, DS4TP_OP_SUM) != 0 ||
        ds4tp_group_all_gather(g, buf.data(), out.data(), 100000) != 0 ||
        ds4tp_group_broadcast(g, buf.data(), 100000, 0) != 0 || ds4tp_group_barrier(g) != 0)
      return UINT64_MAX;
  }
  return alloc::this_thread() - before;
}

}  // namespace

TEST_CASE("group hot path allocates nothing: threads", "[group][alloc]") {
  // Default algorithms, then every size up to the chunk through the homes.
  for (const char *home_bytes : {static_cast<const char *>(nullptr), "0"}) {
    INFO("DS4TP_GROUP_HOME_BYTES=" << (home_bytes ? home_bytes : "(unset)"));
    if (home_bytes) setenv("DS4TP_GROUP_HOME_BYTES", home_bytes, 1);
    ds4tp_group *gs[3] = {};
    ds4tp_group_options o;
    ds4tp_group_options_init(&o);
    o.chunk_bytes = 64 * 1024;
    REQUIRE(ds4tp_group_new_local(gs, 3, &o, nullptr) == 0);
    unsetenv("DS4TP_GROUP_HOME_BYTES");
    uint64_t n[3] = {};
    std::vector<std::thread> ts;
    for (int r = 0; r < 3; r++) ts.emplace_back([&, r] { n[r] = counted_round(gs[r]); });
    for (auto &t : ts) t.join();
    for (int r = 0; r < 3; r++) {
      INFO("rank " << r);
      CHECK(n[r] == 0);
      ds4tp_group_free(gs[r]);
    }
  }
}

// A group's waits end in the kernel only when a peer is slow, so the first
// one may come in the middle of a hot path. ctest runs every case in a
// fresh process, where this is the process's first such wait; on portable
// POSIX and on macOS without __ulock it sets up the wake pipe of words
// outside shared mappings (a heap group's), which once allocated it.
TEST_CASE("group hot path allocates nothing: the first wait in the kernel", "[group][alloc]") {
  uint32_t word = 0;
  const uint64_t before = alloc::this_thread();
  ds4tp::os::wait_on_word(&word, 0, 1'000'000);  // nobody wakes it: 1 ms
  ds4tp::os::wake_word(&word);
  CHECK(alloc::this_thread() - before == 0);
}

TEST_CASE("group hot path allocates nothing: tcp processes", "[group][alloc]") {
  GroupRun run = run_group_procs(3, DS4TP_TRANSPORT_TCP,
                                 [](ds4tp_group *g, int, uint64_t &d, std::string &why) {
                                   d = counted_round(g);
                                   if (d == UINT64_MAX) {
                                     why = ds4tp_group_errmsg(g);
                                     return int(DS4TP_EIO);
                                   }
                                   return 0;
                                 });
  INFO(run.why);
  REQUIRE(run.rc == 0);
  for (int r = 0; r < 3; r++) CHECK(run.digests[size_t(r)] == 0);
}
