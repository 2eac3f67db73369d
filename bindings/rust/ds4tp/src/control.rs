//! The control plane (ds4tp.h "Control plane"): leader commands and
//! replies and the symmetric calls of both ranks. The worker side is in
//! worker.rs.

use crate::{check, static_str, sys, Error, Handle, Result, Status};
use std::os::raw::{c_int, c_void};
use std::ptr;

pub use sys::ds4tp_batch_item as BatchItem;
pub use sys::{
    DS4TP_ACK_CANCELLED as ACK_CANCELLED, DS4TP_ACK_DONE as ACK_DONE, DS4TP_ACK_UNAVAILABLE as ACK_UNAVAILABLE,
    DS4TP_DRAFTER_META_BYTES as DRAFTER_META_BYTES, DS4TP_HEAD_ROW_MAX as HEAD_ROW_MAX,
    DS4TP_IMAGE_FINGERPRINT_BYTES as IMAGE_FINGERPRINT_BYTES, DS4TP_MTP_LIMIT_MAX as MTP_LIMIT_MAX,
    DS4TP_SMALL_EXCHANGE_MAX as SMALL_EXCHANGE_MAX, DS4TP_VERIFY_DRAFT_SEED as VERIFY_DRAFT_SEED,
    DS4TP_VERIFY_DRAFT_SHARED as VERIFY_DRAFT_SHARED, DS4TP_VERIFY_HEAD_SPLIT as VERIFY_HEAD_SPLIT,
    DS4TP_WAIT_FOREVER as WAIT_FOREVER,
};

macro_rules! kinds {
    ($($name:ident = $value:expr, $what:expr;)*) => {
        /// ds4tp_command_kind: the commands a leader sends.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum CommandKind { $(#[doc = $what] $name = $value),* }

        impl CommandKind {
            /// Every kind.
            pub const ALL: &'static [CommandKind] = &[$(CommandKind::$name),*];
            /// The kind with this number, if it is one.
            pub fn from_code(code: i32) -> Option<CommandKind> {
                match code { $($value => Some(CommandKind::$name),)* _ => None }
            }
        }
    };
}

// The header's ds4tp_command_kind, with what each command carries.
kinds! {
    Sync = 1, "Prompt tokens into a session: session_id, tokens.";
    Eval = 2, "One decode step: session_id, seq, token.";
    Rewind = 3, "Rewind a session: session_id, pos.";
    Invalidate = 4, "Drop a session's cached state: session_id.";
    Stop = 5, "End of the lockstep.";
    Hash = 6, "State hash check: session_id, seq, the leader's hash.";
    Verify = 11, "A verify block: session_id, tokens (the drafts), flags.";
    VerifyCommit = 12, "The decision on the verify block: session_id, mode, count.";
    SessionCreate = 13, "A new session: session_id, ctx_size.";
    SessionDestroy = 14, "The session's end: session_id.";
    EvalBatch = 15, "Decode steps of several sessions: items.";
    MixedBatch = 16, "A prefill (session_id, tokens) with decode items.";
    SyncImages = 18, "Prompt tokens with image embeddings: session_id, tokens, images.";
    Mtp = 21, "Multi-token prediction: session_id, seq, token, limit.";
    Draft = 23, "Lockstep drafter step: session_id, token, pos, mode.";
    SpecRestore = 24, "Restore a speculative checkpoint: session_id, pos.";
}

impl CommandKind {
    /// Upper-case name ("EVAL").
    pub fn name(self) -> &'static str {
        command_name(self as i32)
    }
}

/// Upper-case name of a command kind or any control frame type; "?" when unknown.
pub fn command_name(kind: i32) -> &'static str {
    static_str(unsafe { sys::ds4tp_command_name(kind) })
}

/// ds4tp_commit_mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum CommitMode {
    /// Restore the frontier from before the block and replay `count` tokens with gated decode.
    Rollback = 0,
    /// Keep every row (count 0).
    Full = 1,
    /// Keep the first `count` rows.
    Prefix = 2,
}

/// ds4tp_draft_mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum DraftMode {
    /// Bring the drafter history up to pos.
    Maintain = 1,
    /// Also run the proposal for (token, pos) on both drafter halves.
    Propose = 2,
}

/// An image inside a prompt (send_sync_images): token_count rows of
/// data_width floats in `embd`.
#[derive(Clone, Debug, PartialEq)]
pub struct Image<'a> {
    /// First prompt token the image covers.
    pub token_start: u32,
    /// Prompt tokens (embedding rows) the image covers.
    pub token_count: u32,
    /// Floats per embedding row.
    pub data_width: u32,
    /// Width in pixels (> 0).
    pub width: u32,
    /// Height in pixels (> 0).
    pub height: u32,
    /// Width without padding.
    pub content_width: u32,
    /// Height without padding.
    pub content_height: u32,
    /// The engine's fingerprint of the image.
    pub fingerprint: [u8; IMAGE_FINGERPRINT_BYTES],
    /// token_count * data_width floats.
    pub embd: &'a [f32],
}

pub(crate) fn ptr_or_null<T>(s: &[T]) -> *const T {
    if s.is_empty() {
        ptr::null()
    } else {
        s.as_ptr()
    }
}

impl Handle {
    // ---- leader: commands (each returns once the frame is written) ----

    /// SESSION_CREATE; then wait_ack.
    pub fn send_session_create(&mut self, session_id: u64, ctx_size: u32) -> Result<()> {
        check(unsafe { sys::ds4tp_send_session_create(self.p, session_id, ctx_size) })
    }
    /// SESSION_DESTROY; then wait_ack.
    pub fn send_session_destroy(&mut self, session_id: u64) -> Result<()> {
        check(unsafe { sys::ds4tp_send_session_destroy(self.p, session_id) })
    }
    /// SYNC: the session's tokens become exactly `tokens`; then wait_sync.
    pub fn send_sync(&mut self, session_id: u64, tokens: &[i32], logits_floats: u32) -> Result<()> {
        check(unsafe { sys::ds4tp_send_sync(self.p, session_id, ptr_or_null(tokens), len32(tokens.len())?, logits_floats) })
    }
    /// SYNC_IMAGES: a sync with image embeddings; then wait_sync.
    pub fn send_sync_images(&mut self, session_id: u64, tokens: &[i32], images: &[Image], logits_floats: u32) -> Result<()> {
        let spans: Vec<sys::ds4tp_image_span> = images
            .iter()
            .map(|im| sys::ds4tp_image_span {
                token_start: im.token_start,
                token_count: im.token_count,
                data_width: im.data_width,
                width: im.width,
                height: im.height,
                content_width: im.content_width,
                content_height: im.content_height,
                fingerprint: im.fingerprint,
                embd: ptr_or_null(im.embd),
            })
            .collect();
        for (im, span) in images.iter().zip(&spans) {
            let need = span.token_count as usize * span.data_width as usize;
            if im.embd.len() < need {
                return Err(Error::new(
                    Status::EINVAL as i32,
                    format!("image at token {} has {} floats, {} needed", im.token_start, im.embd.len(), need),
                ));
            }
        }
        check(unsafe {
            sys::ds4tp_send_sync_images(
                self.p,
                session_id,
                ptr_or_null(tokens),
                len32(tokens.len())?,
                ptr_or_null(&spans),
                len32(spans.len())?,
                logits_floats,
            )
        })
    }
    /// EVAL: one decode step; `seq` rises with every EVAL and MTP.
    pub fn send_eval(&mut self, session_id: u64, seq: u64, token: i32, logits_floats: u32) -> Result<()> {
        check(unsafe { sys::ds4tp_send_eval(self.p, session_id, seq, token, logits_floats) })
    }
    /// MTP: a multi-token-prediction cycle of up to `limit` drafts; then wait_ack.
    pub fn send_mtp(&mut self, session_id: u64, seq: u64, token: i32, limit: u32) -> Result<()> {
        check(unsafe { sys::ds4tp_send_mtp(self.p, session_id, seq, token, limit) })
    }
    /// REWIND (no reply).
    pub fn send_rewind(&mut self, session_id: u64, pos: i32) -> Result<()> {
        check(unsafe { sys::ds4tp_send_rewind(self.p, session_id, pos) })
    }
    /// INVALIDATE (no reply).
    pub fn send_invalidate(&mut self, session_id: u64) -> Result<()> {
        check(unsafe { sys::ds4tp_send_invalidate(self.p, session_id) })
    }
    /// SPEC_RESTORE; then wait_ack (ACK_UNAVAILABLE: invalidate and sync in full).
    pub fn send_spec_restore(&mut self, session_id: u64, pos: i32) -> Result<()> {
        check(unsafe { sys::ds4tp_send_spec_restore(self.p, session_id, pos) })
    }
    /// EVAL_BATCH; then wait_ack(0).
    pub fn send_eval_batch(&mut self, items: &[BatchItem], logits_floats: u32) -> Result<()> {
        check(unsafe { sys::ds4tp_send_eval_batch(self.p, ptr_or_null(items), len32(items.len())?, logits_floats) })
    }
    /// MIXED_BATCH: a prefill chunk plus one decode step per item; then wait_ack.
    pub fn send_mixed_batch(&mut self, prefill_session_id: u64, prompt: &[i32], items: &[BatchItem], logits_floats: u32) -> Result<()> {
        check(unsafe {
            sys::ds4tp_send_mixed_batch(
                self.p,
                prefill_session_id,
                ptr_or_null(prompt),
                len32(prompt.len())?,
                ptr_or_null(items),
                len32(items.len())?,
                logits_floats,
            )
        })
    }
    /// VERIFY: announces a verify block of `drafts` (VERIFY_* flags).
    pub fn send_verify(&mut self, session_id: u64, drafts: &[i32], flags: u32) -> Result<()> {
        check(unsafe { sys::ds4tp_send_verify(self.p, session_id, ptr_or_null(drafts), len32(drafts.len())?, flags) })
    }
    /// VERIFY_COMMIT: the decision on the open verify block.
    pub fn send_verify_commit(&mut self, mode: CommitMode, count: i32, logits_floats: u32) -> Result<()> {
        check(unsafe { sys::ds4tp_send_verify_commit(self.p, mode as i32, count, logits_floats) })
    }
    /// DRAFT: a lockstep drafter step.
    pub fn send_draft(&mut self, session_id: u64, token: i32, pos: i32, mode: DraftMode) -> Result<()> {
        check(unsafe { sys::ds4tp_send_draft(self.p, session_id, token, pos, mode as u32) })
    }
    /// STOP: ends the lockstep (the worker loop returns).
    pub fn send_stop(&mut self) -> Result<()> {
        check(unsafe { sys::ds4tp_send_stop(self.p) })
    }

    // ---- leader: replies ----

    /// The COMMAND_ACK status (>= 0) of the last command for `session_id`
    /// (0 for EVAL_BATCH). A worker failure is Err(EREMOTE); see remote_status().
    pub fn wait_ack(&mut self, session_id: u64) -> Result<i32> {
        let mut status = 0;
        check(unsafe { sys::ds4tp_wait_ack(self.p, session_id, &mut status) })?;
        Ok(status)
    }
    /// The SYNC_ACK of the last SYNC*: (status, position).
    pub fn wait_sync(&mut self, session_id: u64) -> Result<(i32, u32)> {
        let (mut status, mut position) = (0, 0);
        check(unsafe { sys::ds4tp_wait_sync(self.p, session_id, &mut status, &mut position) })?;
        Ok((status, position))
    }
    /// The next logits half of the last command into `half` (its length is
    /// the command's logits_floats).
    pub fn recv_logits(&mut self, half: &mut [f32]) -> Result<()> {
        check(unsafe { sys::ds4tp_recv_logits(self.p, half.as_mut_ptr(), len32(half.len())?) })
    }
    /// The status the worker reported with its failure (0 if none).
    pub fn remote_status(&self) -> i32 {
        unsafe { sys::ds4tp_remote_status(self.p) }
    }

    // ---- both ranks ----

    /// Lockstep state hash check; Err(EDIVERGED) when the hashes differ
    /// (the pair stays usable).
    pub fn hash_check(&mut self, session_id: u64, seq: u64, hash: u64) -> Result<()> {
        check(unsafe { sys::ds4tp_hash_check(self.p, session_id, seq, hash) })
    }
    /// Agreed cancellation at a prefill boundary: true when either rank requested it.
    pub fn sync_checkpoint(&mut self, point: u32, current: i32, total: i32, requested: bool) -> Result<bool> {
        let mut cancelled = 0;
        check(unsafe { sys::ds4tp_sync_checkpoint(self.p, point, current, total, requested as c_int, &mut cancelled) })?;
        Ok(cancelled != 0)
    }
    /// Start-up agreement: `flags` must match the peer's; returns the
    /// intersection of both ranks' `caps`.
    pub fn agree_execution_mode(&mut self, flags: u32, caps: u32) -> Result<u32> {
        let mut c = caps;
        check(unsafe { sys::ds4tp_agree_execution_mode(self.p, flags, &mut c) })?;
        Ok(c)
    }
    /// Start-up agreement of the split drafter: (agreed, peer_on).
    pub fn agree_drafter_split(&mut self, mine_on: bool, meta: Option<&[u8; DRAFTER_META_BYTES]>) -> Result<(bool, bool)> {
        let (mut agreed, mut peer_on) = (0, 0);
        let meta = meta.map_or(ptr::null(), |m| m.as_ptr() as *const c_void);
        check(unsafe { sys::ds4tp_agree_drafter_split(self.p, mine_on as c_int, meta, &mut agreed, &mut peer_on) })?;
        Ok((agreed != 0, peer_on != 0))
    }
    /// Verify block begin (both ranks); returns the agreed gates per layer.
    pub fn block_begin(&mut self, rows: u32, n_layers: u32, gates_per_layer: u32) -> Result<u32> {
        let mut gpl = gates_per_layer;
        check(unsafe { sys::ds4tp_block_begin(self.p, rows, n_layers, &mut gpl) })?;
        Ok(gpl)
    }
    /// Verify block end (both ranks).
    pub fn block_end(&mut self) -> Result<()> {
        check(unsafe { sys::ds4tp_block_end(self.p) })
    }
    /// Swaps `mine` with the peer's bytes of the same count (1..SMALL_EXCHANGE_MAX).
    pub fn small_exchange(&mut self, mine: &[u8], peer: &mut [u8]) -> Result<()> {
        if mine.len() != peer.len() {
            return Err(Error::new(
                Status::EINVAL as i32,
                format!("small exchange: mine has {} bytes, peer buffer {}", mine.len(), peer.len()),
            ));
        }
        check(unsafe {
            sys::ds4tp_small_exchange(self.p, mine.as_ptr() as *const c_void, peer.as_mut_ptr() as *mut c_void, len32(mine.len())?)
        })
    }
    /// Worker -> leader output-head row of the current verify block.
    pub fn head_row_send(&mut self, row: u32, src: &[f32]) -> Result<()> {
        check(unsafe { sys::ds4tp_head_row_send(self.p, row, src.as_ptr(), len32(src.len())?) })
    }
    /// Leader: receives head row `row` into `dst` (same float count as sent).
    pub fn head_row_recv(&mut self, row: u32, dst: &mut [f32]) -> Result<()> {
        check(unsafe { sys::ds4tp_head_row_recv(self.p, row, dst.as_mut_ptr(), len32(dst.len())?) })
    }
}

pub(crate) fn len32(n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::new(Status::EINVAL as i32, format!("{} elements exceed u32", n)))
}

