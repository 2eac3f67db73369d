/* libds4tp: the lockstep control plane.
 * Part of the public API: include <ds4tp/ds4tp.h>, which includes this. */
#ifndef DS4TP_CONTROL_H
#define DS4TP_CONTROL_H
#ifndef DS4TP_H
#error "include <ds4tp/ds4tp.h> rather than this topic header"
#endif

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

#endif /* DS4TP_CONTROL_H */
