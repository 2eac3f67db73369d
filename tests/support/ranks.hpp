// Two-rank harness: the leader runs in the test process, the worker in a
// forked child, over loopback. The same test body runs over every
// transport by taking the transport as a parameter (GENERATE).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "ds4tp/ds4tp.h"
#include "support/expect.hpp"

namespace ds4tp::test {

// Transports this build can run between two processes on one host.
std::vector<int> local_transports();

// A small identity: n_layer layers, n_embd floats, identity schedule.
ds4tp_identity small_identity(uint32_t n_layer = 4, uint32_t n_embd = 256);

struct RankSetup {
  int transport = DS4TP_TRANSPORT_TCP;
  ds4tp_identity leader_id = small_identity();
  ds4tp_identity worker_id = small_identity();
  int gate_timeout_ms = 3000;
  int connect_timeout_ms = 15000;
  int spin_us = 50;
  int log_level = DS4TP_LOG_WARN;
  std::function<void(ds4tp_options &)> leader_tweak, worker_tweak;
};

struct Ctx {
  int rank = 0;
  pid_t worker_pid = -1;  // leader side only
};

// A body gets the unconnected pair (it calls ds4tp_connect itself) and
// returns 0 on success; in the worker the value becomes the exit code,
// so bodies check with CHILD_EXPECT (support/expect.hpp), not Catch2.
using Body = std::function<int(ds4tp_pair *, Ctx &)>;

struct Outcome {
  int leader = -1;         // the leader body's return
  int worker_exit = -1;    // worker exit code, -1 if it did not exit
  int worker_signal = 0;   // signal that ended the worker, if any
  bool worker_hung = false;  // killed by the harness after wait_ms
  std::string leader_failures;  // the leader body's failed checks
  std::string worker_failures;  // the worker's, read back from its pipe

  // How each rank ended and what its failed checks said, for INFO().
  std::string describe() const;
};

// Parent side: both ranks succeeded; otherwise Catch2 shows describe().
#define REQUIRE_RANKS_OK(o)        \
  do {                             \
    INFO((o).describe());          \
    REQUIRE((o).leader == 0);      \
    REQUIRE((o).worker_exit == 0); \
  } while (0)

Outcome run_pair(const RankSetup &s, const Body &leader, const Body &worker,
                 int wait_ms = 60000);

// Fills the slab's out/batch-out regions of `rank` with a pattern that
// depends on (rank, seq) so a payload can be verified bit for bit.
float pattern(int rank, uint64_t seq, uint64_t index);

// ds4tp_connect then ds4tp_attach_slab(NULL): 0, or a failed check's code.
int connect_attach(ds4tp_pair *tp);
// One big gate (layer 5, seq 1) of `bytes` each way with a rank-keyed
// pattern, every word of the peer's checked: 0, or 1 after a failed check.
int big_gate(ds4tp_pair *tp, uint64_t bytes);

// A plain TCP connection to 127.0.0.1:port (close-on-exec); -1 if refused.
int loopback_connect(int port);
// A loopback port nothing listens on: bound once for a number, then closed.
int unused_loopback_port();

// The slab layout of a pair with a slab attached (size-prefixed get).
ds4tp_slab_layout layout_of(ds4tp_pair *tp);
// Gate service options for a small shared CI box: short spin, then yield.
ds4tp_gate_service_options test_service_options();
// Both ranks stay until both have made their checks (after a rank exits,
// its peer's liveness watcher fails the peer's pair): one 1-byte big
// gate. 0, or 1 after a failed check.
int final_barrier(ds4tp_pair *tp);

// A one-shot signal across the fork: the rank that must outlive its
// peer's checks waits for it. Create before forking.
class Hold {
 public:
  Hold();
  ~Hold();
  Hold(const Hold &) = delete;
  Hold &operator=(const Hold &) = delete;
  void done() const;
  // True once done() was called (in either process) within `ms`.
  bool wait(int ms) const;

 private:
  int fds_[2] = {-1, -1};
};

using Clock = std::chrono::steady_clock;
// Milliseconds since `t`, for deadline checks (never speed assertions).
double ms_since(Clock::time_point t);

}  // namespace ds4tp::test
