//! The control plane of include/ds4tp/ds4tp.h (lockstep mirroring: command
//! frames, replies, the worker loop), re-exported at the crate root.

use super::*;
use std::os::raw::{c_char, c_int, c_void};

// ---- control plane: lockstep mirroring ----------------------------------

/// timeout_ms value: wait for as long as the peer lives.
pub const DS4TP_WAIT_FOREVER: i32 = -1;
/// bytes per ds4tp_small_exchange
pub const DS4TP_SMALL_EXCHANGE_MAX: u32 = 192;
/// floats per head row
pub const DS4TP_HEAD_ROW_MAX: u32 = 131072;
/// ds4tp_agree_drafter_split metadata
pub const DS4TP_DRAFTER_META_BYTES: usize = 64;
/// `DS4TP_IMAGE_FINGERPRINT_BYTES` (include/ds4tp/ds4tp.h).
pub const DS4TP_IMAGE_FINGERPRINT_BYTES: usize = 32;
/// drafts per MTP cycle
pub const DS4TP_MTP_LIMIT_MAX: u32 = 7;
/// ds4tp_reply.message
pub const DS4TP_REPLY_MESSAGE_MAX: usize = 256;

/// session_id, tokens
pub const DS4TP_CMD_SYNC: c_int = 1;
/// session_id, seq, token
pub const DS4TP_CMD_EVAL: c_int = 2;
/// session_id, pos
pub const DS4TP_CMD_REWIND: c_int = 3;
/// session_id
pub const DS4TP_CMD_INVALIDATE: c_int = 4;
/// `DS4TP_CMD_STOP` (include/ds4tp/ds4tp.h).
pub const DS4TP_CMD_STOP: c_int = 5;
/// session_id, seq, hash (the leader's)
pub const DS4TP_CMD_HASH: c_int = 6;
/// session_id, tokens = drafts, flags
pub const DS4TP_CMD_VERIFY: c_int = 11;
/// session_id, mode, count
pub const DS4TP_CMD_VERIFY_COMMIT: c_int = 12;
/// session_id, ctx_size
pub const DS4TP_CMD_SESSION_CREATE: c_int = 13;
/// session_id
pub const DS4TP_CMD_SESSION_DESTROY: c_int = 14;
/// items
pub const DS4TP_CMD_EVAL_BATCH: c_int = 15;
/// session_id (prefill), tokens (prompt), items
pub const DS4TP_CMD_MIXED_BATCH: c_int = 16;
/// session_id, tokens, images
pub const DS4TP_CMD_SYNC_IMAGES: c_int = 18;
/// session_id, seq, token, limit
pub const DS4TP_CMD_MTP: c_int = 21;
/// session_id, token, pos, mode
pub const DS4TP_CMD_DRAFT: c_int = 23;
/// session_id, pos
pub const DS4TP_CMD_SPEC_RESTORE: c_int = 24;

/// `DS4TP_ACK_DONE` (include/ds4tp/ds4tp.h).
pub const DS4TP_ACK_DONE: i32 = 0;
/// SPEC_RESTORE: state not kept (invalidate, then sync in full); SESSION_DESTROY: no such session
pub const DS4TP_ACK_UNAVAILABLE: i32 = 1;
/// SYNC: stopped at an agreed checkpoint
pub const DS4TP_ACK_CANCELLED: i32 = 2;

/// VERIFY flags. HEAD_SPLIT: each rank computes the verify head on its vocabulary half; the ranks
/// combine row top-1s (ds4tp_small_exchange) and the worker sends its half of the committed row
/// (ds4tp_head_row_send). DRAFT_SHARED: the block holds rows of the last lockstep DRAFT proposal,
/// which the worker holds too. DRAFT_SEED (needs DRAFT_SHARED): the block starts with the seed row,
/// so the proposal rows are drafts\[1..\].
pub const DS4TP_VERIFY_HEAD_SPLIT: u32 = 1;
/// `DS4TP_VERIFY_DRAFT_SHARED` (include/ds4tp/ds4tp.h).
pub const DS4TP_VERIFY_DRAFT_SHARED: u32 = 2;
/// `DS4TP_VERIFY_DRAFT_SEED` (include/ds4tp/ds4tp.h).
pub const DS4TP_VERIFY_DRAFT_SEED: u32 = 4;

/// `DS4TP_COMMIT_ROLLBACK` (include/ds4tp/ds4tp.h).
pub const DS4TP_COMMIT_ROLLBACK: i32 = 0;
/// `DS4TP_COMMIT_FULL` (include/ds4tp/ds4tp.h).
pub const DS4TP_COMMIT_FULL: i32 = 1;
/// `DS4TP_COMMIT_PREFIX` (include/ds4tp/ds4tp.h).
pub const DS4TP_COMMIT_PREFIX: i32 = 2;

/// `DS4TP_DRAFT_MAINTAIN` (include/ds4tp/ds4tp.h).
pub const DS4TP_DRAFT_MAINTAIN: u32 = 1;
/// `DS4TP_DRAFT_PROPOSE` (include/ds4tp/ds4tp.h).
pub const DS4TP_DRAFT_PROPOSE: u32 = 2;

/// `ds4tp_batch_item` (include/ds4tp/ds4tp.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ds4tp_batch_item {
    /// nonzero
    pub session_id: u64,
    /// `token` of `ds4tp_batch_item`.
    pub token: i32,
    /// reserved, 0
    pub flags: u32,
}

impl ds4tp_batch_item {
    /// One decode step of a batch: `token` for session `session_id`.
    pub fn new(session_id: u64, token: i32) -> ds4tp_batch_item {
        ds4tp_batch_item { session_id, token, flags: 0 }
    }
}

/// An image inside a prompt: tokens token_start.. token_start+token_count-1 are replaced by
/// token_count rows of data_width floats (data_width must be the identity's n_embd).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds4tp_image_span {
    /// `token_start` of `ds4tp_image_span`.
    pub token_start: u32,
    /// `token_count` of `ds4tp_image_span`.
    pub token_count: u32,
    /// `data_width` of `ds4tp_image_span`.
    pub data_width: u32,
    /// `width` of `ds4tp_image_span`.
    pub width: u32,
    /// pixels, &gt; 0
    pub height: u32,
    /// `content_width` of `ds4tp_image_span`.
    pub content_width: u32,
    /// pixels without padding
    pub content_height: u32,
    /// `fingerprint` of `ds4tp_image_span`.
    pub fingerprint: [u8; DS4TP_IMAGE_FINGERPRINT_BYTES],
    /// token_count * data_width floats
    pub embd: *const f32,
}

/// A received command. The arrays are owned by the struct: release them with ds4tp_command_free.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds4tp_command {
    /// sizeof(ds4tp_command), set by ds4tp_command_init
    pub size: u32,
    /// ds4tp_command_kind
    pub kind: i32,
    /// `session_id` of `ds4tp_command`.
    pub session_id: u64,
    /// EVAL, MTP: the eval seq; HASH: the checked seq
    pub seq: u64,
    /// HASH: the leader's hash
    pub hash: u64,
    /// EVAL, MTP, DRAFT
    pub token: i32,
    /// REWIND, SPEC_RESTORE, DRAFT
    pub pos: i32,
    /// MTP
    pub limit: i32,
    /// VERIFY_COMMIT
    pub count: i32,
    /// DRAFT: ds4tp_draft_mode; VERIFY_COMMIT: ds4tp_commit_mode
    pub mode: u32,
    /// VERIFY: DS4TP_VERIFY_*
    pub flags: u32,
    /// SESSION_CREATE
    pub ctx_size: u32,
    /// per logits half the leader reads; 0 none
    pub logits_floats: u32,
    /// SYNC*: prompt; VERIFY: drafts; MIXED_BATCH: prefill prompt
    pub tokens: *mut i32,
    /// `n_tokens` of `ds4tp_command`.
    pub n_tokens: u32,
    /// EVAL_BATCH, MIXED_BATCH
    pub items: *mut ds4tp_batch_item,
    /// `n_items` of `ds4tp_command`.
    pub n_items: u32,
    /// SYNC_IMAGES (embd owned too)
    pub images: *mut ds4tp_image_span,
    /// `n_images` of `ds4tp_command`.
    pub n_images: u32,
}

/// What a worker callback hands back. The loop presets every field.
#[repr(C)]
pub struct ds4tp_reply {
    /// logits_rows * logits_floats floats to fill, row after row; NULL when none are due
    pub logits: *mut f32,
    /// `logits_rows` of `ds4tp_reply`.
    pub logits_rows: u32,
    /// `logits_floats` of `ds4tp_reply`.
    pub logits_floats: u32,
    /// SYNC*: tokens held after it (preset n_tokens)
    pub position: u32,
    /// HASH: this rank's state hash
    pub hash: u64,
    /// why, when returning &lt; 0
    pub message: [c_char; DS4TP_REPLY_MESSAGE_MAX],
}

/// One engine callback. Returns 0 on success, a positive ack status for commands that have one
/// (e.g. DS4TP_ACK_UNAVAILABLE), or a negative engine status on failure: the loop then reports it
/// to the leader and returns. `pair` may be used for symmetric calls (ds4tp_sync_checkpoint,
/// ds4tp_block_begin, ...) and gates, not for command receipt.
pub type ds4tp_command_fn = Option<
    unsafe extern "C" fn(user_data: *mut c_void, pair: *mut ds4tp_pair, cmd: *const ds4tp_command, reply: *mut ds4tp_reply) -> c_int,
>;

/// One callback per command kind; NULL = unsupported (reported to the leader as a failure with
/// status DS4TP_EUNSUPPORTED if it arrives).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ds4tp_worker_ops {
    /// sizeof(ds4tp_worker_ops), set by ds4tp_worker_ops_init
    pub size: u32,
    /// `session_create` of `ds4tp_worker_ops`.
    pub session_create: ds4tp_command_fn,
    /// `session_destroy` of `ds4tp_worker_ops`.
    pub session_destroy: ds4tp_command_fn,
    /// `sync` of `ds4tp_worker_ops`.
    pub sync: ds4tp_command_fn,
    /// `sync_images` of `ds4tp_worker_ops`.
    pub sync_images: ds4tp_command_fn,
    /// `eval` of `ds4tp_worker_ops`.
    pub eval: ds4tp_command_fn,
    /// `mtp` of `ds4tp_worker_ops`.
    pub mtp: ds4tp_command_fn,
    /// `rewind` of `ds4tp_worker_ops`.
    pub rewind: ds4tp_command_fn,
    /// `invalidate` of `ds4tp_worker_ops`.
    pub invalidate: ds4tp_command_fn,
    /// `spec_restore` of `ds4tp_worker_ops`.
    pub spec_restore: ds4tp_command_fn,
    /// `eval_batch` of `ds4tp_worker_ops`.
    pub eval_batch: ds4tp_command_fn,
    /// `mixed_batch` of `ds4tp_worker_ops`.
    pub mixed_batch: ds4tp_command_fn,
    /// `verify` of `ds4tp_worker_ops`.
    pub verify: ds4tp_command_fn,
    /// `verify_commit` of `ds4tp_worker_ops`.
    pub verify_commit: ds4tp_command_fn,
    /// `draft` of `ds4tp_worker_ops`.
    pub draft: ds4tp_command_fn,
    /// `hash` of `ds4tp_worker_ops`.
    pub hash: ds4tp_command_fn,
}

extern "C" {
    /// Upper-case name of a command kind or any control frame type ("EVAL"); "?" when unknown.
    pub fn ds4tp_command_name(kind: c_int) -> *const c_char;

    // leader: commands
    /// `ds4tp_send_session_create` (include/ds4tp/ds4tp.h).
    pub fn ds4tp_send_session_create(pair: *mut ds4tp_pair, session_id: u64, ctx_size: u32) -> c_int;
    /// `ds4tp_send_session_destroy` (include/ds4tp/ds4tp.h).
    pub fn ds4tp_send_session_destroy(pair: *mut ds4tp_pair, session_id: u64) -> c_int;
    /// The session's tokens become exactly `tokens` (n_tokens may be 0).
    pub fn ds4tp_send_sync(pair: *mut ds4tp_pair, session_id: u64, tokens: *const i32, n_tokens: u32, logits_floats: u32) -> c_int;
    /// Sync with image embeddings (copied into the frame before returning).
    pub fn ds4tp_send_sync_images(
        pair: *mut ds4tp_pair,
        session_id: u64,
        tokens: *const i32,
        n_tokens: u32,
        images: *const ds4tp_image_span,
        n_images: u32,
        logits_floats: u32,
    ) -> c_int;
    /// One decode step. `seq` is the leader's eval counter: it must rise with every EVAL and MTP
    /// (the worker checks it). No allocation.
    pub fn ds4tp_send_eval(pair: *mut ds4tp_pair, session_id: u64, seq: u64, token: i32, logits_floats: u32) -> c_int;
    /// Multi-token-prediction cycle drafting up to `limit` (1..7) tokens.
    pub fn ds4tp_send_mtp(pair: *mut ds4tp_pair, session_id: u64, seq: u64, token: i32, limit: u32) -> c_int;
    /// `ds4tp_send_rewind` (include/ds4tp/ds4tp.h).
    pub fn ds4tp_send_rewind(pair: *mut ds4tp_pair, session_id: u64, pos: i32) -> c_int;
    /// `ds4tp_send_invalidate` (include/ds4tp/ds4tp.h).
    pub fn ds4tp_send_invalidate(pair: *mut ds4tp_pair, session_id: u64) -> c_int;
    /// State-only restore to `pos`: no gates, no logits. Read the status with ds4tp_wait_ack before
    /// mirroring replay EVALs: DS4TP_ACK_DONE restored, DS4TP_ACK_UNAVAILABLE = invalidate and sync
    /// in full.
    pub fn ds4tp_send_spec_restore(pair: *mut ds4tp_pair, session_id: u64, pos: i32) -> c_int;
    /// `ds4tp_send_eval_batch` (include/ds4tp/ds4tp.h).
    pub fn ds4tp_send_eval_batch(pair: *mut ds4tp_pair, items: *const ds4tp_batch_item, count: u32, logits_floats: u32) -> c_int;
    /// A prefill chunk of `prompt` for prefill_session_id plus one decode step for each item.
    pub fn ds4tp_send_mixed_batch(
        pair: *mut ds4tp_pair,
        prefill_session_id: u64,
        prompt: *const i32,
        prompt_count: u32,
        items: *const ds4tp_batch_item,
        count: u32,
        logits_floats: u32,
    ) -> c_int;
    /// Announces a verify block of n (1..DS4TP_BATCH_MAX_ROWS) drafts before both ranks run it; the
    /// next command must be ds4tp_send_verify_commit.
    pub fn ds4tp_send_verify(pair: *mut ds4tp_pair, session_id: u64, drafts: *const i32, n: u32, flags: u32) -> c_int;
    /// The leader's decision on the open verify block (ds4tp_commit_mode). logits_floats applies to
    /// a ROLLBACK with count &gt; 0 only.
    pub fn ds4tp_send_verify_commit(pair: *mut ds4tp_pair, mode: i32, count: i32, logits_floats: u32) -> c_int;
    /// Lockstep drafter step (ds4tp_draft_mode); token &gt;= 0, pos &gt; 0.
    pub fn ds4tp_send_draft(pair: *mut ds4tp_pair, session_id: u64, token: i32, pos: i32, mode: u32) -> c_int;
    /// Ends the lockstep; the worker loop returns 0.
    pub fn ds4tp_send_stop(pair: *mut ds4tp_pair) -> c_int;

    // leader: replies
    /// Reads the COMMAND_ACK of the last command for `session_id` (0 for an EVAL_BATCH). Returns 0
    /// with *status (may be NULL) &gt;= 0; DS4TP_EREMOTE when the worker failed the command
    /// (*status and ds4tp_remote_status hold its status; the pair is failed); ESTATE when no ack is
    /// due; EDESYNC when the ack is for another command; ETIMEDOUT, EPEERCLOSED.
    pub fn ds4tp_wait_ack(pair: *mut ds4tp_pair, session_id: u64, status: *mut i32) -> c_int;
    /// Reads the SYNC_ACK of the last SYNC/SYNC_IMAGES: *status as for ds4tp_wait_ack, *position =
    /// tokens the worker's session holds now (compare with yours). Either pointer may be NULL.
    pub fn ds4tp_wait_sync(pair: *mut ds4tp_pair, session_id: u64, status: *mut i32, position: *mut u32) -> c_int;
    /// Reads the next logits half of the last command into `half`; count must be the command's
    /// logits_floats. ESTATE when none is due, EDESYNC when the half is not the one expected.
    pub fn ds4tp_recv_logits(pair: *mut ds4tp_pair, half: *mut f32, count: u32) -> c_int;
    /// The status the worker reported with its failure (0 if none). Any thread.
    pub fn ds4tp_remote_status(pair: *const ds4tp_pair) -> i32;

    // both ranks
    /// Lockstep check of a state hash. Leader: sends HASH(session, seq, hash) and reads the
    /// worker's; worker: answers the DS4TP_CMD_HASH it just received with its own hash. Returns 0
    /// when equal; DS4TP_EDIVERGED when the hashes differ (both values in the message; the pair
    /// stays usable: invalidate and sync the session again, or stop); DS4TP_EDESYNC when the ranks
    /// check different (session, seq); transport errors otherwise, never DS4TP_EDIVERGED for them.
    pub fn ds4tp_hash_check(pair: *mut ds4tp_pair, session_id: u64, seq: u64, hash: u64) -> c_int;
    /// Agreed cancellation: both ranks call at matching prefill boundaries with the same (point,
    /// current, total); *cancelled = either rank's `requested`, so both stop at the same point and
    /// neither stops while its peer waits in a gate. EDESYNC when the boundaries differ.
    pub fn ds4tp_sync_checkpoint(pair: *mut ds4tp_pair, point: u32, current: i32, total: i32, requested: c_int, cancelled: *mut c_int) -> c_int;
    /// Start-up agreement of engine execution modes: `flags` (engine-defined layout bits, e.g. how
    /// experts are split) must be equal on both ranks, else DS4TP_EIDENTITY naming both; *caps
    /// holds this rank's capability bits on entry and the intersection of both ranks' on return
    /// (NULL = none).
    pub fn ds4tp_agree_execution_mode(pair: *mut ds4tp_pair, flags: u32, caps: *mut u32) -> c_int;
    /// Start-up agreement of the split drafter. `meta` is DS4TP_DRAFTER_META_BYTES bytes (NULL =
    /// zeros). *agreed = both ranks opted in with identical metadata; *peer_on = the peer opted in.
    /// Both opted in with different metadata: DS4TP_EIDENTITY naming the first differing byte.
    /// Either out pointer may be NULL.
    pub fn ds4tp_agree_drafter_split(pair: *mut ds4tp_pair, mine_on: c_int, meta: *const c_void, agreed: *mut c_int, peer_on: *mut c_int) -> c_int;
    /// Verify block begin: both ranks pass the same rows (1..8) and n_layers (1..n_layer), else
    /// DS4TP_EDESYNC; *gates_per_layer offers 1 or 2 batch gates per layer on entry (NULL = 1) and
    /// holds the smaller offer on return. Head rows sent after it are keyed by this block.
    pub fn ds4tp_block_begin(pair: *mut ds4tp_pair, rows: u32, n_layers: u32, gates_per_layer: *mut u32) -> c_int;
    /// Verify block end on both ranks; ESTATE when no block is open.
    pub fn ds4tp_block_end(pair: *mut ds4tp_pair) -> c_int;
    /// Swaps `bytes` (1..DS4TP_SMALL_EXCHANGE_MAX) bytes with the peer: both ranks must pass the
    /// same count, else DS4TP_EDESYNC naming both.
    pub fn ds4tp_small_exchange(pair: *mut ds4tp_pair, mine: *const c_void, peer: *mut c_void, bytes: u32) -> c_int;
    /// Worker -&gt; leader output-head row (1..DS4TP_HEAD_ROW_MAX floats) of row `row` of the
    /// current verify block. The leader's receive requires the same (block, row, floats) and skips
    /// rows of earlier blocks, so a row sent for a block the leader rolled back is never taken for
    /// a later one. ESTATE before the first ds4tp_block_begin or on the wrong rank.
    pub fn ds4tp_head_row_send(pair: *mut ds4tp_pair, row: u32, src: *const f32, floats: u32) -> c_int;
    /// `ds4tp_head_row_recv` (include/ds4tp/ds4tp.h).
    pub fn ds4tp_head_row_recv(pair: *mut ds4tp_pair, row: u32, dst: *mut f32, floats: u32) -> c_int;

    // worker
    /// Zeroes `cmd` and sets its size.
    pub fn ds4tp_command_init(cmd: *mut ds4tp_command);
    /// Frees the arrays of `cmd` (NULL-safe) and clears them.
    pub fn ds4tp_command_free(cmd: *mut ds4tp_command);
    /// Worker: waits up to timeout_ms (DS4TP_WAIT_FOREVER: as long as the leader lives) for the
    /// next command and fills `cmd`, which must come from ds4tp_command_init: the arrays of a
    /// previous command in it are freed first, so one struct can be reused; free the last one with
    /// ds4tp_command_free. ESTATE while a reply to the previous command is still owed or after
    /// STOP; EPROTO for a malformed frame; EDESYNC for a frame that is no command here; ETIMEDOUT,
    /// EPEERCLOSED, EFAILED.
    pub fn ds4tp_recv_command(pair: *mut ds4tp_pair, cmd: *mut ds4tp_command, timeout_ms: i32) -> c_int;
    /// Worker replies to the last command: COMMAND_ACK, SYNC_ACK (position = tokens the session
    /// holds after the sync), one logits half of cmd-&gt;logits_floats floats. ESTATE when that
    /// reply is not owed.
    pub fn ds4tp_send_ack(pair: *mut ds4tp_pair, status: i32) -> c_int;
    /// `ds4tp_send_sync_ack` (include/ds4tp/ds4tp.h).
    pub fn ds4tp_send_sync_ack(pair: *mut ds4tp_pair, status: i32, position: u32) -> c_int;
    /// `ds4tp_send_logits` (include/ds4tp/ds4tp.h).
    pub fn ds4tp_send_logits(pair: *mut ds4tp_pair, half: *const f32, count: u32) -> c_int;
    /// Reports that the last command failed with `status` (engine-defined) and why; the leader's
    /// next read returns DS4TP_EREMOTE. The worker takes no more commands afterwards.
    pub fn ds4tp_send_error(pair: *mut ds4tp_pair, status: i32, message: *const c_char) -> c_int;
    /// Zeroes `ops` and sets its size.
    pub fn ds4tp_worker_ops_init(ops: *mut ds4tp_worker_ops);
    /// Worker loop: receives commands, calls the matching callback, sends the acks, statuses, hash
    /// answers and logits halves the protocol requires, until STOP (returns 0), a failure of the
    /// pair (ETIMEDOUT on a missing VERIFY_COMMIT, EPEERCLOSED, EPROTO, EDESYNC, EFAILED after
    /// ds4tp_mark_failed, ...), or a callback failure (returns DS4TP_EFAILED after reporting the
    /// callback's status to the leader). A hash mismatch is reported to both ranks and the loop
    /// goes on. Command arrays are valid during the callback only; no allocation per EVAL.
    pub fn ds4tp_worker_run(pair: *mut ds4tp_pair, ops: *const ds4tp_worker_ops, user_data: *mut c_void) -> c_int;
}
