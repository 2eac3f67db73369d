/*
 * libds4tp: tensor-parallel transport between the ranks of an LLM engine.
 *
 * One public header, C99 and C++. Every function returns an int status
 * (0 = DS4TP_OK, negative = a DS4TP_E* code) unless it says otherwise; a
 * failed call leaves a message in words on the handle (ds4tp_errmsg) and on
 * the calling thread (ds4tp_last_error).
 *
 * Lifecycle (both ranks):
 *   ds4tp_options_init + ds4tp_identity_init, fill in
 *   ds4tp_new          validate, leader binds its listener (port readable)
 *   ds4tp_connect      blocking bring-up: dial/accept, identity hello,
 *                      transport negotiation, data connection
 *   ds4tp_attach_slab  hand over (or let the library allocate) the slab
 *   ds4tp_gate_exchange / batch / big, many times
 *   ds4tp_free
 *
 * Threading: one thread may run gates (the data plane) while another runs
 * control calls; gates themselves must not run concurrently with each
 * other. Query functions (ds4tp_failed, ds4tp_errmsg, ...) may be called
 * from any thread at any time.
 */
#ifndef DS4TP_H
#define DS4TP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define DS4TP_API __attribute__((visibility("default")))
#else
#define DS4TP_API
#endif

/* ------------------------------------------------------------------ */
/* Versions. Same major version = same ABI.                             */

#define DS4TP_VERSION_MAJOR 0
#define DS4TP_VERSION_MINOR 1
#define DS4TP_VERSION_PATCH 0
#define DS4TP_VERSION_HEX                                                  \
  ((DS4TP_VERSION_MAJOR << 16) | (DS4TP_VERSION_MINOR << 8) |              \
   DS4TP_VERSION_PATCH)
/* Wire protocol version carried in the hello; both ranks must agree. */
#define DS4TP_PROTOCOL_VERSION 3

/* Returns DS4TP_VERSION_HEX of the linked library. */
DS4TP_API unsigned ds4tp_version(void);
/* Returns "MAJOR.MINOR.PATCH" of the linked library (static storage). */
DS4TP_API const char *ds4tp_version_string(void);
/* Returns the wire protocol version the linked library speaks. */
DS4TP_API unsigned ds4tp_protocol_version(void);

/* ------------------------------------------------------------------ */
/* Status codes. Numbers are pinned: they never change once released.   */

#define DS4TP_STATUS_MAP(XX)                                               \
  XX(OK, 0, "success")                                                     \
  XX(EINVAL, -1, "invalid argument")                                       \
  XX(ETIMEDOUT, -2, "timed out")                                           \
  XX(EPEERCLOSED, -3, "peer closed the connection")                        \
  XX(EIDENTITY, -4, "engine identity mismatch")                            \
  XX(EDESYNC, -5, "ranks out of lockstep")                                 \
  XX(EPROTO, -6, "protocol error")                                         \
  XX(EAUTH, -7, "authentication failed")                                   \
  XX(EIO, -8, "i/o error")                                                 \
  XX(EUNSUPPORTED, -9, "not supported")                                    \
  XX(ECANCELLED, -10, "cancelled")                                         \
  XX(EFAILED, -11, "handle failed earlier")                                \
  XX(EVERSION, -12, "protocol version mismatch")                           \
  XX(ESTATE, -13, "call not valid in this state")                          \
  XX(ENOMEM, -14, "out of memory")                                         \
  XX(EDIVERGED, -15, "lockstep state diverged")                            \
  XX(EREMOTE, -16, "peer reported a failure")

typedef enum ds4tp_status {
#define DS4TP_STATUS_ENUM_(name, value, msg) DS4TP_##name = value,
  DS4TP_STATUS_MAP(DS4TP_STATUS_ENUM_)
#undef DS4TP_STATUS_ENUM_
  DS4TP_STATUS_MIN_ = -16
} ds4tp_status;

/* Short description of a status code; never NULL. */
DS4TP_API const char *ds4tp_strerror(int status);
/* Symbolic name of a status code ("DS4TP_ETIMEDOUT"); never NULL. */
DS4TP_API const char *ds4tp_err_name(int status);
/* Message of the last failed call made by this thread, "" if none. Valid
 * until this thread's next ds4tp call. */
DS4TP_API const char *ds4tp_last_error(void);

/* ------------------------------------------------------------------ */
/* Constants.                                                           */

enum {
  DS4TP_GATE_ATTN = 0,
  DS4TP_GATE_FFN = 1,
  DS4TP_GATES_PER_LAYER = 2,
  /* Rows of a verify-block batch gate (seed row plus drafts). */
  DS4TP_BATCH_MAX_ROWS = 8,
  /* Batch gate indices per layer; batch index = layer * 2 + gate. */
  DS4TP_BATCH_GATES_PER_LAYER = 2,
  /* 64-bit words of the gate slot mask: up to 256 slots (128 layers). */
  DS4TP_GATE_MASK_WORDS = 4,
  /* Largest opaque engine blob carried in the hello. */
  DS4TP_ENGINE_BLOB_MAX = 4096
};

typedef enum ds4tp_role {
  DS4TP_ROLE_NONE = 0,
  DS4TP_ROLE_LEADER = 1, /* rank 0: listens, drives the lockstep */
  DS4TP_ROLE_WORKER = 2  /* rank 1: dials the leader, mirrors it */
} ds4tp_role;

typedef enum ds4tp_transport {
  DS4TP_TRANSPORT_AUTO = 0, /* best both ranks offer */
  DS4TP_TRANSPORT_TCP = 1,
  DS4TP_TRANSPORT_SHM = 2,
  DS4TP_TRANSPORT_RDMA = 3
} ds4tp_transport;

/* Lower-case name of a transport value ("tcp"); "?" when unknown. */
DS4TP_API const char *ds4tp_transport_name(int transport);

/* Whether `transport` (TCP, SHM or RDMA) can run on this host: returns 1
 * or 0, and writes what was found or what is missing (e.g. "libibverbs
 * found no RDMA devices") into `why` (NUL-terminated, truncated to
 * `why_len`; may be NULL). No network I/O. Returns 0 for AUTO or an
 * unknown value. */
DS4TP_API int ds4tp_transport_available(int transport, char *why,
                                        size_t why_len);

typedef enum ds4tp_log_level {
  DS4TP_LOG_ERROR = 0,
  DS4TP_LOG_WARN = 1,
  DS4TP_LOG_INFO = 2, /* bring-up progress */
  DS4TP_LOG_DEBUG = 3
} ds4tp_log_level;

/* Log sink. Called from the thread that made the ds4tp call, never from
 * inside a gate exchange. `msg` has no trailing newline. */
typedef void (*ds4tp_log_fn)(void *user_data, int level, const char *msg);

/* ------------------------------------------------------------------ */
/* Options. Call ds4tp_options_init first: it sets `size` and defaults;  */
/* a later library version may grow the struct at the end.             */

typedef struct ds4tp_options {
  uint32_t size;     /* sizeof(ds4tp_options) as compiled by the caller */
  int32_t role;      /* ds4tp_role; required */
  int32_t transport; /* ds4tp_transport; default AUTO */

  /* Leader: address to listen on (default "127.0.0.1"); port 0 picks a
   * free port, readable with ds4tp_listen_port after ds4tp_new. */
  const char *listen_host;
  int32_t listen_port;
  /* Worker: leader address to dial (default "127.0.0.1"). */
  const char *leader_host;
  int32_t leader_port;

  /* Deadlines in milliseconds, all > 0. */
  int32_t connect_timeout_ms;  /* whole bring-up (default 60000) */
  int32_t hello_timeout_ms;    /* one connection's hello (default 2000) */
  int32_t gate_timeout_ms;     /* row/batch gate: no progress once the
                                  peer's bytes started (default 750) */
  int32_t big_gate_timeout_ms; /* big gate: no progress once the peer's
                                  bytes started (default 10000) */
  int32_t frame_timeout_ms;    /* control frame once its first byte came,
                                  and the shortest reply wait (30000) */

  /* Wait policy: busy-poll this long before blocking in the kernel.
   * DS4TP_SPIN_ADAPTIVE (-1, the default) learns the spin per pair: up to
   * 1000 us while recent waits ended inside the spin window, shrinking
   * toward 0 (block at once) while they did not, as on an oversubscribed
   * host; over shm it yields instead of spinning while the peer's last
   * wait began on this rank's CPU. 0 = always block; 1..10000000 = a
   * fixed spin. */
  int32_t spin_us;

  /* Logging: default sink writes INFO and above to stderr. */
  ds4tp_log_fn log_fn;
  void *log_user_data;
  int32_t log_level;

  /* Control plane: largest frame payload a peer may send; a larger
   * header is a protocol error before anything is allocated.
   * Default 64 MiB. */
  uint32_t max_frame_bytes;

  /* RDMA verbs transport: device name (NULL = first with an active
   * port), port number (default 1), GID index (-1 = pick, preferring
   * RoCE v2). */
  const char *rdma_device;
  int32_t rdma_port;
  int32_t rdma_gid_index;

  /* Authentication: a pre-shared key turns the hello into a mutual
   * HMAC-SHA256 challenge-response (both ranks need the same key, at
   * least 16 bytes). NULL/0 = the DS4TP_PSK (the key's bytes) or
   * DS4TP_PSK_FILE (a key file) environment variable, else none. A key
   * file loses one trailing newline; ds4tp_new fails with EINVAL when it
   * is not a regular file of this user (or root) with mode 0600 or less. */
  const void *psk;
  uint32_t psk_bytes;
  const char *psk_file; /* read at ds4tp_new; must not be group/world readable */

  /* Peer liveness (docs/RELIABILITY.md): both ranks' watcher threads
   * send heartbeats on the control connection. A peer whose heartbeats
   * stop for peer_silence_ms (stopped, frozen, link cut) fails every wait
   * with DS4TP_ETIMEDOUT naming the silence (default 1000, 200..600000).
   * A live peer may reach a gate, or answer a control call, up to
   * peer_arrival_timeout_ms late (default 300000;
   * DS4TP_ARRIVAL_UNLIMITED = wait as long as it stays alive). */
  int32_t peer_silence_ms;
  int32_t peer_arrival_timeout_ms;
} ds4tp_options;

/* peer_arrival_timeout_ms: no limit while the peer is alive. */
#define DS4TP_ARRIVAL_UNLIMITED (-1)
/* spin_us (ds4tp_options, ds4tp_gate_service_options): the adaptive wait
 * policy, the default of both (older libraries reject -1 with EINVAL). */
#define DS4TP_SPIN_ADAPTIVE (-1)

/* Fills `opt` with defaults (role NONE: you must set it). */
DS4TP_API void ds4tp_options_init(ds4tp_options *opt);

/* ------------------------------------------------------------------ */
/* Engine identity: both ranks must present the same one (ctx_size      */
/* excepted), or bring-up fails with DS4TP_EIDENTITY naming the field.   */

typedef struct ds4tp_identity {
  uint32_t size; /* sizeof(ds4tp_identity) as compiled by the caller */
  uint64_t model_bytes; /* model file size or another content measure */
  uint32_t model_id;    /* engine's model variant */
  uint32_t n_layer;
  uint32_t n_embd; /* gate vectors are n_embd f32 */
  uint32_t n_vocab;
  uint32_t quant_bits;
  uint32_t ctx_size; /* not compared; the peer's is ds4tp_peer_ctx_size */
  /* Decode gate schedule: the slot (layer*2 + gate) that row gate `seq`
   * (1-based) must hit. A nonempty mask lists the slots in firing order;
   * else with gates_per_token > 0:
   *   slot(seq) = start + ((seq-1) % gates_per_token) * step;
   * else every slot fires in order: slot(seq) = (seq-1) % (n_layer*2). */
  uint32_t gate_slot_start;
  uint32_t gate_slot_step;
  uint32_t gates_per_token;
  uint64_t gate_slot_mask[DS4TP_GATE_MASK_WORDS];
  /* Engine feature bits both ranks must share (arithmetic, layouts). */
  uint64_t features;
  /* Opaque engine bytes compared byte for byte (e.g. a model hash). */
  const void *engine_blob;
  uint32_t engine_blob_bytes;
} ds4tp_identity;

/* Zeroes `id` and sets `size`. */
DS4TP_API void ds4tp_identity_init(ds4tp_identity *id);

/* Slot that row gate `seq` must hit under `id`'s schedule, or -1 when
 * seq is 0 or the identity is invalid. Pure. */
DS4TP_API int64_t ds4tp_schedule_slot(const ds4tp_identity *id,
                                      uint64_t seq);

/* ------------------------------------------------------------------ */
/* Slab layout. All offsets are from the slab base; every region starts  */
/* on a 4096-byte boundary and every vector on a 64-byte one.           */
/* Row-gate vector `slot` (= layer * 2 + gate) is at                     */
/* out_offset + slot * slot_stride; the 64 bytes before each one belong  */
/* to the library (the tcp transport puts the gate header there, so a    */
/* gate is one send and one receive). Batch rows lie vec_stride apart,   */
/* back to back when n_embd is a multiple of 16.                         */

typedef struct ds4tp_slab_layout {
  uint32_t size;        /* sizeof(ds4tp_slab_layout), set by caller */
  uint32_t slots;       /* n_layer * 2 row-gate slots */
  uint32_t batch_gates; /* n_layer * DS4TP_BATCH_GATES_PER_LAYER */
  uint32_t batch_rows;  /* DS4TP_BATCH_MAX_ROWS */
  uint64_t total_bytes;
  uint64_t vec_bytes;   /* n_embd * 4 */
  uint64_t vec_stride;  /* distance between consecutive batch rows */
  uint64_t flag_stride; /* distance between consecutive flag words */
  uint64_t out_offset;  /* slot 0's vector; this rank's partials */
  uint64_t in_offset;   /* slot 0's vector; the peer's partials */
  uint64_t in_seq_offset;    /* slots u64: seq of the landed in vector */
  uint64_t token_offset;     /* {u64 seq, i32 token}, 64 bytes */
  uint64_t gpu_flags_offset; /* slots u64: engine "gate reached" words */
  uint64_t batch_out_offset; /* batch_gates * batch_rows vectors */
  uint64_t batch_in_offset;
  uint64_t batch_gate_stride; /* batch_rows * vec_stride */
  uint64_t big_out_offset;    /* staging for big gates */
  uint64_t big_in_offset;
  uint64_t big_staging_bytes;
  uint64_t gpu_release_offset; /* slots u64: gate service "gate done" words */
  uint64_t slot_stride; /* distance between row-gate vectors: vec_stride + 64 */
} ds4tp_slab_layout;

/* Computes the layout for `id`. `out->size` must be set by the caller.
 * Returns DS4TP_EINVAL for an invalid identity. Pure. */
DS4TP_API int ds4tp_slab_layout_compute(const ds4tp_identity *id,
                                        ds4tp_slab_layout *out);

/* ------------------------------------------------------------------ */
/* The pair handle.                                                     */

typedef struct ds4tp_pair ds4tp_pair;

/* Validates options and identity and creates a handle. A leader binds
 * and listens here, so ds4tp_listen_port works before ds4tp_connect.
 * On failure *out is NULL and ds4tp_last_error() says why. */
DS4TP_API int ds4tp_new(ds4tp_pair **out, const ds4tp_options *opt,
                        const ds4tp_identity *id);

/* Blocking bring-up. Leader: accepts connections until a worker completes
 * a valid hello (stray or silent connections are dropped); worker: dials
 * with retry. Both compare identities and negotiate the transport.
 * Fails with ETIMEDOUT (connect deadline), EIDENTITY, EVERSION, EPROTO,
 * EIO, EUNSUPPORTED (requested transport impossible), EAUTH (worker: the
 * pre-shared keys differ or only one rank has one; a leader instead drops
 * such a worker, logs it and keeps waiting). */
DS4TP_API int ds4tp_connect(ds4tp_pair *pair);

/* Releases everything. Accepts NULL. */
DS4TP_API void ds4tp_free(ds4tp_pair *pair);

/* Leader: the bound port (after ds4tp_new); worker: the dialed port. */
DS4TP_API int ds4tp_listen_port(const ds4tp_pair *pair);
/* 0 for the leader, 1 for the worker; -1 for NULL. */
DS4TP_API int ds4tp_rank(const ds4tp_pair *pair);
/* Negotiated ds4tp_transport after ds4tp_connect, AUTO before. */
DS4TP_API int ds4tp_transport_active(const ds4tp_pair *pair);
/* The peer's ctx_size from its hello (0 before connect). */
DS4TP_API uint32_t ds4tp_peer_ctx_size(const ds4tp_pair *pair);

/* 1 once a data- or control-plane failure latched, else 0. */
DS4TP_API int ds4tp_failed(const ds4tp_pair *pair);
/* Latches failure from the engine side (e.g. a GPU error at a gate), so
 * every later call returns DS4TP_EFAILED at once. */
DS4TP_API void ds4tp_mark_failed(ds4tp_pair *pair, const char *reason);
/* Message of the handle's last failed call, "" if none. The returned
 * pointer is valid until this thread's next ds4tp call. */
DS4TP_API const char *ds4tp_errmsg(const ds4tp_pair *pair);

/* ------------------------------------------------------------------ */
/* Slab.                                                                */

/* This pair's layout (identity-derived). Valid after ds4tp_new. */
DS4TP_API int ds4tp_slab_layout_get(const ds4tp_pair *pair,
                                    ds4tp_slab_layout *out);
/* Total slab bytes. 0 for NULL. */
DS4TP_API uint64_t ds4tp_slab_bytes(const ds4tp_pair *pair);
/* Offsets of one vector; UINT64_MAX when out of range. */
DS4TP_API uint64_t ds4tp_slab_out_offset(const ds4tp_pair *pair,
                                         uint32_t layer, uint32_t gate);
DS4TP_API uint64_t ds4tp_slab_in_offset(const ds4tp_pair *pair,
                                        uint32_t layer, uint32_t gate);
/* Row 0 of batch gate `index` (< n_layer * 2); rows follow at vec_stride. */
DS4TP_API uint64_t ds4tp_slab_batch_out_offset(const ds4tp_pair *pair,
                                               uint32_t index);
DS4TP_API uint64_t ds4tp_slab_batch_in_offset(const ds4tp_pair *pair,
                                              uint32_t index);
DS4TP_API uint64_t ds4tp_slab_gpu_flags_offset(const ds4tp_pair *pair);

/* Hands the slab to the transport. `base` must be 64-byte aligned and
 * `bytes` >= ds4tp_slab_bytes. With base NULL the library allocates a
 * page-aligned, zeroed slab itself (ds4tp_slab_base returns it); under
 * the shm transport that slab is shared memory the peer writes into
 * directly, while an engine-owned slab costs one extra copy per gate.
 * Call after ds4tp_connect, before the first gate. */
DS4TP_API int ds4tp_attach_slab(ds4tp_pair *pair, void *base,
                                uint64_t bytes);
/* The attached slab's base, NULL when none. */
DS4TP_API void *ds4tp_slab_base(const ds4tp_pair *pair);
/* Stops the data plane (and a running gate service) and forgets the
 * slab; later gates fail with ESTATE. Call before freeing engine-owned
 * slab memory. */
DS4TP_API void ds4tp_detach_slab(ds4tp_pair *pair);

/* ------------------------------------------------------------------ */
/* Data plane. All three return once the peer's payload has fully landed */
/* or with an error; any error latches the failed state.                */

/* Sends out[layer][gate] to the peer's in[layer][gate] and waits for the
 * peer's partial of the same (layer, gate, seq). Row gate seqs start at
 * 1, rise by one per gate and must hit the identity's schedule. */
DS4TP_API int ds4tp_gate_exchange(ds4tp_pair *pair, uint32_t layer,
                                  uint32_t gate, uint64_t seq);

/* Verify-block batch gate: swaps `rows` (1..DS4TP_BATCH_MAX_ROWS) rows of
 * batch gate `index` (batch_out -> peer's batch_in). `seq` is the caller's
 * batch counter (nonzero); both ranks must pass the same values. */
DS4TP_API int ds4tp_batch_gate_exchange(ds4tp_pair *pair, uint32_t index,
                                        uint32_t rows, uint64_t seq);

/* Prefill gate of any size: sends `bytes` from `out` and receives the
 * peer's `bytes` into `in` (distinct, non-overlapping buffers; any
 * memory). A live peer may arrive up to peer_arrival_timeout_ms late. */
DS4TP_API int ds4tp_big_gate_exchange(ds4tp_pair *pair, uint32_t layer,
                                      uint64_t seq, const void *out,
                                      void *in, uint64_t bytes);

/* ------------------------------------------------------------------ */
/* Engine integration: callbacks, staging hooks, gate service.          */
/*                                                                      */
/* Three ways to drive the gates (README "Integrating an engine"):      */
/*  1. call:     the engine's gate thread calls ds4tp_*_exchange.       */
/*  2. callback: the engine's own gate machinery (e.g. a GPU backend's  */
/*               service thread) holds a ds4tp_gate_fn and calls        */
/*               ds4tp_gate_callback with the pair as user data.        */
/*  3. service:  the library runs the gate thread; GPU kernels (or CPU  */
/*               threads) write a ready word into the slab and wait on  */
/*               a release word (ds4tp_gate_service_start).             */
/*                                                                      */
/* Threading contract (all three): exactly one thread at a time runs    */
/* gates (calls, callbacks, or the service thread while it runs); the   */
/* gate calls of one pair never overlap. Staging hooks run on that gate */
/* thread. Query functions and ds4tp_mark_failed are safe from any      */
/* thread at any time.                                                  */

/* Gate machinery callback shapes. They return 1 when the exchange
 * succeeded and 0 when it failed (the convention GPU gate machinery
 * uses: "mark failed if the callback returns 0"). */
typedef int (*ds4tp_gate_fn)(void *user_data, uint32_t layer, uint32_t gate,
                             uint64_t seq);
typedef int (*ds4tp_batch_gate_fn)(void *user_data, uint32_t index,
                                   uint32_t rows, uint64_t seq);
typedef int (*ds4tp_big_gate_fn)(void *user_data, uint32_t layer,
                                 uint64_t seq, const void *out, void *in,
                                 uint64_t bytes);

/* ds4tp_gate_exchange / ds4tp_batch_gate_exchange /
 * ds4tp_big_gate_exchange with `pair` (a ds4tp_pair *) as user data, so
 * they can be registered directly as ds4tp_*_fn. Unlike every other call
 * they return 1 on success and 0 on failure, and ANY failure (including
 * a bad argument or a wrong seq) latches the pair as failed: after a 0,
 * ds4tp_failed(pair) is 1 and ds4tp_errmsg(pair) / ds4tp_last_error()
 * say why. A NULL pair returns 0 (message in ds4tp_last_error). */
DS4TP_API int ds4tp_gate_callback(void *pair, uint32_t layer, uint32_t gate,
                                  uint64_t seq);
DS4TP_API int ds4tp_batch_gate_callback(void *pair, uint32_t index,
                                        uint32_t rows, uint64_t seq);
DS4TP_API int ds4tp_big_gate_callback(void *pair, uint32_t layer,
                                      uint64_t seq, const void *out,
                                      void *in, uint64_t bytes);

/* Staging hooks, for engines whose partials live in device memory the
 * transport (NIC, peer process) cannot see. Around every row and batch
 * gate, on the gate thread, the library calls
 *   before_exchange: copy this rank's partial from the device INTO
 *                    `slab_out` (the gate's out vector / batch rows);
 *   after_exchange:  copy the peer's partial FROM `slab_in` (the gate's
 *                    in vector / batch rows) to the device.
 * kind is DS4TP_STAGE_ROW (a = layer, b = gate) or DS4TP_STAGE_BATCH
 * (a = batch index, b = rows; rows lie vec_stride apart and `bytes` is
 * (rows-1)*vec_stride + vec_bytes). A hook returns 0 on success; any
 * other value fails the gate with DS4TP_EIO naming the value, and the
 * pair is failed. after_exchange runs only when the exchange succeeded.
 * Hooks must not call back into the library. Big gates take caller
 * buffers and are never staged. Without hooks (the default) the slab is
 * used in place. Either hook may be NULL. */
enum { DS4TP_STAGE_ROW = 1, DS4TP_STAGE_BATCH = 2 };

typedef struct ds4tp_staging_hooks {
  uint32_t size; /* sizeof(ds4tp_staging_hooks) as compiled by the caller */
  void *user_data;
  int (*before_exchange)(void *user_data, int kind, uint32_t a, uint32_t b,
                         uint64_t seq, void *slab_out, uint64_t bytes);
  int (*after_exchange)(void *user_data, int kind, uint32_t a, uint32_t b,
                        uint64_t seq, const void *slab_in, uint64_t bytes);
} ds4tp_staging_hooks;

/* Installs (copies) `hooks`; NULL removes them. Call after ds4tp_new and
 * before the first row or batch gate, with no gate service running:
 * later calls fail with DS4TP_ESTATE. Fails with DS4TP_EINVAL for a bad
 * size field. */
DS4TP_API int ds4tp_set_staging_hooks(ds4tp_pair *pair,
                                      const ds4tp_staging_hooks *hooks);

/* Gate service: a library thread that runs the row gates for kernels.
 *
 * Words (u64, 8-byte aligned, each on its own 64-byte line; slab offsets
 * from ds4tp_slab_layout: gpu_flags_offset / gpu_release_offset +
 * slot * flag_stride, slot = layer * 2 + gate):
 *   ready[slot]    written by the ENGINE only: store `seq` (release order)
 *                  once out[slot] holds this rank's partial for gate seq.
 *   release[slot]  written by the SERVICE only: `seq` (release order)
 *                  once in[slot] holds the peer's partial for gate seq;
 *                  DS4TP_GATE_POISON in every word when the pair failed.
 * A kernel waits while release[slot] < seq, then gives up if the word is
 * DS4TP_GATE_POISON, else reads in[slot] (acquire order). The poison
 * overwrites every word, so a kernel that had not yet read its release
 * gives up too: once the pair failed, the eval must stop either way. Kernels fire
 * gates in the identity's schedule order (ds4tp_schedule_slot), one
 * outstanding gate at a time per pair; seqs continue the pair's row gate
 * count (the first gate after ds4tp_attach_slab is seq 1). ds4tp_attach_slab
 * zeroes both regions. The engine touches no other library word (an
 * engine running its own machinery, callback style, may use the release
 * words itself while the service is stopped).
 *
 * While the service runs it is the only gate caller: the engine's own
 * ds4tp_*_exchange calls fail with DS4TP_ESTATE (callbacks return 0).
 * Batch and big gates: stop the service, call them, start it again.
 *
 * Failure (exchange error, peer gone, ds4tp_mark_failed from any thread,
 * a ready word that contradicts the schedule): the service latches the
 * pair failed, stores DS4TP_GATE_POISON into every release word so every
 * waiting or later kernel gives up, and its thread ends; state FAILED. */
#define DS4TP_GATE_POISON UINT64_MAX

typedef enum ds4tp_service_state {
  DS4TP_SERVICE_STOPPED = 0,
  DS4TP_SERVICE_RUNNING = 1,
  DS4TP_SERVICE_FAILED = 2
} ds4tp_service_state;

/* How the service thread waits for the next ready word: busy-poll for
 * spin_us after the last gate, then sched_yield() between polls until
 * yield_us, then sleep sleep_us between polls (each sleep adds up to
 * sleep_us plus the kernel's timer slack to a gate that arrives then).
 * spin_us DS4TP_SPIN_ADAPTIVE (the default) learns the spin: up to 1000 us
 * while recent gates arrived inside it, toward 0 (yield at once) while
 * they did not, e.g. when the host has fewer free cores than spinners. */
typedef struct ds4tp_gate_service_options {
  uint32_t size;           /* sizeof(ds4tp_gate_service_options) */
  int32_t spin_us;         /* default DS4TP_SPIN_ADAPTIVE; or 0..10000000 */
  int32_t yield_us;        /* default 10000; 0..10000000 */
  int32_t sleep_us;        /* default 20; 1..100000 */
  int32_t stop_timeout_ms; /* ds4tp_gate_service_stop's wait; 0 (default)
                              = the pair's gate_timeout_ms + 1000 */
  int32_t cpu;             /* pin the thread to this CPU; -1 = no (default) */
} ds4tp_gate_service_options;

/* Fills `opt` with defaults and sets `size`. */
DS4TP_API void ds4tp_gate_service_options_init(ds4tp_gate_service_options *opt);

/* Starts the service thread (opt NULL = defaults). Needs an attached slab.
 * Fails with DS4TP_ESTATE (no slab, already running), DS4TP_EINVAL (bad
 * options, CPU cannot be pinned), DS4TP_EFAILED (pair failed). */
DS4TP_API int ds4tp_gate_service_start(ds4tp_pair *pair,
                                       const ds4tp_gate_service_options *opt);

/* Stops the service and joins its thread. A gate whose ready word is
 * already written is served first; call it when no kernel is heading for
 * a gate (one that arrives later is never released). ds4tp_detach_slab
 * and ds4tp_free also stop the service, and then poison the release words
 * so any kernel still waiting gives up. Returns 0 once the thread has
 * ended (also after a service failure, or when none ran); DS4TP_ETIMEDOUT
 * if it is still inside an exchange at stop_timeout_ms (it ends by itself
 * within gate_timeout_ms: call stop again). On stream words
 * (ds4tp_gate_stream_start) the ended thread has poisoned them. */
DS4TP_API int ds4tp_gate_service_stop(ds4tp_pair *pair);

/* ds4tp_service_state of the pair's service (STOPPED for NULL). Any
 * thread. */
DS4TP_API int ds4tp_gate_service_state(const ds4tp_pair *pair);

/* The last row gate seq the pair completed (0 before the first); while
 * the service runs, the last one it released. Any thread. */
DS4TP_API uint64_t ds4tp_gate_seq(const ds4tp_pair *pair);

/* ------------------------------------------------------------------ */
/* Control plane: lockstep mirroring (docs/PROTOCOL.md, "Control       */
/* frames").                                                            */
/*                                                                      */
/* The leader mirrors every engine session call to the worker as a      */
/* command frame on the control connection; the worker runs the same    */
/* call (by hand with ds4tp_recv_command, or with ds4tp_worker_run and  */
/* a callback table) and answers where the protocol says so:            */
/*   SESSION_CREATE, SESSION_DESTROY, MTP, SPEC_RESTORE, EVAL_BATCH,     */
/*   MIXED_BATCH        -> COMMAND_ACK (leader: ds4tp_wait_ack)          */
/*   SYNC, SYNC_IMAGES  -> SYNC_ACK    (leader: ds4tp_wait_sync)         */
/*   HASH               -> HASH        (inside ds4tp_hash_check)         */
/*   EVAL, REWIND, INVALIDATE, DRAFT, VERIFY, VERIFY_COMMIT, STOP ->     */
/*                         no status                                    */
/* and then, when the command asked for logits (logits_floats > 0) and  */
/* its status is 0, the worker's logits halves in order                 */
/* (ds4tp_recv_logits): one for EVAL, SYNC, SYNC_IMAGES and a rollback  */
/* commit that replays tokens; one per item for EVAL_BATCH; 1 + items   */
/* for MIXED_BATCH (the prefill session first). The leader cannot send  */
/* its next command while a reply of the last is unread (DS4TP_ESTATE   */
/* names it), so the two streams never drift apart silently.            */
/*                                                                      */
/* Symmetric calls (ds4tp_sync_checkpoint, ds4tp_block_begin/end,       */
/* ds4tp_small_exchange, ds4tp_agree_*) are made by both ranks at the   */
/* same point of their execution, e.g. the worker from inside the      */
/* command callback that mirrors the leader's call.                     */
/*                                                                      */
/* Failures: a worker whose command fails sends the failure to the      */
/* leader; the leader call that reads next returns DS4TP_EREMOTE and    */
/* ds4tp_remote_status holds the worker's status. A reply or agreement  */
/* from a live peer may start up to peer_arrival_timeout_ms late (never */
/* less than frame_timeout_ms); frame_timeout_ms bounds the rest of a   */
/* frame once it started. A dead peer ends a wait at once, a silent one */
/* after peer_silence_ms, and a watcher thread latches the pair failed  */
/* when the peer goes away or silent while nobody is reading.           */
/*                                                                      */
/* Threading: control calls use only the control connection, so one    */
/* thread may make them while another runs gates. The control calls of */
/* one pair are serialized internally, but their lockstep order is the  */
/* caller's: make them from one thread. ds4tp_mark_failed from any      */
/* thread ends a blocked control wait with DS4TP_EFAILED (e.g. to stop  */
/* ds4tp_worker_run from a signal-handling thread).                     */

/* timeout_ms value: wait for as long as the peer lives. */
#define DS4TP_WAIT_FOREVER (-1)

enum {
  DS4TP_SMALL_EXCHANGE_MAX = 192,   /* bytes per ds4tp_small_exchange */
  DS4TP_HEAD_ROW_MAX = 131072,      /* floats per head row */
  DS4TP_DRAFTER_META_BYTES = 64,    /* ds4tp_agree_drafter_split metadata */
  DS4TP_IMAGE_FINGERPRINT_BYTES = 32,
  DS4TP_MTP_LIMIT_MAX = 7,          /* drafts per MTP cycle */
  DS4TP_REPLY_MESSAGE_MAX = 256     /* ds4tp_reply.message */
};

/* Commands the leader sends; the numbers are the frame types. */
typedef enum ds4tp_command_kind {
  DS4TP_CMD_SYNC = 1,             /* session_id, tokens */
  DS4TP_CMD_EVAL = 2,             /* session_id, seq, token */
  DS4TP_CMD_REWIND = 3,           /* session_id, pos */
  DS4TP_CMD_INVALIDATE = 4,       /* session_id */
  DS4TP_CMD_STOP = 5,
  DS4TP_CMD_HASH = 6,             /* session_id, seq, hash (the leader's) */
  DS4TP_CMD_VERIFY = 11,          /* session_id, tokens = drafts, flags */
  DS4TP_CMD_VERIFY_COMMIT = 12,   /* session_id, mode, count */
  DS4TP_CMD_SESSION_CREATE = 13,  /* session_id, ctx_size */
  DS4TP_CMD_SESSION_DESTROY = 14, /* session_id */
  DS4TP_CMD_EVAL_BATCH = 15,      /* items */
  DS4TP_CMD_MIXED_BATCH = 16,     /* session_id (prefill), tokens (prompt), items */
  DS4TP_CMD_SYNC_IMAGES = 18,     /* session_id, tokens, images */
  DS4TP_CMD_MTP = 21,             /* session_id, seq, token, limit */
  DS4TP_CMD_DRAFT = 23,           /* session_id, token, pos, mode */
  DS4TP_CMD_SPEC_RESTORE = 24     /* session_id, pos */
} ds4tp_command_kind;

/* Upper-case name of a command kind or any control frame type ("EVAL");
 * "?" when unknown. */
DS4TP_API const char *ds4tp_command_name(int kind);

/* Statuses in acks: 0 done; these positive values are outcomes, not
 * failures (the worker keeps serving). */
enum {
  DS4TP_ACK_DONE = 0,
  DS4TP_ACK_UNAVAILABLE = 1, /* SPEC_RESTORE: state not kept (invalidate,
                                then sync in full); SESSION_DESTROY: no
                                such session */
  DS4TP_ACK_CANCELLED = 2    /* SYNC: stopped at an agreed checkpoint */
};

/* VERIFY flags. HEAD_SPLIT: each rank computes the verify head on its
 * vocabulary half; the ranks combine row top-1s (ds4tp_small_exchange) and
 * the worker sends its half of the committed row (ds4tp_head_row_send).
 * DRAFT_SHARED: the block holds rows of the last lockstep DRAFT proposal,
 * which the worker holds too. DRAFT_SEED (needs DRAFT_SHARED): the block
 * starts with the seed row, so the proposal rows are drafts[1..]. */
#define DS4TP_VERIFY_HEAD_SPLIT 1u
#define DS4TP_VERIFY_DRAFT_SHARED 2u
#define DS4TP_VERIFY_DRAFT_SEED 4u

/* VERIFY_COMMIT modes: ROLLBACK restores the frontier from before the
 * block and replays `count` (0..drafts) tokens with gated decode; FULL
 * keeps every row (count 0); PREFIX keeps the first `count` rows
 * (1..drafts-1). */
typedef enum ds4tp_commit_mode {
  DS4TP_COMMIT_ROLLBACK = 0,
  DS4TP_COMMIT_FULL = 1,
  DS4TP_COMMIT_PREFIX = 2
} ds4tp_commit_mode;

/* DRAFT modes: MAINTAIN brings the drafter history up to pos; PROPOSE
 * also runs the proposal for (token, pos) on both drafter halves. */
typedef enum ds4tp_draft_mode {
  DS4TP_DRAFT_MAINTAIN = 1,
  DS4TP_DRAFT_PROPOSE = 2
} ds4tp_draft_mode;

typedef struct ds4tp_batch_item {
  uint64_t session_id; /* nonzero */
  int32_t token;
  uint32_t flags;      /* reserved, 0 */
} ds4tp_batch_item;

/* An image inside a prompt: tokens token_start.. token_start+token_count-1
 * are replaced by token_count rows of data_width floats (data_width must be
 * the identity's n_embd). */
typedef struct ds4tp_image_span {
  uint32_t token_start;
  uint32_t token_count;
  uint32_t data_width;
  uint32_t width, height;                 /* pixels, > 0 */
  uint32_t content_width, content_height; /* pixels without padding */
  uint8_t fingerprint[DS4TP_IMAGE_FINGERPRINT_BYTES];
  const float *embd; /* token_count * data_width floats */
} ds4tp_image_span;

/* ---- leader: commands. Each returns 0 once the frame is written; EINVAL
 * for a bad argument, ESTATE when called on the worker, after STOP, or
 * while a reply of the previous command is unread; ETIMEDOUT,
 * EPEERCLOSED, EIO when the frame cannot be written (the pair is then
 * failed). logits_floats is the size of the worker's logits half the
 * leader will read per row, 0 for none. */

DS4TP_API int ds4tp_send_session_create(ds4tp_pair *pair, uint64_t session_id,
                                        uint32_t ctx_size);
DS4TP_API int ds4tp_send_session_destroy(ds4tp_pair *pair, uint64_t session_id);
/* The session's tokens become exactly `tokens` (n_tokens may be 0). */
DS4TP_API int ds4tp_send_sync(ds4tp_pair *pair, uint64_t session_id,
                              const int32_t *tokens, uint32_t n_tokens,
                              uint32_t logits_floats);
/* Sync with image embeddings (copied into the frame before returning). */
DS4TP_API int ds4tp_send_sync_images(ds4tp_pair *pair, uint64_t session_id,
                                     const int32_t *tokens, uint32_t n_tokens,
                                     const ds4tp_image_span *images,
                                     uint32_t n_images, uint32_t logits_floats);
/* One decode step. `seq` is the leader's eval counter: it must rise with
 * every EVAL and MTP (the worker checks it). No allocation. */
DS4TP_API int ds4tp_send_eval(ds4tp_pair *pair, uint64_t session_id,
                              uint64_t seq, int32_t token,
                              uint32_t logits_floats);
/* Multi-token-prediction cycle drafting up to `limit` (1..7) tokens. */
DS4TP_API int ds4tp_send_mtp(ds4tp_pair *pair, uint64_t session_id,
                             uint64_t seq, int32_t token, uint32_t limit);
DS4TP_API int ds4tp_send_rewind(ds4tp_pair *pair, uint64_t session_id,
                                int32_t pos);
DS4TP_API int ds4tp_send_invalidate(ds4tp_pair *pair, uint64_t session_id);
/* State-only restore to `pos`: no gates, no logits. Read the status with
 * ds4tp_wait_ack before mirroring replay EVALs: DS4TP_ACK_DONE restored,
 * DS4TP_ACK_UNAVAILABLE = invalidate and sync in full. */
DS4TP_API int ds4tp_send_spec_restore(ds4tp_pair *pair, uint64_t session_id,
                                      int32_t pos);
DS4TP_API int ds4tp_send_eval_batch(ds4tp_pair *pair,
                                    const ds4tp_batch_item *items,
                                    uint32_t count, uint32_t logits_floats);
/* A prefill chunk of `prompt` for prefill_session_id plus one decode
 * step for each item. */
DS4TP_API int ds4tp_send_mixed_batch(ds4tp_pair *pair,
                                     uint64_t prefill_session_id,
                                     const int32_t *prompt,
                                     uint32_t prompt_count,
                                     const ds4tp_batch_item *items,
                                     uint32_t count, uint32_t logits_floats);
/* Announces a verify block of n (1..DS4TP_BATCH_MAX_ROWS) drafts before
 * both ranks run it; the next command must be ds4tp_send_verify_commit. */
DS4TP_API int ds4tp_send_verify(ds4tp_pair *pair, uint64_t session_id,
                                const int32_t *drafts, uint32_t n,
                                uint32_t flags);
/* The leader's decision on the open verify block (ds4tp_commit_mode).
 * logits_floats applies to a ROLLBACK with count > 0 only. */
DS4TP_API int ds4tp_send_verify_commit(ds4tp_pair *pair, int32_t mode,
                                       int32_t count, uint32_t logits_floats);
/* Lockstep drafter step (ds4tp_draft_mode); token >= 0, pos > 0. */
DS4TP_API int ds4tp_send_draft(ds4tp_pair *pair, uint64_t session_id,
                               int32_t token, int32_t pos, uint32_t mode);
/* Ends the lockstep; the worker loop returns 0. */
DS4TP_API int ds4tp_send_stop(ds4tp_pair *pair);

/* ---- leader: replies (each waited for as described above). */

/* Reads the COMMAND_ACK of the last command for `session_id` (0 for an
 * EVAL_BATCH). Returns 0 with *status (may be NULL) >= 0; DS4TP_EREMOTE
 * when the worker failed the command (*status and ds4tp_remote_status
 * hold its status; the pair is failed); ESTATE when no ack is due;
 * EDESYNC when the ack is for another command; ETIMEDOUT, EPEERCLOSED. */
DS4TP_API int ds4tp_wait_ack(ds4tp_pair *pair, uint64_t session_id,
                             int32_t *status);
/* Reads the SYNC_ACK of the last SYNC/SYNC_IMAGES: *status as for
 * ds4tp_wait_ack, *position = tokens the worker's session holds now
 * (compare with yours). Either pointer may be NULL. */
DS4TP_API int ds4tp_wait_sync(ds4tp_pair *pair, uint64_t session_id,
                              int32_t *status, uint32_t *position);
/* Reads the next logits half of the last command into `half`; count must
 * be the command's logits_floats. ESTATE when none is due, EDESYNC when
 * the half is not the one expected. */
DS4TP_API int ds4tp_recv_logits(ds4tp_pair *pair, float *half,
                                uint32_t count);
/* The status the worker reported with its failure (0 if none). Any
 * thread. */
DS4TP_API int32_t ds4tp_remote_status(const ds4tp_pair *pair);

/* ---- both ranks ---- */

/* Lockstep check of a state hash. Leader: sends HASH(session, seq, hash)
 * and reads the worker's; worker: answers the DS4TP_CMD_HASH it just
 * received with its own hash. Returns 0 when equal; DS4TP_EDIVERGED when
 * the hashes differ (both values in the message; the pair stays usable:
 * invalidate and sync the session again, or stop); DS4TP_EDESYNC when the
 * ranks check different (session, seq); transport errors otherwise,
 * never DS4TP_EDIVERGED for them. */
DS4TP_API int ds4tp_hash_check(ds4tp_pair *pair, uint64_t session_id,
                               uint64_t seq, uint64_t hash);
/* Agreed cancellation: both ranks call at matching prefill boundaries
 * with the same (point, current, total); *cancelled = either rank's
 * `requested`, so both stop at the same point and neither stops while
 * its peer waits in a gate. EDESYNC when the boundaries differ. */
DS4TP_API int ds4tp_sync_checkpoint(ds4tp_pair *pair, uint32_t point,
                                    int32_t current, int32_t total,
                                    int requested, int *cancelled);
/* Start-up agreement of engine execution modes: `flags` (engine-defined
 * layout bits, e.g. how experts are split) must be equal on both ranks,
 * else DS4TP_EIDENTITY naming both; *caps holds this rank's capability
 * bits on entry and the intersection of both ranks' on return (NULL =
 * none). */
DS4TP_API int ds4tp_agree_execution_mode(ds4tp_pair *pair, uint32_t flags,
                                         uint32_t *caps);
/* Start-up agreement of the split drafter. `meta` is
 * DS4TP_DRAFTER_META_BYTES bytes (NULL = zeros). *agreed = both ranks
 * opted in with identical metadata; *peer_on = the peer opted in. Both
 * opted in with different metadata: DS4TP_EIDENTITY naming the first
 * differing byte. Either out pointer may be NULL. */
DS4TP_API int ds4tp_agree_drafter_split(ds4tp_pair *pair, int mine_on,
                                        const void *meta, int *agreed,
                                        int *peer_on);
/* Verify block begin: both ranks pass the same rows (1..8) and n_layers
 * (1..n_layer), else DS4TP_EDESYNC; *gates_per_layer offers 1 or 2 batch
 * gates per layer on entry (NULL = 1) and holds the smaller offer on
 * return. Head rows sent after it are keyed by this block. */
DS4TP_API int ds4tp_block_begin(ds4tp_pair *pair, uint32_t rows,
                                uint32_t n_layers, uint32_t *gates_per_layer);
/* Verify block end on both ranks; ESTATE when no block is open. */
DS4TP_API int ds4tp_block_end(ds4tp_pair *pair);
/* Swaps `bytes` (1..DS4TP_SMALL_EXCHANGE_MAX) bytes with the peer: both
 * ranks must pass the same count, else DS4TP_EDESYNC naming both. */
DS4TP_API int ds4tp_small_exchange(ds4tp_pair *pair, const void *mine,
                                   void *peer, uint32_t bytes);
/* Worker -> leader output-head row (1..DS4TP_HEAD_ROW_MAX floats) of row
 * `row` of the current verify block. The leader's receive requires the
 * same (block, row, floats) and skips rows of earlier blocks, so a row
 * sent for a block the leader rolled back is never taken for a later one.
 * ESTATE before the first ds4tp_block_begin or on the wrong rank. */
DS4TP_API int ds4tp_head_row_send(ds4tp_pair *pair, uint32_t row,
                                  const float *src, uint32_t floats);
DS4TP_API int ds4tp_head_row_recv(ds4tp_pair *pair, uint32_t row, float *dst,
                                  uint32_t floats);

/* ---- worker ---- */

/* A received command. The arrays are owned by the struct: release them
 * with ds4tp_command_free. */
typedef struct ds4tp_command {
  uint32_t size;   /* sizeof(ds4tp_command), set by ds4tp_command_init */
  int32_t kind;    /* ds4tp_command_kind */
  uint64_t session_id;
  uint64_t seq;    /* EVAL, MTP: the eval seq; HASH: the checked seq */
  uint64_t hash;   /* HASH: the leader's hash */
  int32_t token;   /* EVAL, MTP, DRAFT */
  int32_t pos;     /* REWIND, SPEC_RESTORE, DRAFT */
  int32_t limit;   /* MTP */
  int32_t count;   /* VERIFY_COMMIT */
  uint32_t mode;   /* DRAFT: ds4tp_draft_mode; VERIFY_COMMIT: ds4tp_commit_mode */
  uint32_t flags;  /* VERIFY: DS4TP_VERIFY_* */
  uint32_t ctx_size;      /* SESSION_CREATE */
  uint32_t logits_floats; /* per logits half the leader reads; 0 none */
  int32_t *tokens;        /* SYNC*: prompt; VERIFY: drafts; MIXED_BATCH: prefill prompt */
  uint32_t n_tokens;
  ds4tp_batch_item *items; /* EVAL_BATCH, MIXED_BATCH */
  uint32_t n_items;
  ds4tp_image_span *images; /* SYNC_IMAGES (embd owned too) */
  uint32_t n_images;
} ds4tp_command;

/* Zeroes `cmd` and sets its size. */
DS4TP_API void ds4tp_command_init(ds4tp_command *cmd);
/* Frees the arrays of `cmd` (NULL-safe) and clears them. */
DS4TP_API void ds4tp_command_free(ds4tp_command *cmd);

/* Worker: waits up to timeout_ms (DS4TP_WAIT_FOREVER: as long as the
 * leader lives) for the next command and fills `cmd`, which must come
 * from ds4tp_command_init: the arrays of a previous command in it are
 * freed first, so one struct can be reused; free the last one with
 * ds4tp_command_free. ESTATE while a reply to
 * the previous command is still owed or after STOP; EPROTO for a
 * malformed frame; EDESYNC for a frame that is no command here;
 * ETIMEDOUT, EPEERCLOSED, EFAILED. */
DS4TP_API int ds4tp_recv_command(ds4tp_pair *pair, ds4tp_command *cmd,
                                 int32_t timeout_ms);
/* Worker replies to the last command: COMMAND_ACK, SYNC_ACK (position =
 * tokens the session holds after the sync), one logits half of
 * cmd->logits_floats floats. ESTATE when that reply is not owed. */
DS4TP_API int ds4tp_send_ack(ds4tp_pair *pair, int32_t status);
DS4TP_API int ds4tp_send_sync_ack(ds4tp_pair *pair, int32_t status,
                                  uint32_t position);
DS4TP_API int ds4tp_send_logits(ds4tp_pair *pair, const float *half,
                                uint32_t count);
/* Reports that the last command failed with `status` (engine-defined)
 * and why; the leader's next read returns DS4TP_EREMOTE. The worker takes
 * no more commands afterwards. */
DS4TP_API int ds4tp_send_error(ds4tp_pair *pair, int32_t status,
                               const char *message);

/* What a worker callback hands back. The loop presets every field. */
typedef struct ds4tp_reply {
  float *logits;          /* logits_rows * logits_floats floats to fill,
                             row after row; NULL when none are due */
  uint32_t logits_rows;
  uint32_t logits_floats;
  uint32_t position;      /* SYNC*: tokens held after it (preset n_tokens) */
  uint64_t hash;          /* HASH: this rank's state hash */
  char message[DS4TP_REPLY_MESSAGE_MAX]; /* why, when returning < 0 */
} ds4tp_reply;

/* One engine callback. Returns 0 on success, a positive ack status for
 * commands that have one (e.g. DS4TP_ACK_UNAVAILABLE), or a negative
 * engine status on failure: the loop then reports it to the leader and
 * returns. `pair` may be used for symmetric calls (ds4tp_sync_checkpoint,
 * ds4tp_block_begin, ...) and gates, not for command receipt. */
typedef int (*ds4tp_command_fn)(void *user_data, ds4tp_pair *pair,
                                const ds4tp_command *cmd, ds4tp_reply *reply);

/* One callback per command kind; NULL = unsupported (reported to the
 * leader as a failure with status DS4TP_EUNSUPPORTED if it arrives). */
typedef struct ds4tp_worker_ops {
  uint32_t size; /* sizeof(ds4tp_worker_ops), set by ds4tp_worker_ops_init */
  ds4tp_command_fn session_create, session_destroy;
  ds4tp_command_fn sync, sync_images, eval, mtp;
  ds4tp_command_fn rewind, invalidate, spec_restore;
  ds4tp_command_fn eval_batch, mixed_batch;
  ds4tp_command_fn verify, verify_commit, draft;
  ds4tp_command_fn hash;
} ds4tp_worker_ops;

/* Zeroes `ops` and sets its size. */
DS4TP_API void ds4tp_worker_ops_init(ds4tp_worker_ops *ops);

/* Worker loop: receives commands, calls the matching callback, sends the
 * acks, statuses, hash answers and logits halves the protocol requires,
 * until STOP (returns 0), a failure of the pair (ETIMEDOUT on a missing
 * VERIFY_COMMIT, EPEERCLOSED, EPROTO, EDESYNC, EFAILED after
 * ds4tp_mark_failed, ...), or a callback failure (returns DS4TP_EFAILED
 * after reporting the callback's status to the leader). A hash mismatch
 * is reported to both ranks and the loop goes on. Command arrays are
 * valid during the callback only; no allocation per EVAL. */
DS4TP_API int ds4tp_worker_run(ds4tp_pair *pair, const ds4tp_worker_ops *ops,
                               void *user_data);


/* ------------------------------------------------------------------ */
/* Groups: N ranks (2..16) and collectives for tensor-parallel engines.  */
/* Beside the pair; no lockstep control plane. Every rank calls the same */
/* collectives in the same order with the same counts. Each call waits   */
/* at most op_timeout_ms for the slowest rank; a rank's death, stop or   */
/* ds4tp_group_mark_failed fails the group on every rank (EPEERCLOSED,   */
/* ETIMEDOUT or EFAILED naming the rank), and later calls return         */
/* DS4TP_EFAILED. One thread per handle at a time.                       */

typedef struct ds4tp_group ds4tp_group;

typedef enum ds4tp_dtype {
  DS4TP_DTYPE_F32 = 0,
  DS4TP_DTYPE_F16 = 1,
  DS4TP_DTYPE_BF16 = 2
} ds4tp_dtype;

typedef enum ds4tp_reduce_op { DS4TP_OP_SUM = 0 } ds4tp_reduce_op;

typedef struct ds4tp_group_options {
  uint32_t size; /* sizeof(ds4tp_group_options) as compiled by the caller */
  /* Rank and group size; -1 = from the launcher's environment:
   * RANK/WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE
   * (mpirun), SLURM_PROCID/SLURM_NTASKS (srun). */
  int32_t rank;
  int32_t group_size;
  /* Rank 0's rendezvous address: rank 0 listens, the others dial.
   * NULL / -1 = MASTER_ADDR / MASTER_PORT, else "127.0.0.1" / 29600. */
  const char *rendezvous_host;
  int32_t rendezvous_port;
  int32_t transport;          /* AUTO (shm when all ranks share a host), TCP, SHM */
  int32_t connect_timeout_ms; /* whole bring-up (default 60000) */
  int32_t op_timeout_ms;      /* one collective waiting on a peer that makes no
                               * progress (tcp: bytes still moving on a slow
                               * link restart it; default 10000) */
  /* Largest bytes a rank contributes per step; bigger calls run in
   * chunks. Also the size of ds4tp_group_buffer. Default 1 MiB. */
  uint32_t chunk_bytes;
  /* Pre-shared key (>= 16 bytes): every rank proves it to rank 0 with an
   * HMAC-SHA256 over a fresh nonce. NULL/0 = DS4TP_PSK, else none. */
  const void *psk;
  uint32_t psk_bytes;
  /* How a rank waits for its peers (shm and tcp): busy-poll spin_us,
   * then yield the CPU for yield_us, then sleep in the kernel. spin_us
   * means what it means in ds4tp_options: DS4TP_SPIN_ADAPTIVE (-1, the
   * default) learns the spin, at most 20 us and only when the host has
   * more cores than ranks (else none: spinning would keep the awaited
   * rank off the CPU); 0 = never spin; else 1..10000000 us.
   * DS4TP_GROUP_SPIN_US, when set, fixes it (a negative value: none).
   * A caller built before yield_us existed (its `size` ends before it)
   * used the older meaning, which is mapped: 0 (its default) is
   * DS4TP_SPIN_ADAPTIVE, -1 (its "never") is 0. */
  int32_t spin_us;
  /* tcp groups: every rank beats on its rendezvous connection; a rank
   * not heard for peer_silence_ms (stopped, frozen, link cut) fails the
   * group on every rank with DS4TP_ETIMEDOUT naming it, even between
   * calls (default 1000, 200..600000; shm groups read the ranks' process
   * state instead). Fields added later: older callers get the default. */
  int32_t peer_silence_ms;
  /* The yield phase after the spin: -1 (default) = DS4TP_GROUP_YIELD_US,
   * else 200 us; 0 = sleep right after the spin; else 1..10000000 us. */
  int32_t yield_us;
} ds4tp_group_options;

/* Fills `opt` with defaults (rank and size from the environment). */
DS4TP_API void ds4tp_group_options_init(ds4tp_group_options *opt);

/* Creates this rank's handle; nothing is dialled yet. `identity` (may be
 * NULL) must match on every rank. EINVAL for bad options (size 2..16,
 * rank in range, rank and size known). */
DS4TP_API int ds4tp_group_new(ds4tp_group **out, const ds4tp_group_options *opt,
                              const ds4tp_identity *identity);

/* Bring-up: every rank dials rank 0 with its identity (and key proof);
 * rank 0 checks identities (EIDENTITY naming the rank and field), ranks
 * (duplicate: EPROTO; missing at the deadline: ETIMEDOUT naming them),
 * group sizes and keys (EAUTH), and sends the roster; then the data
 * links (shm segment or a tcp full mesh) are opened. */
DS4TP_API int ds4tp_group_connect(ds4tp_group *g);

/* In-process form (the ncclCommInitAll shape): n handles for n threads of
 * this process, connected, sharing memory, no sockets. opt may be NULL;
 * its rank, size, rendezvous and transport are ignored. */
DS4TP_API int ds4tp_group_new_local(ds4tp_group **groups, int n,
                                    const ds4tp_group_options *opt,
                                    const ds4tp_identity *identity);

/* Accepts NULL. Peers still in a call see this rank leave. */
DS4TP_API void ds4tp_group_free(ds4tp_group *g);

/* In-place all-reduce of `count` elements: f32 accumulation, summed in
 * rank order 0..N-1 on every rank, so every rank gets identical bits. */
DS4TP_API int ds4tp_group_all_reduce(ds4tp_group *g, void *buf, uint64_t count,
                                     int dtype, int op);
/* out[r*bytes .. ] = rank r's `in` (bytes each); out holds size*bytes. */
DS4TP_API int ds4tp_group_all_gather(ds4tp_group *g, const void *in, void *out,
                                     uint64_t bytes);
/* Every rank's buf gets root's bytes. */
DS4TP_API int ds4tp_group_broadcast(ds4tp_group *g, void *buf, uint64_t bytes,
                                    int root);
DS4TP_API int ds4tp_group_barrier(ds4tp_group *g);

/* Library-allocated buffer of chunk_bytes (64-byte aligned) the engine
 * may fill and pass to the calls above; valid until ds4tp_group_free.
 * Over shm, once connected, it lies in the shared segment, and an
 * all_reduce of a vector in it needs no copy in (README "Groups"); take
 * it after ds4tp_group_connect (before, it is a heap buffer). */
DS4TP_API int ds4tp_group_buffer(ds4tp_group *g, void **ptr, uint64_t *bytes);

DS4TP_API int ds4tp_group_rank(const ds4tp_group *g);
DS4TP_API int ds4tp_group_size(const ds4tp_group *g);
/* Active transport (TCP or SHM) after connect, AUTO before. */
DS4TP_API int ds4tp_group_transport(const ds4tp_group *g);
/* Rank 0's rendezvous port after ds4tp_group_new on rank 0 (port 0 asks
 * for a free one), else the configured port. */
DS4TP_API int ds4tp_group_rendezvous_port(const ds4tp_group *g);
/* The failure status once failed, else 0. */
DS4TP_API int ds4tp_group_failed(const ds4tp_group *g);
/* Message of the failure (or last error); never NULL. */
DS4TP_API const char *ds4tp_group_errmsg(const ds4tp_group *g);
/* Fails the group here and on every rank; any thread, async-safe enough
 * to call from a watchdog. */
DS4TP_API void ds4tp_group_mark_failed(ds4tp_group *g);


/* ---- Observability: counters, histograms, Prometheus text, traces ------ */
/* Every pair and group counts its work at no measurable cost (relaxed    */
/* per-thread counters, no lock, allocation or system call on the gate    */
/* path). DS4TP_STATS=0 in the environment skips the clock reads behind   */
/* the histograms (counters still count).                                 */

/* Histogram buckets: bucket i counts values <= 256 ns << i (i < 25);     */
/* the last one (DS4TP_STATS_BUCKETS - 1) everything above. Per bucket,   */
/* not cumulative.                                                        */
#define DS4TP_STATS_BUCKETS 26

typedef struct ds4tp_stats_hist {
  uint64_t count;   /* sum of the buckets */
  uint64_t sum_ns;
  uint64_t buckets[DS4TP_STATS_BUCKETS];
} ds4tp_stats_hist;

/* A snapshot since creation or the last ds4tp_stats_reset. Set `size` to */
/* sizeof(ds4tp_stats) before reading: a binary built against an older,   */
/* smaller struct gets the fields it knows. Pair snapshots fill the gate  */
/* fields, group snapshots the collective ones; the rest stay 0.          */
typedef struct ds4tp_stats {
  uint32_t size;
  int32_t rank;
  int32_t transport;          /* DS4TP_TRANSPORT_* */
  uint32_t reserved0;
  uint64_t row_gates, batch_gates, big_gates;
  uint64_t bytes_sent, bytes_received;   /* payload bytes, not headers */
  uint64_t errors;            /* calls that failed the handle */
  uint64_t timeouts, desyncs; /* of those: DS4TP_ETIMEDOUT, DS4TP_EDESYNC */
  uint64_t rdma_retries, rdma_qp_recreated;
  uint64_t heartbeats_received;
  uint64_t heartbeats_missed; /* our beat periods that brought none */
  /* Gates where the transport tells the peer's arrival apart (tcp: its   */
  /* first bytes; shm: its stamp): time waiting for the peer vs moving.   */
  uint64_t split_gates, peer_wait_ns, transfer_ns;
  uint64_t all_reduces, all_gathers, broadcasts, barriers;  /* groups */
  ds4tp_stats_hist row_gate, batch_gate, big_gate;
  ds4tp_stats_hist control_round_trip;  /* leader: command to first reply */
  ds4tp_stats_hist all_reduce;          /* groups */
  ds4tp_stats_hist row_peer_wait;       /* row gates: the waiting part */
} ds4tp_stats;

/* Fills *st (st->size set by the caller). DS4TP_EINVAL for NULL or a     */
/* size below 16. Any thread, any time, also on a failed pair.            */
DS4TP_API int ds4tp_stats_read(const ds4tp_pair *pair, ds4tp_stats *st);
/* Later snapshots count from now. Any thread. */
DS4TP_API int ds4tp_stats_reset(ds4tp_pair *pair);
/* Upper bound of bucket i in ns (UINT64_MAX for the last). */
DS4TP_API uint64_t ds4tp_stats_bucket_le_ns(int i);
/* Prometheus text exposition (HELP/TYPE lines, ds4tp_* names, labels     */
/* rank, transport and kind; histograms in seconds) written into buf,     */
/* NUL-terminated. *needed (may be NULL) gets the length without the NUL; */
/* DS4TP_ENOMEM when cap <= that length (buf is then left untouched, so   */
/* call again with *needed + 1). buf may be NULL when cap is 0.           */
DS4TP_API int ds4tp_stats_prometheus(const ds4tp_pair *pair, char *buf, size_t cap,
                                     size_t *needed);
DS4TP_API int ds4tp_group_stats_read(const ds4tp_group *g, ds4tp_stats *st);
DS4TP_API int ds4tp_group_stats_reset(ds4tp_group *g);
DS4TP_API int ds4tp_group_stats_prometheus(const ds4tp_group *g, char *buf, size_t cap,
                                           size_t *needed);

/* Tracing: gate and control events go into a preallocated ring (the last */
/* 65536 gates; DS4TP_TRACE_EVENTS sets another count) and are written as */
/* Chrome trace / Perfetto JSON (pid = rank, ts in us of CLOCK_MONOTONIC) */
/* by ds4tp_trace_write and at ds4tp_free. DS4TP_TRACE=path starts it at  */
/* connect ("%r" in the path becomes the rank). Call from the gate thread */
/* or while no gate runs. `ds4tp trace merge a.json b.json -o both.json`  */
/* puts two ranks on one timeline. DS4TP_ESTATE if one already records.   */
DS4TP_API int ds4tp_trace_start(ds4tp_pair *pair, const char *path);
/* Writes the file now (recording goes on). DS4TP_ESTATE when none        */
/* records, DS4TP_EIO when the file cannot be written. */
DS4TP_API int ds4tp_trace_write(ds4tp_pair *pair);
/* Merges two ranks' traces into `out`, shifting b's clock onto a's: 0 on */
/* one host, else estimated from the gates both hold (each rank's gate   */
/* ends after the peer's began). *offset_us and *uncertainty_us (may be   */
/* NULL) get the shift and its half-width. DS4TP_EIO naming the problem. */
DS4TP_API int ds4tp_trace_merge(const char *a, const char *b, const char *out,
                                double *offset_us, double *uncertainty_us);

/* ------------------------------------------------------------------ */
/* GPU streams: stream-ordered gates and all-reduce, no host call per   */
/* gate. The engine's stream writes a READY word (cuStreamWriteValue64) */
/* after its output has landed, and waits on a RELEASE word             */
/* (cuStreamWaitValue64, CU_STREAM_WAIT_VALUE_GEQ) before consuming the */
/* peer's data; the library's service thread serves the gates (pair) or */
/* all-reduces (group) in slot order as ready words appear.             */
/*                                                                      */
/* Words: library-allocated in one page-aligned block (base, bytes),    */
/* `stride` bytes apart, 64-bit (default) or 32-bit (word_bits = 32, for */
/* GPUs without 64-bit stream memory operations: the low 32 bits of the */
/* 64-bit values; they wrap, and GEQ waits compare cyclically). Register */
/* the whole block with cudaHostRegister(base, bytes,                   */
/* cudaHostRegisterMapped) and take device pointers with                */
/* cudaHostGetDevicePointer; unregister before stopping for good / free.*/
/* The block lives until ds4tp_free / ds4tp_group_free.                 */
/*                                                                      */
/* Values, per slot s (pair: s = layer*2 + gate, in the identity's      */
/* schedule order; group: s = (seq - 1) % slots):                       */
/*   DS4TP_STREAM_SEQ    ready and release carry the gate seq (pair: the */
/*                       pair's row gate count + 1, ...; group: 1, 2, ...) */
/*   DS4TP_STREAM_FIXED  both carry s + 1 on every token, so a captured */
/*                       CUDA graph replays unchanged; the service clears */
/*                       ready[s] when it takes it and release[s] once  */
/*                       the stream has written a later ready.           */
/* A stream writes ready[s] = v, waits release[s] >= v (cyclic GEQ),    */
/* then checks release[s] == v on the device: any other value is POISON */
/* (the service failed: peer death, mark_failed, stop, a timeout, an    */
/* out-of-order ready), so the consuming kernel must skip its work and  */
/* raise an error flag the host reads after synchronising (see          */
/* examples/cuda). Poison = last released value + 2^(word_bits - 2):    */
/* every current and later wait passes at once. One outstanding gate per */
/* pair or group; ready words in schedule order. A ready value that     */
/* contradicts it fails the pair / group with DS4TP_EDESYNC naming the  */
/* slot, the value and the expected seq.                                */

typedef enum ds4tp_stream_mode {
  DS4TP_STREAM_SEQ = 0,
  DS4TP_STREAM_FIXED = 1
} ds4tp_stream_mode;

typedef struct ds4tp_stream_options {
  uint32_t size;      /* sizeof(ds4tp_stream_options) */
  uint32_t word_bits; /* 64 (default) or 32 */
  int32_t mode;       /* ds4tp_stream_mode; default DS4TP_STREAM_SEQ */
  /* Groups only (a pair's slots and vectors are its slab's): */
  uint32_t slots;     /* default 2; fixed mode needs >= 2 */
  uint64_t count;     /* elements all-reduced per slot (required) */
  int32_t dtype;      /* ds4tp_dtype; default F32 */
} ds4tp_stream_options;

/* What the engine needs to drive the words; filled by the start calls. */
typedef struct ds4tp_stream_words {
  uint32_t size;      /* set by the caller: sizeof(ds4tp_stream_words) */
  uint32_t word_bits;
  int32_t mode;
  uint32_t slots;
  uint32_t stride;    /* bytes between two slots' words (64) */
  uint32_t reserved;  /* 0; keeps the pointers 8-byte aligned on every ABI */
  void *base;         /* page-aligned block: register this */
  uint64_t bytes;     /* a multiple of the page size */
  void *ready;        /* slot s's ready word at ready + s * stride */
  void *release;      /* slot s's release word at release + s * stride */
  void *data;         /* groups: slot s's vector at data + s * slot_bytes */
  uint64_t slot_bytes;
  uint64_t poison_gap; /* 2^(word_bits - 2) */
} ds4tp_stream_words;

DS4TP_API void ds4tp_stream_options_init(ds4tp_stream_options *opt);

/* Starts the pair's gate service on stream words (svc / opt NULL =
 * defaults) and describes them in *words. The words are created by the
 * first call and kept (same block, same addresses) for the pair's life;
 * a later start with other word_bits or mode reuses the block with every
 * word reset to 0.
 * Each start re-arms the words (undoes a poison): start with the stream
 * idle. Data stay in the slab (out/in vectors), which the engine maps
 * for its device (cudaHostAlloc mapped or cudaHostRegister). Stop with
 * ds4tp_gate_service_stop: in stream mode it poisons the release words
 * after the thread ends, so no stream waits forever. Errors as
 * ds4tp_gate_service_start. */
DS4TP_API int ds4tp_gate_stream_start(ds4tp_pair *pair,
                                      const ds4tp_gate_service_options *svc,
                                      const ds4tp_stream_options *opt,
                                      ds4tp_stream_words *words);

/* Group counterpart: a service thread that all-reduces (sum) slot s's
 * vector of opt->count elements in place when ready[s] appears, then
 * releases it. Every rank starts one with the same options. While it
 * runs it is the group's only caller (direct collectives: DS4TP_ESTATE).
 * The words and vectors are created by the first call and kept; a later
 * start with other slots, count or dtype fails with DS4TP_EINVAL (other
 * word_bits or mode: as for the pair). EINVAL for count 0; EFAILED on a
 * failed group; ESTATE when running or not connected. */
DS4TP_API int ds4tp_group_stream_start(ds4tp_group *g,
                                       const ds4tp_gate_service_options *svc,
                                       const ds4tp_stream_options *opt,
                                       ds4tp_stream_words *words);
/* Serves a ready already written, joins the thread, poisons the release
 * words. 0 once ended; ETIMEDOUT as ds4tp_gate_service_stop. */
DS4TP_API int ds4tp_group_stream_stop(ds4tp_group *g);
/* ds4tp_service_state of the group's stream service. Any thread. */
DS4TP_API int ds4tp_group_stream_state(const ds4tp_group *g);
/* Last seq the group's stream service released (0 before the first). */
DS4TP_API uint64_t ds4tp_group_stream_seq(const ds4tp_group *g);

#ifdef __cplusplus
}
#endif
#endif /* DS4TP_H */
