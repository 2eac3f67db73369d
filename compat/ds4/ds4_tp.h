/*
 * Seed-compatible tensor-parallel API (ds4_tp_*) on top of libds4tp.
 *
 * Drop-in for engines that carried their own ds4_tp.c: the declarations
 * below keep the seed's names, signatures and return conventions (1 =
 * success, 0 = failure, err/errlen filled where the seed takes them, -1 where
 * the seed documents it). Every call is implemented with the public
 * libds4tp C API (include/ds4tp/ds4tp.h); see compat/ds4/README.md for the
 * migration notes and the few behaviours that differ.
 *
 * Engine types come from the engine's own "ds4.h" (ds4_tp_options,
 * ds4_engine_options, ds4_distributed_options, ds4_vision_span, ds4_engine).
 * The layer reads only the fields listed in README.md ("Fields the layer
 * reads"); the numeric values of the engine's role and transport enums can
 * be overridden with the DS4_TP_COMPAT_* macros below.
 */
#ifndef DS4_TP_H
#define DS4_TP_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "ds4.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Engine header shape ------------------------------------------------
 *
 * The forks' ds4_tp.h differ; this header takes the shape of the engine it
 * replaces, chosen with DS4_TP_COMPAT_SHAPE (set it in the engine's CFLAGS,
 * e.g. -DDS4_TP_COMPAT_SHAPE=DS4_TP_COMPAT_SHAPE_LEGACY). README.md lists
 * the shape of each fork checked.
 *
 *   SEED      the seed header (target): vision spans, gate mask, 5-argument
 *             agree_execution_mode (full_experts), (mode, token_count)
 *             verify commits, MTP, spec restore, DSpark, small exchange.
 *   V21       as SEED with the 4-argument agree_execution_mode (no
 *             full_experts): socrat3/ds4, 1bit-MONSTER/ds4.
 *   LEGACY    no multimodal (no ds4_vision_span), no gate mask, no
 *             execution-mode agreement, (full_accept, replay_n) verify
 *             commits, frames 1..17 only: mcx/ds4 and the July 2026 lineage.
 *   ODINLINK  LEGACY plus the identity's runtime_features word and the
 *             OdinLink calls (big-gate waves, logits top-2, logits halves
 *             exchange, big direct regions): wkljohn/ds4-strix-halo-tp-odinlink.
 *
 * Unset: SEED. The shapes cannot be told apart by the preprocessor (the
 * engines declare DS4_TP_GATE_MASK_WORDS as an enum constant and
 * ds4_vision_span as a typedef), so a LEGACY or ODINLINK engine sets the
 * macro. Each feature macro below can also be set on its own; it wins over
 * the shape. */
#define DS4_TP_COMPAT_SHAPE_SEED 1
#define DS4_TP_COMPAT_SHAPE_V21 2
#define DS4_TP_COMPAT_SHAPE_LEGACY 3
#define DS4_TP_COMPAT_SHAPE_ODINLINK 4
#ifndef DS4_TP_COMPAT_SHAPE
#define DS4_TP_COMPAT_SHAPE DS4_TP_COMPAT_SHAPE_SEED
#endif
#if DS4_TP_COMPAT_SHAPE < DS4_TP_COMPAT_SHAPE_SEED || \
    DS4_TP_COMPAT_SHAPE > DS4_TP_COMPAT_SHAPE_ODINLINK
#error "DS4_TP_COMPAT_SHAPE: use one of the DS4_TP_COMPAT_SHAPE_* values"
#endif
#define DS4_TP_COMPAT_NEW_SHAPE_ (DS4_TP_COMPAT_SHAPE <= DS4_TP_COMPAT_SHAPE_V21)

/* 1: the engine's ds4.h defines ds4_vision_span (token_start, token_count,
 * data_width, width, height, content_width, content_height, fingerprint,
 * embd); declares ds4_tp_send_sync_multimodal and the command's images. */
#ifndef DS4_TP_COMPAT_VISION
#define DS4_TP_COMPAT_VISION DS4_TP_COMPAT_NEW_SHAPE_
#endif
/* Layout of the engine's ds4_vision_span. 1 (the engines: socrat3/ds4 and
 * the seed lineage): { token_start; ds4_vision_embedding embedding; } with
 * embedding.{data, token_count, width, height, content_width,
 * content_height, fingerprint}; rows are n_embd floats wide (layout and
 * grid_width/grid_height do not cross, as in the engines' own wire).
 * 2 (flat): { token_start, token_count, data_width, width, height,
 * content_width, content_height, fingerprint, embd }. */
#ifndef DS4_TP_COMPAT_VISION_SPAN
#define DS4_TP_COMPAT_VISION_SPAN 1
#endif
/* 1: the identity carries gate_slot_mask[DS4_TP_GATE_MASK_WORDS], with the
 * engine's DS4_TP_GATE_MASK_WORDS (an enum constant or macro of its ds4.h;
 * libds4tp carries 4 words, set bits beyond word 3 fail ds4_tp_create). */
#ifndef DS4_TP_COMPAT_GATE_MASK
#define DS4_TP_COMPAT_GATE_MASK DS4_TP_COMPAT_NEW_SHAPE_
#endif
/* 1: the identity carries runtime_features (exact match between ranks,
 * checked right after the hello) and ds4_tp_runtime_features exists. */
#ifndef DS4_TP_COMPAT_RUNTIME_FEATURES
#define DS4_TP_COMPAT_RUNTIME_FEATURES (DS4_TP_COMPAT_SHAPE == DS4_TP_COMPAT_SHAPE_ODINLINK)
#endif
/* 1: the OdinLink extra calls are declared. */
#ifndef DS4_TP_COMPAT_ODINLINK_API
#define DS4_TP_COMPAT_ODINLINK_API (DS4_TP_COMPAT_SHAPE == DS4_TP_COMPAT_SHAPE_ODINLINK)
#endif
/* Arguments of ds4_tp_agree_execution_mode: 5 (tp, flags, full_experts,
 * err, errlen), 4 (tp, flags, err, errlen), 0 (not declared). */
#ifndef DS4_TP_COMPAT_AGREE_ARGS
#if DS4_TP_COMPAT_SHAPE == DS4_TP_COMPAT_SHAPE_SEED
#define DS4_TP_COMPAT_AGREE_ARGS 5
#elif DS4_TP_COMPAT_SHAPE == DS4_TP_COMPAT_SHAPE_V21
#define DS4_TP_COMPAT_AGREE_ARGS 4
#else
#define DS4_TP_COMPAT_AGREE_ARGS 0
#endif
#endif
/* 1: ds4_tp_send/recv_verify_commit take (full_accept, replay_n): nonzero
 * full_accept keeps the block, else roll back and replay replay_n tokens.
 * 0: (mode, token_count) with ds4_tp_verify_commit_mode (adds PREFIX). */
#ifndef DS4_TP_COMPAT_COMMIT_ACCEPT
#define DS4_TP_COMPAT_COMMIT_ACCEPT (!DS4_TP_COMPAT_NEW_SHAPE_)
#endif
/* Numeric values of the engine's ds4_tp_options.role / .transport and of
 * ds4_distributed_options.role. Defaults follow the seed engine. */
#ifndef DS4_TP_COMPAT_ROLE_NONE
#define DS4_TP_COMPAT_ROLE_NONE 0
#endif
#ifndef DS4_TP_COMPAT_ROLE_LEADER
#define DS4_TP_COMPAT_ROLE_LEADER 1
#endif
#ifndef DS4_TP_COMPAT_ROLE_WORKER
#define DS4_TP_COMPAT_ROLE_WORKER 2
#endif
#ifndef DS4_TP_COMPAT_TRANSPORT_AUTO
#define DS4_TP_COMPAT_TRANSPORT_AUTO 0
#endif
#ifndef DS4_TP_COMPAT_TRANSPORT_RDMA
#define DS4_TP_COMPAT_TRANSPORT_RDMA 1
#endif
#ifndef DS4_TP_COMPAT_TRANSPORT_TCP
#define DS4_TP_COMPAT_TRANSPORT_TCP 2
#endif
/* Not in the seed: libds4tp's shared-memory transport (same host). */
#ifndef DS4_TP_COMPAT_TRANSPORT_SHM
#define DS4_TP_COMPAT_TRANSPORT_SHM 3
#endif
#ifndef DS4_TP_COMPAT_DIST_ROLE_NONE
#define DS4_TP_COMPAT_DIST_ROLE_NONE 0
#endif
#ifndef DS4_TP_COMPAT_DIST_ROLE_COORDINATOR
#define DS4_TP_COMPAT_DIST_ROLE_COORDINATOR 1
#endif
#ifndef DS4_TP_COMPAT_DIST_ROLE_WORKER
#define DS4_TP_COMPAT_DIST_ROLE_WORKER 2
#endif
/* Nonzero when *dist carries options TP cannot run with (--layers, any
 * --dist-* or distributed debug option). Default: the fields every fork
 * checked has in ds4_distributed_options (layers.set, prefill_chunk,
 * prefill_window, activation_bits, replay_check, debug), tested as the
 * engines' own ds4_tp.c tests them. */
#ifndef DS4_TP_COMPAT_DIST_EXTRA_SET
#define DS4_TP_COMPAT_DIST_EXTRA_SET(dist)                                  \
  ((dist)->layers.set || (dist)->prefill_chunk || (dist)->prefill_window || \
   (dist)->activation_bits || (dist)->replay_check || (dist)->debug)
#endif

typedef struct ds4_tp ds4_tp;

enum {
  DS4_TP_GATE_ATTN = 0,
  DS4_TP_GATE_FFN = 1,
  DS4_TP_GATES_PER_LAYER = 2,
  DS4_TP_BATCH_MAX_ROWS = 8,
  DS4_TP_BATCH_GATES_PER_LAYER = 2
};

/* Engine identity; both ranks must present the same one (ctx_size
 * excepted). Gate schedule as in ds4tp_identity. */
typedef struct {
  uint64_t gguf_bytes;
  uint32_t model_id;
  uint32_t n_layer;
  uint32_t n_embd;
  uint32_t n_vocab;
  uint32_t quant_bits;
  uint32_t ctx_size;
#if DS4_TP_COMPAT_RUNTIME_FEATURES
  /* Engine arithmetic/layout choices both ranks must share exactly. */
  uint32_t runtime_features;
#endif
  uint32_t gate_slot_start;
  uint32_t gate_slot_step;
  uint32_t gates_per_token;
#if DS4_TP_COMPAT_GATE_MASK
  uint64_t gate_slot_mask[DS4_TP_GATE_MASK_WORDS];
#endif
} ds4_tp_identity;

/* True when opt->role is leader or worker. */
bool ds4_tp_enabled(const ds4_tp_options *opt);

typedef enum {
  DS4_TP_CLI_ERROR = -1,
  DS4_TP_CLI_NOT_MATCHED = 0,
  DS4_TP_CLI_MATCHED = 1
} ds4_tp_cli_parse_result;

/* Parses argv[*index]: 1 consumed (and *index advanced past a value), 0 not
 * a TP option, -1 missing or bad value (err filled). */
int ds4_tp_parse_cli_arg(const char *arg, int *index, int argc, char **argv,
                         ds4_tp_options *opt, char *err, size_t errlen);
/* Moves --role/--listen/--coordinator from the distributed options into a
 * requested TP configuration and clears *dist. 1 ok (also when TP was not
 * requested: nothing changes), 0 on a bad combination (err filled). */
int ds4_tp_adopt_distributed_options(ds4_tp_options *tp,
                                     ds4_distributed_options *dist,
                                     char *err, size_t errlen);
/* Prints the TP options' help. */
void ds4_tp_usage(FILE *fp);
/* Engine's to implement (reads backend and streaming fields this layer
 * does not know); see README.md. */
int ds4_tp_validate_engine_options(const ds4_engine_options *opt, char *err,
                                   size_t errlen);

/* Blocking bring-up (ds4tp_new + ds4tp_connect). 1 ok, 0 failure. */
int ds4_tp_create(ds4_tp **out, const ds4_tp_options *opt,
                  const ds4_tp_identity *id, char *err, size_t errlen);
void ds4_tp_free(ds4_tp *tp);
int ds4_tp_rank(const ds4_tp *tp);
bool ds4_tp_is_rdma(const ds4_tp *tp);
/* True once connected: small exchanges and head rows, the seed's
 * mailbox-only features, run on every libds4tp transport. */
bool ds4_tp_command_mailbox_active(const ds4_tp *tp);
uint32_t ds4_tp_peer_ctx(const ds4_tp *tp);

enum {
  DS4_TP_MODE_EXPERT_INTERMEDIATE_SPLIT = 1u,
  DS4_TP_MODE_V41_SHARED_OWNER = 2u,
  DS4_TP_MODE_V41_SHARED_BALANCE = 4u,
  DS4_TP_MODE_V41_DSPARK = 8u
};
/* flags must match on both ranks; *full_experts: local capability in,
 * both ranks' AND out (may be NULL). 1 ok, 0 failure. */
#if DS4_TP_COMPAT_AGREE_ARGS == 5
int ds4_tp_agree_execution_mode(ds4_tp *tp, uint32_t flags, bool *full_experts,
                                char *err, size_t errlen);
#elif DS4_TP_COMPAT_AGREE_ARGS == 4
int ds4_tp_agree_execution_mode(ds4_tp *tp, uint32_t flags, char *err,
                                size_t errlen);
#elif DS4_TP_COMPAT_AGREE_ARGS != 0
#error "DS4_TP_COMPAT_AGREE_ARGS: 0, 4 or 5"
#endif
bool ds4_tp_failed(const ds4_tp *tp);
void ds4_tp_mark_failed(ds4_tp *tp);

/* Slab. Sizes and offsets are libds4tp's layout, not the seed's: always
 * use these functions. Batch rows lie ds4_tp_slab_vec_stride() apart. */
uint64_t ds4_tp_slab_bytes(uint32_t n_layer, uint32_t n_embd);
uint64_t ds4_tp_slab_out_offset(const ds4_tp *tp, uint32_t layer, uint32_t gate);
uint64_t ds4_tp_slab_in_offset(const ds4_tp *tp, uint32_t layer, uint32_t gate);
uint64_t ds4_tp_slab_batch_out_offset(const ds4_tp *tp, uint32_t layer);
uint64_t ds4_tp_slab_batch_in_offset(const ds4_tp *tp, uint32_t layer);
uint64_t ds4_tp_slab_gpu_flags_offset(const ds4_tp *tp);
/* Not in the seed: distance between batch rows (n_embd * 4 rounded up to
 * 64 bytes); 0 for NULL. */
uint64_t ds4_tp_slab_vec_stride(const ds4_tp *tp);
/* base: 64-byte aligned, ds4_tp_slab_bytes() long; NULL lets the library
 * allocate it (shared memory under shm). 1 ok, 0 failure. */
int ds4_tp_attach_slab(ds4_tp *tp, void *base, char *err, size_t errlen);
void ds4_tp_detach_slab(ds4_tp *tp);

/* Gates: 1 ok, 0 failure (the pair is then failed). */
int ds4_tp_gate_exchange(ds4_tp *tp, uint32_t layer, uint32_t gate, uint64_t seq);
int ds4_tp_batch_gate_exchange(ds4_tp *tp, uint32_t layer, uint32_t rows,
                               uint64_t seq);
int ds4_tp_batch_block_begin(ds4_tp *tp, uint32_t rows, uint32_t n_layers);
int ds4_tp_batch_block_begin_gates(ds4_tp *tp, uint32_t rows, uint32_t n_layers,
                                   uint32_t *gates_per_layer);
int ds4_tp_batch_block_end(ds4_tp *tp);
int ds4_tp_big_gate_exchange(ds4_tp *tp, uint32_t layer, uint64_t seq,
                             const void *out, void *in, uint64_t bytes);

/* Lockstep mirroring (leader). All return 1 ok, 0 failure. */
typedef struct {
  uint64_t session_id;
  int32_t token;
  uint32_t reserved;
} ds4_tp_batch_item;

int ds4_tp_send_session_create(ds4_tp *tp, uint64_t session_id, int ctx_size);
int ds4_tp_send_session_destroy(ds4_tp *tp, uint64_t session_id);
int ds4_tp_send_sync(ds4_tp *tp, uint64_t session_id, const int *tokens,
                     uint32_t n_tokens);
#if DS4_TP_COMPAT_VISION
int ds4_tp_send_sync_multimodal(ds4_tp *tp, uint64_t session_id,
                                const int *tokens, uint32_t n_tokens,
                                const ds4_vision_span *images,
                                uint32_t image_count);
#endif
int ds4_tp_send_eval(ds4_tp *tp, uint64_t session_id, uint64_t seq, int token);
int ds4_tp_send_glm_mtp(ds4_tp *tp, uint64_t session_id, uint64_t seq,
                        int token, int limit);
int ds4_tp_send_rewind(ds4_tp *tp, uint64_t session_id, int pos);
/* ACK status 0 restored, 1 unavailable, -1 failed: read it with
 * ds4_tp_wait_command_status. */
int ds4_tp_send_spec_restore(ds4_tp *tp, uint64_t session_id, int pos);
int ds4_tp_send_invalidate(ds4_tp *tp, uint64_t session_id);
int ds4_tp_send_eval_batch(ds4_tp *tp, const ds4_tp_batch_item *items,
                           uint32_t count);
int ds4_tp_send_mixed_batch(ds4_tp *tp, uint64_t prefill_session_id,
                            const int *prompt, uint32_t prompt_count,
                            const ds4_tp_batch_item *items, uint32_t count);
/* Worker: acknowledges the last command, which must be for session_id
 * (0 for EVAL_BATCH). A negative status reports a failure: the leader's
 * wait returns it and its pair is failed. */
int ds4_tp_send_command_ack(ds4_tp *tp, uint64_t session_id, int status);
/* Leader: 1 when the ack arrived with status 0, else 0. */
int ds4_tp_wait_command_ack(ds4_tp *tp, uint64_t session_id,
                            const char *operation, char *err, size_t errlen);
/* Leader: 1 when an ack arrived (*status = its status, negative when the
 * worker failed the command), 0 on a transport failure. */
int ds4_tp_wait_command_status(ds4_tp *tp, uint64_t session_id, int *status,
                               const char *operation, char *err, size_t errlen);
int ds4_tp_sync_checkpoint(ds4_tp *tp, uint32_t point, int current, int total,
                           bool requested, bool *cancelled);
int ds4_tp_send_stop(ds4_tp *tp);

typedef enum {
  DS4_TP_FRAME_ERROR = -1,
  DS4_TP_FRAME_SYNC = 1,
  DS4_TP_FRAME_EVAL = 2,
  DS4_TP_FRAME_REWIND = 3,
  DS4_TP_FRAME_INVALIDATE = 4,
  DS4_TP_FRAME_STOP = 5,
  DS4_TP_FRAME_HASH = 6,
  DS4_TP_FRAME_RDMA_INFO = 7,
  DS4_TP_FRAME_SYNC_ACK = 8,
  DS4_TP_FRAME_RDMA_READY = 9,
  DS4_TP_FRAME_LOGITS = 10,
  DS4_TP_FRAME_VERIFY = 11,
  DS4_TP_FRAME_VERIFY_COMMIT = 12,
  DS4_TP_FRAME_SESSION_CREATE = 13,
  DS4_TP_FRAME_SESSION_DESTROY = 14,
  DS4_TP_FRAME_EVAL_BATCH = 15,
  DS4_TP_FRAME_MIXED_BATCH = 16,
  DS4_TP_FRAME_COMMAND_ACK = 17,
#if DS4_TP_COMPAT_ODINLINK_API
  DS4_TP_FRAME_LOGITS_TOP2 = 18, /* the OdinLink fork's number */
#endif
#if DS4_TP_COMPAT_VISION
  DS4_TP_FRAME_SYNC_MULTIMODAL = 18,
#endif
  DS4_TP_FRAME_RDMA_WARM = 19,
  DS4_TP_FRAME_RDMA_POSTED = 20,
  DS4_TP_FRAME_GLM_MTP = 21,
  DS4_TP_FRAME_SYNC_CHECKPOINT = 22,
  DS4_TP_FRAME_DSPARK_DRAFT = 23,
  DS4_TP_FRAME_SPEC_RESTORE = 24
} ds4_tp_frame_type;

/* A received command; arrays are malloc'd, release with
 * ds4_tp_command_free. Field use per type in README.md. */
typedef struct {
  ds4_tp_frame_type type;
  uint64_t session_id;
  uint64_t seq;
  int value;
  int limit;
  int *tokens;
  uint32_t n_tokens;
  ds4_tp_batch_item *items;
  uint32_t n_items;
#if DS4_TP_COMPAT_VISION
  ds4_vision_span *images;
  uint32_t n_images;
#endif
} ds4_tp_command;

/* Worker: blocks (as long as the leader lives) for the next command. 1 ok,
 * 0 failure (command->type = DS4_TP_FRAME_ERROR, err filled). */
int ds4_tp_recv_command(ds4_tp *tp, ds4_tp_command *command, char *err,
                        size_t errlen);
void ds4_tp_command_free(ds4_tp_command *command);

/* Both ranks: 1 equal, 0 transport failure, -1 hash or seq mismatch. */
int ds4_tp_hash_check(ds4_tp *tp, uint64_t seq, uint64_t hash, char *err,
                      size_t errlen);

/* Worker -> leader logits half; count must be the logits half of the pair
 * (see ds4_tp_compat_logits_floats: n_vocab / 2 when the head is split,
 * else none is sent). */
int ds4_tp_send_logits_half(ds4_tp *tp, const float *half, uint32_t count);
int ds4_tp_recv_logits_half(ds4_tp *tp, float *half, uint32_t count);

typedef enum {
  DS4_TP_VERIFY_ROLLBACK_REPLAY = 0,
  DS4_TP_VERIFY_COMMIT_FULL = 1,
  DS4_TP_VERIFY_COMMIT_PREFIX = 2
} ds4_tp_verify_commit_mode;

int ds4_tp_send_verify(ds4_tp *tp, uint64_t session_id, const int *drafts,
                       uint32_t n);
#define DS4_TP_VERIFY_HEAD_SPLIT 1u
#define DS4_TP_VERIFY_DSPARK_TP 2u
#define DS4_TP_VERIFY_DSPARK_SEED 4u
#define DS4_TP_VERIFY_FLAGS \
  (DS4_TP_VERIFY_HEAD_SPLIT | DS4_TP_VERIFY_DSPARK_TP | DS4_TP_VERIFY_DSPARK_SEED)
int ds4_tp_send_verify_flags(ds4_tp *tp, uint64_t session_id, const int *drafts,
                             uint32_t n, uint32_t flags);

enum { DS4_TP_DSPARK_MAINTAIN = 1, DS4_TP_DSPARK_DRAFT = 2 };
int ds4_tp_send_dspark_draft(ds4_tp *tp, uint64_t session_id, int token,
                             int pos, uint32_t mode);
#define DS4_TP_DSPARK_META_BYTES 64u
int ds4_tp_agree_dspark_split(ds4_tp *tp, bool mine_on, const void *meta,
                              bool *agreed, bool *peer_on, char *err,
                              size_t errlen);
#define DS4_TP_SMALL_EXCHANGE_MAX 192u
int ds4_tp_small_exchange(ds4_tp *tp, const void *mine, void *peer,
                          uint32_t bytes);
#define DS4_TP_HEAD_ROW_MAX 131072u
/* DS4_TP_HEAD_ROW_MAX floats of host memory owned by tp (NULL when it
 * cannot be allocated). */
float *ds4_tp_head_row_out(ds4_tp *tp);
int ds4_tp_head_row_send(ds4_tp *tp, uint32_t row, uint32_t floats);
int ds4_tp_head_row_recv(ds4_tp *tp, uint32_t row, float *dst, uint32_t floats);
#if DS4_TP_COMPAT_COMMIT_ACCEPT
/* full_accept nonzero: keep the block (replay_n ignored); 0: roll back and
 * replay replay_n tokens. The worker reads (1, 0) or (0, n). */
int ds4_tp_send_verify_commit(ds4_tp *tp, int32_t full_accept, int32_t replay_n);
int ds4_tp_recv_verify_commit(ds4_tp *tp, int32_t *full_accept, int32_t *replay_n);
#else
int ds4_tp_send_verify_commit(ds4_tp *tp, int32_t mode, int32_t token_count);
/* Worker: reads the VERIFY_COMMIT that must follow a VERIFY. */
int ds4_tp_recv_verify_commit(ds4_tp *tp, int32_t *mode, int32_t *token_count);
#endif

/* Engine's to implement (it runs the engine's sessions); build it on
 * ds4tp_worker_run via ds4_tp_compat_pair, see README.md. */
int ds4_tp_worker_run(ds4_engine *engine, const ds4_tp_options *opt);

#if DS4_TP_COMPAT_RUNTIME_FEATURES || DS4_TP_COMPAT_ODINLINK_API
/* The identity's runtime_features (equal on both ranks once created). */
uint32_t ds4_tp_runtime_features(const ds4_tp *tp);
#endif

#if DS4_TP_COMPAT_ODINLINK_API
/* ---- the OdinLink fork's calls (DS4_TP_COMPAT_SHAPE_ODINLINK) ---- */
enum {
  DS4_TP_FEATURE_Q4K_WMMA = UINT32_C(1) << 0,
  DS4_TP_FEATURE_BATCH_ATTN_HEAD_SPLIT = UINT32_C(1) << 1,
  DS4_TP_FEATURE_ODINLINK_BATCH_ASYNC = UINT32_C(1) << 2,
  /* Logits halves through ds4_tp_exchange_logits_halves. */
  DS4_TP_FEATURE_RDMA_LOGITS = UINT32_C(1) << 3,
  /* Rank 0 computes the full head: the worker ships no logits. */
  DS4_TP_FEATURE_RANK0_FULL_LOGITS = UINT32_C(1) << 4,
  /* The worker ships its best two (id, value) pairs per row. */
  DS4_TP_FEATURE_GREEDY_TOP2 = UINT32_C(1) << 5,
  DS4_TP_FEATURE_IQ2_I8_WMMA = UINT32_C(1) << 6,
  DS4_TP_FEATURE_TEMPORAL_COMPRESSOR = UINT32_C(1) << 7,
  /* Bits 8..15: first expert owned by rank 1. */
  DS4_TP_FEATURE_EXPERT_SPLIT_SHIFT = 8,
  DS4_TP_FEATURE_EXPERT_SPLIT_MASK = UINT32_C(0xff) << 8,
  DS4_TP_FEATURE_Q4K_FUSED_MID = UINT32_C(1) << 16,
  DS4_TP_FEATURE_HC_STAGE_EXACT_COOP = UINT32_C(1) << 17,
  DS4_TP_FEATURE_INDEXER_TOPK_RADIX_TREE = UINT32_C(1) << 18
};
/* Bits of the expert split boundary, and back. Macros, not inline
 * functions, so that the header stays bindable. */
#define ds4_tp_feature_expert_split(first_rank1) \
  ((uint32_t)(((uint32_t)(first_rank1) & UINT32_C(0xff)) << DS4_TP_FEATURE_EXPERT_SPLIT_SHIFT))
#define ds4_tp_feature_expert_split_value(features) \
  ((uint32_t)(((uint32_t)(features) & DS4_TP_FEATURE_EXPERT_SPLIT_MASK) >> \
              DS4_TP_FEATURE_EXPERT_SPLIT_SHIFT))
#define ds4_tp_runtime_features_equal(local, peer) ((uint32_t)(local) == (uint32_t)(peer))

typedef struct {
  int32_t id[2];
  float value[2];
} ds4_tp_logits_top2;

/* Device copy for big-gate staging: accepted and unused (libds4tp stages
 * through its own slab regions). */
typedef int (*ds4_tp_devcopy_fn)(void *dst, const void *src, uint64_t bytes);
void ds4_tp_set_devcopy(ds4_tp_devcopy_fn fn);
/* True when big gates run over RDMA. */
bool ds4_tp_big_gate_is_rdma_capable(const ds4_tp *tp);
/* Always false: libds4tp registers device or host memory alike. */
bool ds4_tp_requires_host_slab(const ds4_tp *tp);
/* ds4_tp_slab_bytes for this pair. */
uint64_t ds4_tp_alloc_slab_bytes(const ds4_tp *tp);
/* No direct big regions: ds4_tp_big_capacity_rows is 0, so the engine
 * keeps its own big-gate buffers; the offsets are UINT64_MAX. */
uint64_t ds4_tp_slab_big_out_offset(const ds4_tp *tp);
uint64_t ds4_tp_slab_big_in_offset(const ds4_tp *tp);
uint32_t ds4_tp_big_capacity_rows(const ds4_tp *tp);
/* Big gate whose waves of wave_bytes are announced through ready(ud, i)
 * as they land; here all waves land with the whole exchange. */
typedef void (*ds4_tp_big_wave_ready_fn)(void *ud, uint32_t wave);
int ds4_tp_big_gate_exchange_waves(ds4_tp *tp, uint32_t layer, uint64_t seq,
                                   const void *out, void *in, uint64_t bytes,
                                   uint64_t wave_bytes, uint32_t waves,
                                   ds4_tp_big_wave_ready_fn ready,
                                   void *ready_ud);
/* Both ranks after an eval with DS4_TP_FEATURE_RDMA_LOGITS: the leader
 * receives the worker's upper half into logits + half_count; the worker
 * sends its upper half (its lower half is left as it is). */
int ds4_tp_exchange_logits_halves(ds4_tp *tp, float *logits, uint32_t half_count);
/* DS4_TP_FEATURE_GREEDY_TOP2: one record per logits row, in place of a
 * logits half. */
int ds4_tp_send_logits_top2(ds4_tp *tp, const ds4_tp_logits_top2 *top2);
int ds4_tp_recv_logits_top2(ds4_tp *tp, ds4_tp_logits_top2 *top2);
#endif

/* ---- compat extensions (not in the seed) ---- */

/* Floats per logits row the worker ships after SYNC, EVAL, batches and a
 * replaying rollback; the leader declares it with each such command and
 * libds4tp checks it on both ranks. Set at ds4_tp_create, the same way on
 * both ranks, from (first match wins):
 *   1. the environment: DS4_TP_LOGITS = split (n_vocab / 2), none (0) or
 *      a float count;
 *   2. ODINLINK runtime_features: RANK0_FULL_LOGITS 0, GREEDY_TOP2 4 (one
 *      top-2 record), else split;
 *   3. the gate schedule: DeepSeek's (every layer fires ATTN then FFN:
 *      per_token 0, or start 0, step 1, per_token 2 * n_layer, no mask)
 *      splits the vocabulary head; any other (GLM: FFN gates of sparse
 *      layers, or a mask) does not, and nothing crosses after a sync or
 *      an eval.
 * Read it with ds4_tp_compat_logits_floats; an engine may also declare it
 * once with ds4_tp_compat_set_logits_floats (both ranks, before the first
 * session). 1 ok, 0 on NULL. */
int ds4_tp_compat_set_logits_floats(ds4_tp *tp, uint32_t count);
uint32_t ds4_tp_compat_logits_floats(const ds4_tp *tp);
/* The underlying libds4tp pair (a ds4tp_pair *), for the calls the seed
 * lacks (gate service, staging hooks, ds4tp_worker_run). */
struct ds4tp_pair *ds4_tp_compat_pair(ds4_tp *tp);

#ifdef __cplusplus
}
#endif
#endif /* DS4_TP_H */
