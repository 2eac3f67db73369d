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
#define DS4TP_PROTOCOL_VERSION 1

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
  int32_t gate_timeout_ms;     /* gate without progress (default 750) */
  int32_t big_gate_timeout_ms; /* waiting for the peer to reach a big
                                  gate; prefill skew (default 10000) */
  int32_t frame_timeout_ms;    /* control replies (default 30000) */

  /* Wait policy: busy-poll this long before blocking in the kernel.
   * 0 = always block; default 200. */
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
   * HMAC-SHA256 challenge-response. NULL/0 = the DS4TP_PSK or
   * DS4TP_PSK_FILE environment variable, else no authentication. */
  const void *psk;
  uint32_t psk_bytes;
  const char *psk_file; /* read at ds4tp_new; must not be group/world readable */
} ds4tp_options;

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

typedef struct ds4tp_slab_layout {
  uint32_t size;        /* sizeof(ds4tp_slab_layout), set by caller */
  uint32_t slots;       /* n_layer * 2 row-gate slots */
  uint32_t batch_gates; /* n_layer * DS4TP_BATCH_GATES_PER_LAYER */
  uint32_t batch_rows;  /* DS4TP_BATCH_MAX_ROWS */
  uint64_t total_bytes;
  uint64_t vec_bytes;   /* n_embd * 4 */
  uint64_t vec_stride;  /* distance between consecutive vectors */
  uint64_t flag_stride; /* distance between consecutive flag words */
  uint64_t out_offset;  /* slots vectors: this rank's partials */
  uint64_t in_offset;   /* slots vectors: the peer's partials */
  uint64_t in_seq_offset;    /* slots u64: seq of the landed in vector */
  uint64_t token_offset;     /* {u64 seq, i32 token}, 64 bytes */
  uint64_t gpu_flags_offset; /* slots u64: engine "gate reached" words */
  uint64_t batch_out_offset; /* batch_gates * batch_rows vectors */
  uint64_t batch_in_offset;
  uint64_t batch_gate_stride; /* batch_rows * vec_stride */
  uint64_t big_out_offset;    /* staging for big gates */
  uint64_t big_in_offset;
  uint64_t big_staging_bytes;
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
 * EIO, EUNSUPPORTED (requested transport impossible). */
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
 * page-aligned, zeroed slab itself (ds4tp_slab_base returns it). Call
 * after ds4tp_connect, before the first gate. */
DS4TP_API int ds4tp_attach_slab(ds4tp_pair *pair, void *base,
                                uint64_t bytes);
/* The attached slab's base, NULL when none. */
DS4TP_API void *ds4tp_slab_base(const ds4tp_pair *pair);
/* Stops the data plane and forgets the slab; later gates fail with
 * ESTATE. Call before freeing engine-owned slab memory. */
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
 * memory). The peer may arrive up to big_gate_timeout_ms late. */
DS4TP_API int ds4tp_big_gate_exchange(ds4tp_pair *pair, uint32_t layer,
                                      uint64_t seq, const void *out,
                                      void *in, uint64_t bytes);

#ifdef __cplusplus
}
#endif
#endif /* DS4TP_H */
