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

/* Words of the gate slot mask: the engine's constant (libds4tp carries 4;
 * set bits beyond word 3 are rejected by ds4_tp_create). */
#ifndef DS4_TP_GATE_MASK_WORDS
#define DS4_TP_GATE_MASK_WORDS 3
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
 * --dist-* or debug option). The engine knows its fields; default none. */
#ifndef DS4_TP_COMPAT_DIST_EXTRA_SET
#define DS4_TP_COMPAT_DIST_EXTRA_SET(dist) 0
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
  uint32_t gate_slot_start;
  uint32_t gate_slot_step;
  uint32_t gates_per_token;
  uint64_t gate_slot_mask[DS4_TP_GATE_MASK_WORDS];
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
int ds4_tp_agree_execution_mode(ds4_tp *tp, uint32_t flags, bool *full_experts,
                                char *err, size_t errlen);
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
int ds4_tp_send_sync_multimodal(ds4_tp *tp, uint64_t session_id,
                                const int *tokens, uint32_t n_tokens,
                                const ds4_vision_span *images,
                                uint32_t image_count);
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
  DS4_TP_FRAME_SYNC_MULTIMODAL = 18,
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
  ds4_vision_span *images;
  uint32_t n_images;
} ds4_tp_command;

/* Worker: blocks (as long as the leader lives) for the next command. 1 ok,
 * 0 failure (command->type = DS4_TP_FRAME_ERROR, err filled). */
int ds4_tp_recv_command(ds4_tp *tp, ds4_tp_command *command, char *err,
                        size_t errlen);
void ds4_tp_command_free(ds4_tp_command *command);

/* Both ranks: 1 equal, 0 transport failure, -1 hash or seq mismatch. */
int ds4_tp_hash_check(ds4_tp *tp, uint64_t seq, uint64_t hash, char *err,
                      size_t errlen);

/* Worker -> leader logits half; count must be the leader's declared
 * logits half (ds4_tp_compat_set_logits_floats, default n_vocab / 2). */
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
int ds4_tp_send_verify_commit(ds4_tp *tp, int32_t mode, int32_t token_count);
/* Worker: reads the VERIFY_COMMIT that must follow a VERIFY. */
int ds4_tp_recv_verify_commit(ds4_tp *tp, int32_t *mode, int32_t *token_count);

/* Engine's to implement (it runs the engine's sessions); build it on
 * ds4tp_worker_run via ds4_tp_compat_pair, see README.md. */
int ds4_tp_worker_run(ds4_engine *engine, const ds4_tp_options *opt);

/* ---- compat extensions (not in the seed) ---- */

/* Floats per logits half the leader declares with each command that
 * returns logits (libds4tp checks the count on both ranks). Default
 * n_vocab / 2; 0 = the worker ships no logits. 1 ok, 0 on NULL. */
int ds4_tp_compat_set_logits_floats(ds4_tp *tp, uint32_t count);
/* The underlying libds4tp pair (a ds4tp_pair *), for the calls the seed
 * lacks (gate service, staging hooks, ds4tp_worker_run). */
struct ds4tp_pair *ds4_tp_compat_pair(ds4_tp *tp);

#ifdef __cplusplus
}
#endif
#endif /* DS4_TP_H */
