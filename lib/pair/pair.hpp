// The pair: one rank's end of a leader/worker connection. Owns bring-up,
// the control socket, the transport and the slab binding, and keeps the
// failure state every entry point checks first.
//
// Threading: gate calls (data plane) run on one thread; control calls may
// run on another. failed() and message() are safe from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "auth/key.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "control/bringup.hpp"
#include "net/socket.hpp"
#include "slab/layout.hpp"
#include "slab/schedule.hpp"
#include "transport/transport.hpp"
#include "wire/hello.hpp"

namespace ds4tp {

namespace session { class Session; }
namespace control { class Liveness; }

// Options after validation, strings owned.
struct Options {
  int role = DS4TP_ROLE_NONE;
  int transport = DS4TP_TRANSPORT_AUTO;
  std::string listen_host = "127.0.0.1";
  int listen_port = 0;
  std::string leader_host = "127.0.0.1";
  int leader_port = 0;
  int connect_timeout_ms = 60000;
  int hello_timeout_ms = 2000;
  int gate_timeout_ms = 750;
  int big_gate_timeout_ms = 10000;
  int frame_timeout_ms = 30000;
  int spin_us = 200;
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
};

class Pair {
 public:
  // Validates and creates; a leader also binds its listener.
  static int create(const Options &opt, wire::Identity id, std::unique_ptr<Pair> &out,
                    Error &err);
  ~Pair();

  int connect(Error &err);
  int attach_slab(void *base, uint64_t bytes, Error &err);
  void detach_slab();

  int gate(uint32_t layer, uint32_t gate, uint64_t seq, Error &err);
  int batch_gate(uint32_t index, uint32_t rows, uint64_t seq, Error &err);
  int big_gate(uint32_t layer, uint64_t seq, const void *out, void *in, uint64_t bytes,
               Error &err);

  // Staging hooks run around every row/batch gate on the gate thread
  // (nullptr removes them). ESTATE once a row or batch gate has run.
  int set_staging_hooks(const ds4tp_staging_hooks *hooks, Error &err);
  // Last row gate seq handed to the transport; any thread.
  uint64_t last_row_seq() const { return last_row_seq_.load(std::memory_order_relaxed); }

  // Failure state. record() keeps a failed call's message; a fatal one also
  // latches failed(), after which every call returns EFAILED.
  void record(const Error &e, bool fatal);
  void mark_failed(const std::string &reason);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  std::string message() const;
  // EFAILED with the original failure in `err`.
  int refuse(Error &err) const;

  int rank() const { return opt_.role == DS4TP_ROLE_LEADER ? 0 : 1; }
  int port() const;
  int transport() const { return transport_kind_; }
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

 private:
  Pair() = default;
  static int hook_failed(const char *which, int value, const char *kind, uint32_t a,
                         uint32_t b, uint64_t seq, Error &err);

  Options opt_;
  wire::Identity id_;
  wire::Hello peer_;
  Logger log_;
  slab::Layout layout_;
  slab::Schedule schedule_;
  std::unique_ptr<control::Bringup> bringup_;
  net::Fd control_;
  net::Fd data_;  // until the transport takes it
  std::unique_ptr<Transport> transport_;
  int transport_kind_ = DS4TP_TRANSPORT_AUTO;
  // Control plane, started at the end of connect(): framed lockstep
  // calls, and the watcher that latches failure when the peer goes away.
  int start_control_plane(Error &err);
  std::unique_ptr<session::Session> session_;
  std::unique_ptr<control::Liveness> liveness_;
  bool connected_ = false;
  uint8_t *slab_ = nullptr;
  void *owned_slab_ = nullptr;
  uint64_t owned_bytes_ = 0;
  std::atomic<uint64_t> last_row_seq_{0};
  ds4tp_staging_hooks hooks_{};
  bool gates_started_ = false;  // a row or batch gate reached the transport

  std::atomic<bool> failed_{false};
  mutable std::mutex msg_mu_;
  std::string message_;
  std::string failure_;
};

// 16 bytes naming this host (hashed boot id + hostname); equal on both ranks
// exactly when they run on the same machine.
std::array<uint8_t, 16> host_identity();

}  // namespace ds4tp
