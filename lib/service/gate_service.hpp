// Gate service: a library thread that runs a pair's row gates for engines
// whose GPU kernels (or CPU "kernel" threads) drive the gates through slab
// words instead of calling the library.
//
// Protocol (per slot = layer*2 + gate; words u64 at flag_stride):
//   engine:  writes out[slot], then stores seq into ready[slot] (release)
//   service: polls ready[slot] of the next scheduled seq (acquire), runs
//            the exchange, stores seq into release[slot] (release)
//   engine:  waits until release[slot] >= seq; DS4TP_GATE_POISON = give up
// ready words live in the layout's gpu_flags region, release words in its
// gpu_release region; both are separate from the transports' own words.
//
// Stream mode (cfg.words set, ds4tp_gate_stream_start): the same loop on
// library-allocated StreamWords instead of the slab's words; the thread
// poisons them whenever it ends (a stream must never wait forever).
//
// Threading: start/stop/state from control threads (not concurrently with
// each other); while running, the service thread is the pair's only gate
// caller. The service never allocates, logs or locks on success.
#pragma once

#include <cstdint>

#include "common/error.hpp"
#include "os/wait.hpp"
#include "service/service_thread.hpp"
#include "service/stream_words.hpp"

namespace ds4tp {

class Pair;

struct ServiceConfig {
  uint64_t spin_ns = 1000000;     // busy-poll after the last gate (adaptive: at most)
  bool adaptive_spin = true;      // learn the spin per service (os::SpinBudget)
  uint64_t yield_ns = 10000000;   // then sched_yield() between polls
  uint64_t sleep_ns = 20000;      // then sleep this long between polls
  uint64_t stop_timeout_ns = 0;   // stop()'s wait for the thread
  int cpu = -1;                   // pin to this CPU, -1 = no
  StreamWords *words = nullptr;   // stream mode; owned by the Pair
};

class GateService {
 public:
  // The service thread's pass to Pair::service_gate: only this class can
  // make one, so the row gate that skips the pair's "the service is the
  // only gate caller" refusal is reachable from the service thread alone.
  class Pass {
    friend class GateService;
    Pass() = default;
  };

  explicit GateService(Pair &pair) : pair_(pair) {}
  // Stops and joins (bounded: the thread ends within one gate timeout).
  ~GateService();
  GateService(const GateService &) = delete;
  GateService &operator=(const GateService &) = delete;

  // ESTATE without a slab or when running; EINVAL when the CPU cannot be
  // pinned; EFAILED when the pair already failed.
  int start(const ServiceConfig &cfg, Error &err);
  // OK once the thread ended; ETIMEDOUT when it is still inside an
  // exchange at the deadline (call again).
  int stop(Error &err);
  // Stops and joins without a deadline (bounded by one gate timeout), then
  // poisons the release words; for detach and destruction.
  void halt();
  int state() const { return thread_.state(); }
  // Any thread: true from start() until the thread has ended.
  bool running() const { return thread_.running(); }

 private:
  enum class Exit { Stopped, Failed };
  void run();
  // Waits for ready[slot] == seq; false when stopping or failing (err set
  // for a failure, state left for run() to finish).
  bool wait_ready(uint32_t slot, uint64_t seq, uint64_t idle_since, Exit &why, Error &err);
  bool misplaced(uint32_t slot, uint64_t seq, Error &err) const;
  void poison();

  Pair &pair_;
  ServiceConfig cfg_;
  // The adaptive spin's window, learned across gates; service thread only.
  // Set up afresh by each start().
  os::WaitPolicy policy_;
  os::SpinBudget budget_;
  ServiceThread thread_;
};

}  // namespace ds4tp
