// libds4tp for C++20: a header-only RAII wrapper over the C ABI in
// ds4tp.h. It adds no ABI of its own (everything here is inline and calls
// the ds4tp_* functions), so it works with any libds4tp of the same major
// version, shared or static.
//
//   ds4tp::Options opt = ds4tp::Options::leader(7070);
//   ds4tp::Identity id;  id.n_layer = 43;  id.n_embd = 4096;  ...
//   ds4tp::Pair tp(opt, id);     // throws ds4tp::Error on failure
//   tp.connect();
//   tp.attach_slab();            // library-allocated; or attach_slab(span)
//   std::span<float> out = tp.out_vector(layer, DS4TP_GATE_ATTN);
//   ... write out ...
//   tp.gate_exchange(layer, DS4TP_GATE_ATTN, ++seq);
//   std::span<const float> in = tp.in_vector(layer, DS4TP_GATE_ATTN);
//
// Failures throw ds4tp::Error carrying the DS4TP_E* status and the
// library's message. Thread rules are those of ds4tp.h: one thread runs
// gates, one makes control calls; queries may run anywhere. The raw handle
// (get()) stays available for code that wants status codes on a hot path
// instead of exceptions.
//
// Sections follow the header: errors and names, options and identity,
// slab, data plane, engine integration, control plane; groups
// (ds4tp::Group) are in ds4tp_group.hpp, included at the end.
#ifndef DS4TP_HPP
#define DS4TP_HPP

#include "ds4tp.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace ds4tp {
// Inline namespace: user code writes ds4tp::Pair, while the mangled names
// stay apart from the library's own C++ internals.
inline namespace cxx {

// ---- errors -----------------------------------------------------------

// A failed ds4tp call: status() is the DS4TP_E* code, message() the
// library's explanation (what() prefixes it with the code's name).
class Error : public std::runtime_error {
 public:
  Error(int status, const std::string &message)
      : std::runtime_error(std::string(ds4tp_err_name(status)) + ": " + message),
        status_(status),
        message_(message) {}
  int status() const noexcept { return status_; }
  const char *name() const noexcept { return ds4tp_err_name(status_); }
  const std::string &message() const noexcept { return message_; }

 private:
  int status_;
  std::string message_;
};

// Throws Error for a nonzero status, with this thread's last message.
inline void check(int status) {
  if (status != DS4TP_OK) {
    const char *msg = ds4tp_last_error();
    throw Error(status, msg != nullptr && msg[0] != '\0' ? msg : ds4tp_strerror(status));
  }
}

// ---- versions and names ------------------------------------------------

inline unsigned version() noexcept { return ds4tp_version(); }
inline const char *version_string() noexcept { return ds4tp_version_string(); }
inline unsigned protocol_version() noexcept { return ds4tp_protocol_version(); }
inline const char *strerror(int status) noexcept { return ds4tp_strerror(status); }
inline const char *err_name(int status) noexcept { return ds4tp_err_name(status); }
inline const char *transport_name(int transport) noexcept {
  return ds4tp_transport_name(transport);
}
// Whether `transport` can run on this host; `why` gets what was found or
// what is missing.
inline bool transport_available(int transport, std::string *why = nullptr) {
  char buf[512] = {0};
  bool ok = ds4tp_transport_available(transport, buf, sizeof buf) != 0;
  if (why != nullptr) *why = buf;
  return ok;
}
// What auto would pick with a peer offering what this host offers, on
// this host or another (ds4tp_transport_auto).
inline int transport_auto(bool same_host) noexcept {
  return ds4tp_transport_auto(same_host ? 1 : 0);
}
inline const char *command_name(int kind) noexcept { return ds4tp_command_name(kind); }

// ---- options and identity ---------------------------------------------
// The C structs with their initializers run in the constructor; fields
// are set directly (opt.gate_timeout_ms = 500). Passed to the C calls as
// the base struct, so the size field stays sizeof(ds4tp_options).

struct Options : ds4tp_options {
  Options() noexcept { ds4tp_options_init(this); }
  // Leader listening on host:port (port 0 picks one; see listen_port()).
  static Options leader(int port, const char *host = "127.0.0.1") noexcept {
    Options o;
    o.role = DS4TP_ROLE_LEADER;
    o.listen_host = host;
    o.listen_port = port;
    return o;
  }
  // Worker dialing the leader at host:port.
  static Options worker(const char *host, int port) noexcept {
    Options o;
    o.role = DS4TP_ROLE_WORKER;
    o.leader_host = host;
    o.leader_port = port;
    return o;
  }
};
static_assert(sizeof(Options) == sizeof(ds4tp_options), "Options adds no fields");

struct Identity : ds4tp_identity {
  Identity() noexcept { ds4tp_identity_init(this); }
};
static_assert(sizeof(Identity) == sizeof(ds4tp_identity), "Identity adds no fields");

struct GateServiceOptions : ds4tp_gate_service_options {
  GateServiceOptions() noexcept { ds4tp_gate_service_options_init(this); }
};

// GPU streams (ds4tp.h): stream options, and the words the start calls
// describe (size preset).
struct StreamOptions : ds4tp_stream_options {
  StreamOptions() noexcept { ds4tp_stream_options_init(this); }
};
struct StreamWords : ds4tp_stream_words {
  StreamWords() noexcept : ds4tp_stream_words{} { size = sizeof(ds4tp_stream_words); }
};

// The group's stream service (groups have no C++ class: raw handle).
inline StreamWords group_stream_start(ds4tp_group *g, const ds4tp_stream_options &opt,
                                      const ds4tp_gate_service_options *svc = nullptr) {
  StreamWords w;
  check(ds4tp_group_stream_start(g, svc, &opt, &w));
  return w;
}
inline void group_stream_stop(ds4tp_group *g) { check(ds4tp_group_stream_stop(g)); }

using SlabLayout = ds4tp_slab_layout;
// Counters and histograms (ds4tp_stats_read); `size` is already set.
using Stats = ds4tp_stats;
using BatchItem = ds4tp_batch_item;
using ImageSpan = ds4tp_image_span;

// Slot that row gate `seq` must hit under `id`'s schedule, -1 when invalid.
inline int64_t schedule_slot(const ds4tp_identity &id, uint64_t seq) noexcept {
  return ds4tp_schedule_slot(&id, seq);
}

// Slab layout for `id` (pure; throws Error for an invalid identity).
inline SlabLayout slab_layout(const ds4tp_identity &id) {
  SlabLayout l{};
  l.size = sizeof l;
  check(ds4tp_slab_layout_compute(&id, &l));
  return l;
}

// ---- engine integration types -------------------------------------------

// Staging hooks (ds4tp_staging_hooks) as an interface. They run on the gate
// thread; return 0 on success, anything else (or an exception) fails the
// gate with DS4TP_EIO. kind is DS4TP_STAGE_ROW (a = layer, b = gate) or
// DS4TP_STAGE_BATCH (a = index, b = rows).
class StagingHooks {
 public:
  virtual ~StagingHooks() = default;
  virtual int before_exchange(int kind, uint32_t a, uint32_t b, uint64_t seq,
                              std::span<std::byte> slab_out) = 0;
  virtual int after_exchange(int kind, uint32_t a, uint32_t b, uint64_t seq,
                             std::span<const std::byte> slab_in) = 0;
};

// ---- control plane types -------------------------------------------------

// A received command. From PairRef::recv_command it owns its arrays (freed
// by the destructor); inside Worker callbacks it views the loop's.
class Command {
 public:
  Command() noexcept { ds4tp_command_init(&c_); }
  static Command view(const ds4tp_command &c) noexcept {
    Command v;
    v.c_ = c;
    v.owned_ = false;
    return v;
  }
  ~Command() {
    if (owned_) ds4tp_command_free(&c_);
  }
  Command(const Command &) = delete;
  Command &operator=(const Command &) = delete;
  Command(Command &&o) noexcept : c_(o.c_), owned_(o.owned_) { ds4tp_command_init(&o.c_); }
  Command &operator=(Command &&o) noexcept {
    if (this != &o) {
      if (owned_) ds4tp_command_free(&c_);
      c_ = o.c_;
      owned_ = o.owned_;
      ds4tp_command_init(&o.c_);
    }
    return *this;
  }

  const ds4tp_command &raw() const noexcept { return c_; }
  ds4tp_command *raw_mut() noexcept { return &c_; }
  int kind() const noexcept { return c_.kind; }
  const char *name() const noexcept { return ds4tp_command_name(c_.kind); }
  uint64_t session_id() const noexcept { return c_.session_id; }
  uint64_t seq() const noexcept { return c_.seq; }
  uint64_t hash() const noexcept { return c_.hash; }
  int32_t token() const noexcept { return c_.token; }
  int32_t pos() const noexcept { return c_.pos; }
  int32_t limit() const noexcept { return c_.limit; }
  int32_t count() const noexcept { return c_.count; }
  uint32_t mode() const noexcept { return c_.mode; }
  uint32_t flags() const noexcept { return c_.flags; }
  uint32_t ctx_size() const noexcept { return c_.ctx_size; }
  uint32_t logits_floats() const noexcept { return c_.logits_floats; }
  std::span<const int32_t> tokens() const noexcept { return {c_.tokens, c_.tokens ? c_.n_tokens : 0}; }
  std::span<const BatchItem> items() const noexcept { return {c_.items, c_.items ? c_.n_items : 0}; }
  std::span<const ImageSpan> images() const noexcept {
    return {c_.images, c_.images ? c_.n_images : 0};
  }

 private:
  ds4tp_command c_;
  bool owned_ = true;
};

// What a Worker callback hands back (the loop presets every field).
class Reply {
 public:
  explicit Reply(ds4tp_reply &r) noexcept : r_(&r) {}
  // logits_rows * logits_floats floats to fill row after row.
  std::span<float> logits() const noexcept {
    return r_->logits ? std::span<float>(r_->logits, size_t(r_->logits_rows) * r_->logits_floats)
                      : std::span<float>();
  }
  uint32_t logits_rows() const noexcept { return r_->logits_rows; }
  uint32_t logits_floats() const noexcept { return r_->logits_floats; }
  uint32_t position() const noexcept { return r_->position; }
  void set_position(uint32_t p) noexcept { r_->position = p; }
  uint64_t hash() const noexcept { return r_->hash; }
  void set_hash(uint64_t h) noexcept { r_->hash = h; }
  std::string_view message() const noexcept { return r_->message; }
  void set_message(std::string_view m) noexcept {
    size_t n = m.size() < sizeof r_->message - 1 ? m.size() : sizeof r_->message - 1;
    std::memcpy(r_->message, m.data(), n);
    r_->message[n] = '\0';
  }

 private:
  ds4tp_reply *r_;
};

class PairRef;

// A worker's engine for PairRef::worker_run: one method per command kind
// (the ds4tp_worker_ops slots). Each returns 0, a positive ack status, or a
// negative engine status to fail the command; an exception fails it too
// and worker_run rethrows it once the leader was told. A kind left at its
// default is reported unsupported.
class Worker {
 public:
  virtual ~Worker() = default;
#define DS4TP_HPP_OP_(name)                                            \
  virtual int name(PairRef &pair, const Command &cmd, Reply &reply) { \
    (void)pair;                                                        \
    return unsupported(cmd, reply);                                    \
  }
  DS4TP_HPP_OP_(session_create)
  DS4TP_HPP_OP_(session_destroy)
  DS4TP_HPP_OP_(sync)
  DS4TP_HPP_OP_(sync_images)
  DS4TP_HPP_OP_(eval)
  DS4TP_HPP_OP_(mtp)
  DS4TP_HPP_OP_(rewind)
  DS4TP_HPP_OP_(invalidate)
  DS4TP_HPP_OP_(spec_restore)
  DS4TP_HPP_OP_(eval_batch)
  DS4TP_HPP_OP_(mixed_batch)
  DS4TP_HPP_OP_(verify)
  DS4TP_HPP_OP_(verify_commit)
  DS4TP_HPP_OP_(draft)
  DS4TP_HPP_OP_(hash)
#undef DS4TP_HPP_OP_

  static int unsupported(const Command &cmd, Reply &reply) {
    reply.set_message(std::string("this worker does not support ") + cmd.name());
    return DS4TP_EUNSUPPORTED;
  }

  // Calls the method for cmd.kind() (what the loop does per command; for
  // loops that receive commands by hand).
  int dispatch(PairRef &pair, const Command &cmd, Reply &reply) {
    switch (cmd.kind()) {
      case DS4TP_CMD_SESSION_CREATE: return session_create(pair, cmd, reply);
      case DS4TP_CMD_SESSION_DESTROY: return session_destroy(pair, cmd, reply);
      case DS4TP_CMD_SYNC: return sync(pair, cmd, reply);
      case DS4TP_CMD_SYNC_IMAGES: return sync_images(pair, cmd, reply);
      case DS4TP_CMD_EVAL: return eval(pair, cmd, reply);
      case DS4TP_CMD_MTP: return mtp(pair, cmd, reply);
      case DS4TP_CMD_REWIND: return rewind(pair, cmd, reply);
      case DS4TP_CMD_INVALIDATE: return invalidate(pair, cmd, reply);
      case DS4TP_CMD_SPEC_RESTORE: return spec_restore(pair, cmd, reply);
      case DS4TP_CMD_EVAL_BATCH: return eval_batch(pair, cmd, reply);
      case DS4TP_CMD_MIXED_BATCH: return mixed_batch(pair, cmd, reply);
      case DS4TP_CMD_VERIFY: return verify(pair, cmd, reply);
      case DS4TP_CMD_VERIFY_COMMIT: return verify_commit(pair, cmd, reply);
      case DS4TP_CMD_DRAFT: return draft(pair, cmd, reply);
      case DS4TP_CMD_HASH: return hash(pair, cmd, reply);
      default: return unsupported(cmd, reply);
    }
  }
};

// ---- the pair -----------------------------------------------------------

// Every call on a ds4tp_pair, without ownership: what a Pair is, and what
// Worker callbacks get for symmetric calls and gates.
class PairRef {
 public:
  explicit PairRef(ds4tp_pair *p) noexcept : p_(p) {}

  ds4tp_pair *get() const noexcept { return p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }

  // -- bring-up and state --
  void connect() { check(ds4tp_connect(live())); }
  int listen_port() const noexcept { return ds4tp_listen_port(p_); }
  int rank() const noexcept { return ds4tp_rank(p_); }
  int transport() const noexcept { return ds4tp_transport_active(p_); }
  uint32_t peer_ctx_size() const noexcept { return ds4tp_peer_ctx_size(p_); }
  bool failed() const noexcept { return ds4tp_failed(p_) != 0; }
  void mark_failed(const char *reason) noexcept { ds4tp_mark_failed(p_, reason); }
  std::string errmsg() const { return ds4tp_errmsg(p_); }

  // -- observability --
  Stats stats() const {
    Stats st{};
    st.size = sizeof st;
    check(ds4tp_stats_read(live(), &st));
    return st;
  }
  void stats_reset() { check(ds4tp_stats_reset(live())); }
  // Prometheus text exposition of stats(), for an engine's /metrics.
  std::string prometheus() const {
    size_t need = 0;
    int rc = ds4tp_stats_prometheus(live(), nullptr, 0, &need);
    if (rc != DS4TP_OK && rc != DS4TP_ENOMEM) check(rc);
    std::string text(need + 1, '\0');
    check(ds4tp_stats_prometheus(live(), text.data(), text.size(), &need));
    text.resize(need);
    return text;
  }
  void trace_start(const char *path) { check(ds4tp_trace_start(live(), path)); }
  void trace_write() { check(ds4tp_trace_write(live())); }
  // The flight recorder (the last 256 gates, each with its wait for the
  // peer) as text to `path` and a Chrome trace to `path`.json; any thread.
  void dump(const char *path) const { check(ds4tp_dump(live(), path)); }

  // -- slab --
  SlabLayout layout() const {
    SlabLayout l{};
    l.size = sizeof l;
    check(ds4tp_slab_layout_get(live(), &l));
    return l;
  }
  uint64_t slab_bytes() const noexcept { return ds4tp_slab_bytes(p_); }
  // Raw offsets as in C (UINT64_MAX when out of range).
  uint64_t out_offset(uint32_t layer, uint32_t gate) const noexcept {
    return ds4tp_slab_out_offset(p_, layer, gate);
  }
  uint64_t in_offset(uint32_t layer, uint32_t gate) const noexcept {
    return ds4tp_slab_in_offset(p_, layer, gate);
  }
  uint64_t batch_out_offset(uint32_t index) const noexcept {
    return ds4tp_slab_batch_out_offset(p_, index);
  }
  uint64_t batch_in_offset(uint32_t index) const noexcept {
    return ds4tp_slab_batch_in_offset(p_, index);
  }
  uint64_t gpu_flags_offset() const noexcept { return ds4tp_slab_gpu_flags_offset(p_); }

  // Hands engine memory to the transport (64-byte aligned, at least
  // slab_bytes()); it must outlive the attachment (detach_slab or ~Pair).
  void attach_slab(std::span<std::byte> memory) {
    check(ds4tp_attach_slab(live(), memory.data(), memory.size()));
  }
  // The library allocates a zeroed, page-aligned slab itself.
  void attach_slab() { check(ds4tp_attach_slab(live(), nullptr, 0)); }
  void detach_slab() noexcept { ds4tp_detach_slab(p_); }
  // The attached slab; empty when none. Valid until detach_slab/~Pair.
  std::span<std::byte> slab() const noexcept {
    auto *base = static_cast<std::byte *>(ds4tp_slab_base(p_));
    return base ? std::span<std::byte>(base, ds4tp_slab_bytes(p_)) : std::span<std::byte>();
  }
  // This rank's partial for (layer, gate), and the peer's once exchanged.
  std::span<float> out_vector(uint32_t layer, uint32_t gate) const {
    return vector_at(ds4tp_slab_out_offset(p_, layer, gate), layer, gate, "out");
  }
  std::span<float> in_vector(uint32_t layer, uint32_t gate) const {
    return vector_at(ds4tp_slab_in_offset(p_, layer, gate), layer, gate, "in");
  }
  // Row `row` (< DS4TP_BATCH_MAX_ROWS) of batch gate `index`.
  std::span<float> batch_out_row(uint32_t index, uint32_t row) const {
    return row_at(ds4tp_slab_batch_out_offset(p_, index), index, row, "batch out");
  }
  std::span<float> batch_in_row(uint32_t index, uint32_t row) const {
    return row_at(ds4tp_slab_batch_in_offset(p_, index), index, row, "batch in");
  }

  // -- data plane (see ds4tp.h; any failure latches the failed state) --
  void gate_exchange(uint32_t layer, uint32_t gate, uint64_t seq) {
    check(ds4tp_gate_exchange(live(), layer, gate, seq));
  }
  void batch_gate_exchange(uint32_t index, uint32_t rows, uint64_t seq) {
    check(ds4tp_batch_gate_exchange(live(), index, rows, seq));
  }
  // Sends `out` and receives the peer's payload of the same size into `in`
  // (typed data: std::as_bytes(std::span(v)), std::as_writable_bytes(...)).
  void big_gate_exchange(uint32_t layer, uint64_t seq, std::span<const std::byte> out,
                         std::span<std::byte> in) {
    same_size(out.size(), in.size(), "big gate");
    check(ds4tp_big_gate_exchange(live(), layer, seq, out.data(), in.data(), out.size()));
  }

  // -- engine integration --
  // The gates in callback shape (true on success; any failure latches the
  // pair failed). An engine's C machinery may instead hold
  // ds4tp_gate_callback & co. with get() as user data.
  bool gate_callback(uint32_t layer, uint32_t gate, uint64_t seq) noexcept {
    return ds4tp_gate_callback(p_, layer, gate, seq) != 0;
  }
  bool batch_gate_callback(uint32_t index, uint32_t rows, uint64_t seq) noexcept {
    return ds4tp_batch_gate_callback(p_, index, rows, seq) != 0;
  }
  bool big_gate_callback(uint32_t layer, uint64_t seq, std::span<const std::byte> out,
                         std::span<std::byte> in) noexcept {
    return out.size() == in.size() &&
           ds4tp_big_gate_callback(p_, layer, seq, out.data(), in.data(), out.size()) != 0;
  }
  // Installs `hooks` (nullptr removes them); the object must outlive its
  // installation. Before the first row or batch gate.
  void set_staging_hooks(StagingHooks *hooks) {
    if (hooks == nullptr) {
      check(ds4tp_set_staging_hooks(live(), nullptr));
      return;
    }
    ds4tp_staging_hooks h{};
    h.size = sizeof h;
    h.user_data = hooks;
    h.before_exchange = [](void *ud, int kind, uint32_t a, uint32_t b, uint64_t seq, void *out,
                           uint64_t bytes) -> int {
      try {
        return static_cast<StagingHooks *>(ud)->before_exchange(
            kind, a, b, seq, std::span<std::byte>(static_cast<std::byte *>(out), bytes));
      } catch (...) {
        return -1;
      }
    };
    h.after_exchange = [](void *ud, int kind, uint32_t a, uint32_t b, uint64_t seq,
                          const void *in, uint64_t bytes) -> int {
      try {
        return static_cast<StagingHooks *>(ud)->after_exchange(
            kind, a, b, seq,
            std::span<const std::byte>(static_cast<const std::byte *>(in), bytes));
      } catch (...) {
        return -1;
      }
    };
    check(ds4tp_set_staging_hooks(live(), &h));
  }
  void set_staging_hooks(const ds4tp_staging_hooks *raw) { check(ds4tp_set_staging_hooks(live(), raw)); }
  void gate_service_start(const ds4tp_gate_service_options *opt = nullptr) {
    check(ds4tp_gate_service_start(live(), opt));
  }
  void gate_service_stop() { check(ds4tp_gate_service_stop(live())); }
  // The service on stream words (stop with gate_service_stop).
  StreamWords gate_stream_start(const ds4tp_stream_options *opt = nullptr,
                                const ds4tp_gate_service_options *svc = nullptr) {
    StreamWords w;
    check(ds4tp_gate_stream_start(live(), svc, opt, &w));
    return w;
  }
  int gate_service_state() const noexcept { return ds4tp_gate_service_state(p_); }
  uint64_t gate_seq() const noexcept { return ds4tp_gate_seq(p_); }
  // The engine's ready word / the service's release word of `slot`.
  std::atomic_ref<uint64_t> ready_word(uint32_t slot) const { return word(true, slot); }
  std::atomic_ref<uint64_t> release_word(uint32_t slot) const { return word(false, slot); }

  // -- control plane: leader commands (return once the frame is written) --
  void send_session_create(uint64_t session_id, uint32_t ctx_size) {
    check(ds4tp_send_session_create(live(), session_id, ctx_size));
  }
  void send_session_destroy(uint64_t session_id) {
    check(ds4tp_send_session_destroy(live(), session_id));
  }
  void send_sync(uint64_t session_id, std::span<const int32_t> tokens, uint32_t logits_floats = 0) {
    check(ds4tp_send_sync(live(), session_id, tokens.data(), n32(tokens.size()), logits_floats));
  }
  void send_sync_images(uint64_t session_id, std::span<const int32_t> tokens,
                        std::span<const ImageSpan> images, uint32_t logits_floats = 0) {
    check(ds4tp_send_sync_images(live(), session_id, tokens.data(), n32(tokens.size()),
                                 images.data(), n32(images.size()), logits_floats));
  }
  void send_eval(uint64_t session_id, uint64_t seq, int32_t token, uint32_t logits_floats = 0) {
    check(ds4tp_send_eval(live(), session_id, seq, token, logits_floats));
  }
  void send_mtp(uint64_t session_id, uint64_t seq, int32_t token, uint32_t limit) {
    check(ds4tp_send_mtp(live(), session_id, seq, token, limit));
  }
  void send_rewind(uint64_t session_id, int32_t pos) {
    check(ds4tp_send_rewind(live(), session_id, pos));
  }
  void send_invalidate(uint64_t session_id) { check(ds4tp_send_invalidate(live(), session_id)); }
  void send_spec_restore(uint64_t session_id, int32_t pos) {
    check(ds4tp_send_spec_restore(live(), session_id, pos));
  }
  void send_eval_batch(std::span<const BatchItem> items, uint32_t logits_floats = 0) {
    check(ds4tp_send_eval_batch(live(), items.data(), n32(items.size()), logits_floats));
  }
  void send_mixed_batch(uint64_t prefill_session_id, std::span<const int32_t> prompt,
                        std::span<const BatchItem> items, uint32_t logits_floats = 0) {
    check(ds4tp_send_mixed_batch(live(), prefill_session_id, prompt.data(), n32(prompt.size()),
                                 items.data(), n32(items.size()), logits_floats));
  }
  void send_verify(uint64_t session_id, std::span<const int32_t> drafts, uint32_t flags = 0) {
    check(ds4tp_send_verify(live(), session_id, drafts.data(), n32(drafts.size()), flags));
  }
  void send_verify_commit(int32_t mode, int32_t count, uint32_t logits_floats = 0) {
    check(ds4tp_send_verify_commit(live(), mode, count, logits_floats));
  }
  void send_draft(uint64_t session_id, int32_t token, int32_t pos, uint32_t mode) {
    check(ds4tp_send_draft(live(), session_id, token, pos, mode));
  }
  void send_stop() { check(ds4tp_send_stop(live())); }

  // -- control plane: leader replies --
  // The COMMAND_ACK status (>= 0); a worker failure throws Error(EREMOTE).
  int32_t wait_ack(uint64_t session_id) {
    int32_t status = 0;
    check(ds4tp_wait_ack(live(), session_id, &status));
    return status;
  }
  // The SYNC_ACK: {status, position}.
  std::pair<int32_t, uint32_t> wait_sync(uint64_t session_id) {
    int32_t status = 0;
    uint32_t position = 0;
    check(ds4tp_wait_sync(live(), session_id, &status, &position));
    return {status, position};
  }
  // The next logits half (half.size() = the command's logits_floats).
  void recv_logits(std::span<float> half) {
    check(ds4tp_recv_logits(live(), half.data(), n32(half.size())));
  }
  int32_t remote_status() const noexcept { return ds4tp_remote_status(p_); }

  // -- control plane: both ranks --
  // Throws Error(EDIVERGED) when the hashes differ (the pair stays usable).
  void hash_check(uint64_t session_id, uint64_t seq, uint64_t hash) {
    check(ds4tp_hash_check(live(), session_id, seq, hash));
  }
  // True when either rank requested cancellation at this checkpoint.
  bool sync_checkpoint(uint32_t point, int32_t current, int32_t total, bool requested) {
    int cancelled = 0;
    check(ds4tp_sync_checkpoint(live(), point, current, total, requested ? 1 : 0, &cancelled));
    return cancelled != 0;
  }
  // Returns the intersection of both ranks' caps.
  uint32_t agree_execution_mode(uint32_t flags, uint32_t caps) {
    check(ds4tp_agree_execution_mode(live(), flags, &caps));
    return caps;
  }
  // {agreed, peer_on}; meta empty = zeros, else DS4TP_DRAFTER_META_BYTES bytes.
  std::pair<bool, bool> agree_drafter_split(bool mine_on, std::span<const std::byte> meta = {}) {
    if (!meta.empty()) same_size(meta.size(), DS4TP_DRAFTER_META_BYTES, "drafter meta");
    int agreed = 0, peer_on = 0;
    check(ds4tp_agree_drafter_split(live(), mine_on ? 1 : 0, meta.empty() ? nullptr : meta.data(),
                                    &agreed, &peer_on));
    return {agreed != 0, peer_on != 0};
  }
  // Returns the agreed gates per layer.
  uint32_t block_begin(uint32_t rows, uint32_t n_layers, uint32_t gates_per_layer = 1) {
    check(ds4tp_block_begin(live(), rows, n_layers, &gates_per_layer));
    return gates_per_layer;
  }
  void block_end() { check(ds4tp_block_end(live())); }
  void small_exchange(std::span<const std::byte> mine, std::span<std::byte> peer) {
    same_size(mine.size(), peer.size(), "small exchange");
    check(ds4tp_small_exchange(live(), mine.data(), peer.data(), n32(mine.size())));
  }
  void head_row_send(uint32_t row, std::span<const float> src) {
    check(ds4tp_head_row_send(live(), row, src.data(), n32(src.size())));
  }
  void head_row_recv(uint32_t row, std::span<float> dst) {
    check(ds4tp_head_row_recv(live(), row, dst.data(), n32(dst.size())));
  }

  // -- control plane: worker --
  Command recv_command(int32_t timeout_ms = DS4TP_WAIT_FOREVER) {
    Command c;
    check(ds4tp_recv_command(live(), c.raw_mut(), timeout_ms));
    return c;
  }
  void send_ack(int32_t status = DS4TP_ACK_DONE) { check(ds4tp_send_ack(live(), status)); }
  void send_sync_ack(int32_t status, uint32_t position) {
    check(ds4tp_send_sync_ack(live(), status, position));
  }
  void send_logits(std::span<const float> half) {
    check(ds4tp_send_logits(live(), half.data(), n32(half.size())));
  }
  void send_error(int32_t status, const std::string &message) {
    check(ds4tp_send_error(live(), status, message.c_str()));
  }
  // Serves commands with `worker` until STOP (returns) or a failure
  // (throws Error, or rethrows a callback's exception after the leader was
  // told).
  void worker_run(Worker &worker);

 protected:
  ds4tp_pair *live() const {
    if (p_ == nullptr) throw Error(DS4TP_EINVAL, "ds4tp::Pair is empty (moved from or released)");
    return p_;
  }

  ds4tp_pair *p_ = nullptr;

 private:
  static uint32_t n32(size_t n) {
    if (n > UINT32_MAX) throw Error(DS4TP_EINVAL, std::to_string(n) + " elements exceed 32 bits");
    return uint32_t(n);
  }
  static void same_size(size_t a, size_t b, const char *what) {
    if (a != b)
      throw Error(DS4TP_EINVAL, std::string(what) + ": sizes differ (" + std::to_string(a) +
                                    " and " + std::to_string(b) + " bytes)");
  }
  std::span<float> vector_at(uint64_t off, uint32_t layer, uint32_t gate, const char *what) const {
    auto s = slab();
    if (s.empty()) throw Error(DS4TP_ESTATE, "no slab attached: call attach_slab first");
    SlabLayout l = layout();
    if (off == UINT64_MAX)
      throw Error(DS4TP_EINVAL, std::string(what) + " vector (layer " + std::to_string(layer) +
                                    ", gate " + std::to_string(gate) + ") is outside this pair's " +
                                    std::to_string(l.slots / 2) + " layers");
    return {reinterpret_cast<float *>(s.data() + off), l.vec_bytes / sizeof(float)};
  }
  std::span<float> row_at(uint64_t off, uint32_t index, uint32_t row, const char *what) const {
    auto s = slab();
    if (s.empty()) throw Error(DS4TP_ESTATE, "no slab attached: call attach_slab first");
    SlabLayout l = layout();
    if (off == UINT64_MAX || row >= l.batch_rows)
      throw Error(DS4TP_EINVAL, std::string(what) + " row (index " + std::to_string(index) +
                                    ", row " + std::to_string(row) + ") outside " +
                                    std::to_string(l.batch_gates) + " batch gates of " +
                                    std::to_string(l.batch_rows) + " rows");
    return {reinterpret_cast<float *>(s.data() + off + row * l.vec_stride),
            l.vec_bytes / sizeof(float)};
  }
  std::atomic_ref<uint64_t> word(bool ready, uint32_t slot) const {
    auto s = slab();
    if (s.empty()) throw Error(DS4TP_ESTATE, "no slab attached: call attach_slab first");
    SlabLayout l = layout();
    if (slot >= l.slots)
      throw Error(DS4TP_EINVAL, "slot " + std::to_string(slot) + " outside 0.." +
                                    std::to_string(l.slots - 1));
    uint64_t off = (ready ? l.gpu_flags_offset : l.gpu_release_offset) + slot * l.flag_stride;
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t *>(s.data() + off));
  }
};

// Owns one ds4tp_pair: move-only, freed by the destructor. A moved-from
// Pair is empty; calls on it throw Error(DS4TP_EINVAL).
class Pair : public PairRef {
 public:
  Pair() noexcept : PairRef(nullptr) {}
  // ds4tp_new: validates, and a leader binds its listener here.
  Pair(const ds4tp_options &opt, const ds4tp_identity &id) : PairRef(nullptr) {
    check(ds4tp_new(&p_, &opt, &id));
  }
  // Takes ownership of a handle made by ds4tp_new.
  explicit Pair(ds4tp_pair *adopt) noexcept : PairRef(adopt) {}
  ~Pair() { ds4tp_free(p_); }
  Pair(const Pair &) = delete;
  Pair &operator=(const Pair &) = delete;
  Pair(Pair &&o) noexcept : PairRef(std::exchange(o.p_, nullptr)) {}
  Pair &operator=(Pair &&o) noexcept {
    if (this != &o) {
      ds4tp_free(p_);
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  // Gives up ownership: the caller must ds4tp_free the result.
  ds4tp_pair *release() noexcept { return std::exchange(p_, nullptr); }
};

inline void PairRef::worker_run(Worker &worker) {
  struct State {
    Worker *worker;
    std::exception_ptr error;
  } state{&worker, nullptr};
  ds4tp_command_fn fn = [](void *ud, ds4tp_pair *pair, const ds4tp_command *cmd,
                           ds4tp_reply *reply) -> int {
    auto *st = static_cast<State *>(ud);
    Reply r(*reply);
    Command c = Command::view(*cmd);
    PairRef ref(pair);
    try {
      return st->worker->dispatch(ref, c, r);
    } catch (const std::exception &e) {
      st->error = std::current_exception();
      r.set_message(std::string(c.name()) + " callback threw: " + e.what());
    } catch (...) {
      st->error = std::current_exception();
      r.set_message(std::string(c.name()) + " callback threw");
    }
    return -1;
  };
  ds4tp_worker_ops ops;
  ds4tp_worker_ops_init(&ops);
  for (ds4tp_command_fn *slot :
       {&ops.session_create, &ops.session_destroy, &ops.sync, &ops.sync_images, &ops.eval,
        &ops.mtp, &ops.rewind, &ops.invalidate, &ops.spec_restore, &ops.eval_batch,
        &ops.mixed_batch, &ops.verify, &ops.verify_commit, &ops.draft, &ops.hash})
    *slot = fn;
  int rc = ds4tp_worker_run(live(), &ops, &state);
  if (rc != DS4TP_OK && state.error) std::rethrow_exception(state.error);
  check(rc);
}

}  // namespace cxx
}  // namespace ds4tp

#include "ds4tp_group.hpp"  // ds4tp::Group (N ranks, all-reduce)

#endif  // DS4TP_HPP
