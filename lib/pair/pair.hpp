// The pair: one rank's end of a leader/worker connection. Owns bring-up,
// the control socket, the transport and the slab binding, and keeps the
// failure state every entry point checks first.
//
// Threading: gate calls (data plane) run on one thread; control calls may
// run on another. failed() and message() are safe from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "auth/key.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "connect/bringup.hpp"
#include "net/socket.hpp"
#include "os/wait.hpp"
#include "service/gate_service.hpp"
#include "slab/layout.hpp"
#include "slab/schedule.hpp"
#include "stats/stats.hpp"
#include "stats/gate_flight.hpp"
#include "stats/trace.hpp"
#include "link/link.hpp"
#include "link/data_config.hpp"
#include "wire/gate_header.hpp"
#include "wire/hello.hpp"
#include "talk/peer_state.hpp"

namespace ds4tp {

namespace session {
class Session;
class WorkerEngine;
}  // namespace session
namespace talk { class Liveness; }
namespace link { struct Connection; }
namespace link { struct GateStep; }

// Where a leader listens and a worker looks for it unless told otherwise.
inline constexpr const char *kDefaultHost = "127.0.0.1";

// Options after validation, strings owned. The defaults here are the only
// ones: ds4tp_options_init copies them into the C struct.
struct Options {
  int role = DS4TP_ROLE_NONE;
  int transport = DS4TP_TRANSPORT_AUTO;
  std::string listen_host = kDefaultHost;
  int listen_port = 0;
  std::string leader_host = kDefaultHost;
  int leader_port = 0;
  int connect_timeout_ms = 60000;
  int hello_timeout_ms = 2000;
  int gate_timeout_ms = 750;
  int big_gate_timeout_ms = 10000;
  int frame_timeout_ms = 30000;
  int peer_silence_ms = 1000;
  int peer_arrival_timeout_ms = 300000;  // DS4TP_ARRIVAL_UNLIMITED: no limit
  int spin_us = DS4TP_SPIN_ADAPTIVE;  // or a fixed busy-poll in us
  ds4tp_log_fn log_fn = nullptr;
  void *log_user_data = nullptr;
  int log_level = DS4TP_LOG_INFO;
  // Pre-shared key (empty = no authentication) and where it came from.
  auth::Key psk;
  std::string psk_source;
  // RDMA port choice (empty device = first active; gid -1 = pick).
  std::string rdma_device;
  int rdma_port = 1;
  int rdma_gid_index = -1;
  // Control plane: largest frame payload sent or accepted.
  uint32_t max_frame_bytes = 64u << 20;
  // A standby tcp link beside an rdma or shm transport or a tcp pair's
  // rails, taken when the primary fails (multipath/failover.hpp).
  bool failover = true;
  // Rails: the leader's IPv4 addresses of extra tcp links a tcp pair
  // stripes its big gates over (link/tcp/rails.hpp); both ranks
  // list the same, in the same order.
  std::vector<std::string> rails;
  // RDMA rails: this rank's "device[:port[:gid]]" of extra rdma links an
  // rdma pair stripes its big gates over (link/rdma/pair_link.hpp);
  // both ranks list as many, rail k of each joined by one cable.
  std::vector<std::string> rdma_rails;
  // Operator settings from the environment (read at connect): a rails pair's
  // row gates pinned to link k (DS4TP_ROW_LINK; -1: the quickest), and a
  // failover drill that gives the primary up at gate N (DS4TP_FAILOVER_DRILL;
  // 0: never).
  int row_link = -1;
  uint64_t failover_drill = 0;
};

// Engine copies around every row and batch exchange, run on the gate
// thread (the contract is ds4tp_set_staging_hooks'). For Stage::Row `a, b`
// are (layer, gate), for Stage::Batch (batch index, rows). A hook returns 0,
// or any other value when its copy failed (the gate then fails with EIO).
enum class Stage { Row = DS4TP_STAGE_ROW, Batch = DS4TP_STAGE_BATCH };
struct StagingHooks {
  std::function<int(Stage, uint32_t a, uint32_t b, uint64_t seq, void *slab_out, uint64_t bytes)>
      before_exchange;
  std::function<int(Stage, uint32_t a, uint32_t b, uint64_t seq, const void *slab_in,
                    uint64_t bytes)>
      after_exchange;
};

// Entry points that can end the pair (connect, gates, control calls, the
// worker loop) apply one rule before returning: any failure latches
// failed() except a caller's mistake (EINVAL, ESTATE), a refusal after an
// earlier failure (EFAILED) and a hash divergence (EDIVERGED: both ranks
// know, the leader decides how to recover). Set-up calls (attach_slab,
// set_staging_hooks, the service) never latch; their callers record().
class Pair {
 public:
  // Validates and creates; a leader also binds its listener.
  static int create(const Options &opt, wire::Identity id, std::unique_ptr<Pair> &out,
                    Error &err);
  ~Pair();

  int connect(Error &err);
  int attach_slab(void *base, uint64_t bytes, Error &err);
  // Halts the gate service first: it must not outlive the slab.
  void detach_slab();

  // Gates from the engine: ESTATE while the gate service runs (it is then
  // the only gate caller).
  int gate(uint32_t layer, uint32_t gate, uint64_t seq, Error &err);
  int batch_gate(uint32_t index, uint32_t rows, uint64_t seq, Error &err);
  int big_gate(uint32_t layer, uint64_t seq, const void *out, void *in, uint64_t bytes,
               Error &err);

  // Staging hooks run around every row/batch gate on the gate thread
  // (empty hooks remove them). ESTATE while the gate service runs or once a
  // row or batch gate has run.
  int set_staging_hooks(StagingHooks hooks, Error &err);

  // Gate service (lib/service). A zero stop_timeout_ns means one gate
  // timeout plus a second. stop_service() works on a failed pair too.
  int start_service(ServiceConfig cfg, Error &err);
  int stop_service(Error &err);
  // Stream mode: creates the words on first use (layout.slots slots) and
  // keeps the block; other bits or mode reconfigure it; then start_service.
  int start_stream(ServiceConfig cfg, uint32_t bits, int mode, Error &err);
  StreamWords *stream_words() const { return stream_words_.get(); }
  int service_state() const { return service_->state(); }
  // The gate service's row gate: gate() without its refusal while the
  // service runs (the service thread is then the only caller) and without
  // settle() (the service records its failure itself, then poisons the
  // release words).
  // Callable only with the pass GateService alone can make.
  int service_gate(GateService::Pass, uint32_t layer, uint32_t gate, uint64_t seq,
                   Error &err) {
    return row_exchange(layer, gate, seq, err);
  }

  // Runs one lockstep call `call(Session &, Error &)` under the failure
  // rule; ESTATE before connect. A template so a call's arguments travel
  // without a heap-allocated closure (EVAL must not allocate).
  template <typename F>
  int control(Error &err, F &&call) {
    if (!session_)
      return err.set(DS4TP_ESTATE, "control calls need a connected pair: call ds4tp_connect first");
    return settle(call(*session_, err), err);
  }
  // The worker loop (lib/session/worker_loop.hpp) driving `engine`, as a
  // control call; a failed engine callback (EFAILED) also ends the pair.
  int run_worker(session::WorkerEngine &engine, Error &err);
  // Last row gate seq handed to the transport; any thread.
  uint64_t last_row_seq() const { return last_row_seq_.load(std::memory_order_relaxed); }

  // Failure state. record() keeps a failed call's message; a fatal one also
  // latches failed(), after which every call returns EFAILED. settle()
  // applies the rule above to a latching call's result and returns it.
  void record(const Error &e, bool fatal);
  int settle(int rc, Error &err);
  void mark_failed(const std::string &reason);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  std::string message() const;
  // The failure that latched (empty while the pair works).
  std::string failure() const;
  // EFAILED with the original failure in `err`.
  int refuse(Error &err) const;

  int rank() const { return opt_.role == DS4TP_ROLE_LEADER ? 0 : 1; }
  int port() const;
  int transport() const { return transport_kind_.load(std::memory_order_acquire); }
  // The data links (ds4tp_links): the link's, or the one data
  // connection. Empty before connect. Gate thread, or while no gate runs.
  std::vector<LinkInfo> links() const {
    std::vector<LinkInfo> out;
    if (link_ && !link_->links(out)) out.push_back(LinkInfo{transport(), DS4TP_LINK_DATA});
    return out;
  }
  uint32_t peer_ctx() const { return peer_.id.ctx_size; }
  const slab::Layout &layout() const { return layout_; }
  const slab::Schedule &schedule() const { return schedule_; }
  const Options &options() const { return opt_; }
  const Logger &log() const { return log_; }
  bool connected() const { return connected_; }
  void *slab_base() const { return slab_; }
  int control_fd() const { return control_.get(); }
  // Lockstep control plane (lib/session); nullptr before connect.
  session::Session *session() const { return session_.get(); }

  // Observability (lib/stats): counters and histograms, any thread.
  const stats::Stats &stats() const { return stats_; }
  void stats_reset() { stats_.reset(); }
  // Tracing into a preallocated ring, written to `path` at trace_write()
  // and at destruction. Call while no gate runs, or from the gate thread.
  // DS4TP_TRACE=path starts it at connect ("%r" = this rank).
  int trace_start(const std::string &path, Error &err);
  int trace_write(Error &err);
  bool tracing() const { return trace_ != nullptr; }
  // The flight recorder (stats/gate_flight.hpp): its text and trace
  // written to `path` and `path`.json ("%r": the rank); any thread. On
  // `signo` each time the process gets it (0: no longer). flight.cpp.
  int dump(const std::string &path, Error &err) const;
  int dump_on_signal(int signo, const std::string &path, Error &err);

 private:
  Pair() = default;
  int connect_once(Error &err);
  int row_exchange(uint32_t layer, uint32_t gate, uint64_t seq, Error &err);
  int batch_exchange(uint32_t index, uint32_t rows, uint64_t seq, Error &err);
  int big_exchange(uint32_t layer, uint64_t seq, const void *out, void *in, uint64_t bytes,
                   Error &err);
  int refuse_if_service(Error &err) const;
  static int hook_failed(const char *which, int value, const char *kind, uint32_t a,
                         uint32_t b, uint64_t seq, Error &err);

  Options opt_;
  wire::Identity id_;
  wire::Hello peer_;
  Logger log_;
  slab::Layout layout_;
  slab::Schedule schedule_;
  std::unique_ptr<connect::Bringup> bringup_;
  net::Fd control_;
  net::Fd data_;  // until the transport takes it
  // The peer's liveness (the watcher writes it) and our last gate (the
  // gates write it); declared before everything that reads it.
  talk::PeerState peer_state_;
  // The pair's two-member link (link/link.hpp): its gates are its steps,
  // with these deadlines and this liveness (set at connect).
  std::unique_ptr<link::Link> link_;
  DataConfig data_config_;
  std::atomic<int> transport_kind_{DS4TP_TRANSPORT_AUTO};  // what carries gates after a failover
  std::atomic<uint64_t> failovers_{0};
  // Wraps link_ in a failover link when both ranks can open a
  // standby link (connect.cpp); logs why not otherwise.
  int add_standby(const link::Connection &c, net::Fd primary_data, Error &err);
  // Control plane, started at the end of connect(): framed lockstep
  // calls, and the watcher that latches failure when the peer goes away.
  int start_control_plane(Error &err);
  std::unique_ptr<session::Session> session_;
  std::unique_ptr<talk::Liveness> liveness_;
  bool connected_ = false;
  uint8_t *slab_ = nullptr;
  void *owned_slab_ = nullptr;
  uint64_t owned_bytes_ = 0;
  std::atomic<uint64_t> last_row_seq_{0};
  StagingHooks hooks_;
  bool gates_started_ = false;  // a row or batch gate reached the transport
  stats::Stats stats_;
  std::unique_ptr<stats::Trace> trace_;
  int trace_meta(stats::TraceMeta &m) const;
  stats::GateFlight flight_;
  // A gate that fails the pair writes the recorder here
  // (DS4TP_PAIR_DUMP, read at creation), else logs its last gates.
  std::string dump_path_;
  void dump_on_failure(int rc) const;
  // Every gate reaches its link through here (gates.cpp): the step runs
  // from one clock read, then the stats and the peer's progress note it.
  int timed_gate(int kind, link::GateStep &g, uint32_t a, Error &err);
  // Stream words: kept for the pair's life (the engine registers them).
  std::unique_ptr<StreamWords> stream_words_;
  // Destroyed first (~Pair resets it): its thread uses everything above.
  std::unique_ptr<GateService> service_;

  std::atomic<bool> failed_{false};
  mutable std::mutex msg_mu_;
  std::string message_;
  std::string failure_;
};

// 16 bytes naming this host (a hash of os::host_seed, on Linux the boot id,
// host name and /dev/shm); equal on both ranks exactly when they run on the
// same host and share /dev/shm.
std::array<uint8_t, 16> host_identity();

}  // namespace ds4tp
