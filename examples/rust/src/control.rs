//! The control plane (ds4tp.h "Control plane"): leader commands and
//! replies, the symmetric calls of both ranks, and the worker side, by hand
//! ([`Handle::recv_command`] and the explicit replies) or with
//! [`Handle::worker_run`] and a [`Worker`] implementation.

use crate::{check, static_str, sys, Error, Handle, Result, Status};
use std::ffi::CString;
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
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

impl BatchItem {
    /// One decode step of a batch.
    pub fn new(session_id: u64, token: i32) -> BatchItem {
        BatchItem { session_id, token, flags: 0 }
    }
}

macro_rules! kinds {
    ($($name:ident = $value:expr),* $(,)?) => {
        /// ds4tp_command_kind: the commands a leader sends.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum CommandKind { $($name = $value),* }

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

kinds! {
    Sync = 1, Eval = 2, Rewind = 3, Invalidate = 4, Stop = 5, Hash = 6, Verify = 11,
    VerifyCommit = 12, SessionCreate = 13, SessionDestroy = 14, EvalBatch = 15, MixedBatch = 16,
    SyncImages = 18, Mtp = 21, Draft = 23, SpecRestore = 24,
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
    Rollback = 0,
    Full = 1,
    Prefix = 2,
}

/// ds4tp_draft_mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum DraftMode {
    Maintain = 1,
    Propose = 2,
}

/// An image inside a prompt (send_sync_images): token_count rows of
/// data_width floats in `embd`.
#[derive(Clone, Debug, PartialEq)]
pub struct Image<'a> {
    pub token_start: u32,
    pub token_count: u32,
    pub data_width: u32,
    pub width: u32,
    pub height: u32,
    pub content_width: u32,
    pub content_height: u32,
    pub fingerprint: [u8; IMAGE_FINGERPRINT_BYTES],
    pub embd: &'a [f32],
}

/// A received command. From [`Handle::recv_command`] it owns its arrays
/// (freed on drop); inside [`Worker`] callbacks it borrows the loop's.
pub struct Command {
    raw: sys::ds4tp_command,
    owned: bool,
}

impl Drop for Command {
    fn drop(&mut self) {
        if self.owned {
            unsafe { sys::ds4tp_command_free(&mut self.raw) }
        }
    }
}

fn slice<'a, T>(p: *const T, n: u32) -> &'a [T] {
    if p.is_null() || n == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(p, n as usize) }
    }
}

impl Command {
    fn empty() -> Command {
        let mut raw = std::mem::MaybeUninit::<sys::ds4tp_command>::zeroed();
        unsafe { sys::ds4tp_command_init(raw.as_mut_ptr()) };
        Command { raw: unsafe { raw.assume_init() }, owned: true }
    }
    /// The kind (None for a frame type this crate does not know).
    pub fn kind(&self) -> Option<CommandKind> {
        CommandKind::from_code(self.raw.kind)
    }
    /// The raw kind number.
    pub fn kind_code(&self) -> i32 {
        self.raw.kind
    }
    pub fn session_id(&self) -> u64 {
        self.raw.session_id
    }
    /// EVAL, MTP: the eval seq; HASH: the checked seq.
    pub fn seq(&self) -> u64 {
        self.raw.seq
    }
    /// HASH: the leader's hash.
    pub fn hash(&self) -> u64 {
        self.raw.hash
    }
    /// EVAL, MTP, DRAFT.
    pub fn token(&self) -> i32 {
        self.raw.token
    }
    /// REWIND, SPEC_RESTORE, DRAFT.
    pub fn pos(&self) -> i32 {
        self.raw.pos
    }
    /// MTP.
    pub fn limit(&self) -> i32 {
        self.raw.limit
    }
    /// VERIFY_COMMIT.
    pub fn count(&self) -> i32 {
        self.raw.count
    }
    /// DRAFT: a DraftMode; VERIFY_COMMIT: a CommitMode.
    pub fn mode(&self) -> u32 {
        self.raw.mode
    }
    /// VERIFY: VERIFY_* bits.
    pub fn flags(&self) -> u32 {
        self.raw.flags
    }
    /// SESSION_CREATE.
    pub fn ctx_size(&self) -> u32 {
        self.raw.ctx_size
    }
    /// Floats per logits half the leader reads; 0 none.
    pub fn logits_floats(&self) -> u32 {
        self.raw.logits_floats
    }
    /// SYNC*: the prompt; VERIFY: the drafts; MIXED_BATCH: the prefill prompt.
    pub fn tokens(&self) -> &[i32] {
        slice(self.raw.tokens, self.raw.n_tokens)
    }
    /// EVAL_BATCH, MIXED_BATCH.
    pub fn items(&self) -> &[BatchItem] {
        slice(self.raw.items, self.raw.n_items)
    }
    /// SYNC_IMAGES.
    pub fn images(&self) -> Vec<Image<'_>> {
        slice(self.raw.images, self.raw.n_images)
            .iter()
            .map(|im| Image {
                token_start: im.token_start,
                token_count: im.token_count,
                data_width: im.data_width,
                width: im.width,
                height: im.height,
                content_width: im.content_width,
                content_height: im.content_height,
                fingerprint: im.fingerprint,
                embd: slice(im.embd, im.token_count.saturating_mul(im.data_width)),
            })
            .collect()
    }
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Command({} session {})", command_name(self.raw.kind), self.raw.session_id)
    }
}

/// What a [`Worker`] callback hands back (the loop presets every field).
pub struct Reply<'a> {
    raw: &'a mut sys::ds4tp_reply,
}

impl<'a> Reply<'a> {
    /// Wraps a reply struct the caller prepared (for a manual loop that
    /// reuses a [`Worker`] through [`dispatch_command`]).
    pub fn from_raw(raw: &'a mut sys::ds4tp_reply) -> Reply<'a> {
        Reply { raw }
    }
    /// logits_rows * logits_floats floats to fill row after row (empty when none are due).
    pub fn logits(&mut self) -> &mut [f32] {
        let n = self.raw.logits_rows as usize * self.raw.logits_floats as usize;
        if self.raw.logits.is_null() || n == 0 {
            return &mut [];
        }
        unsafe { std::slice::from_raw_parts_mut(self.raw.logits, n) }
    }
    pub fn logits_rows(&self) -> u32 {
        self.raw.logits_rows
    }
    pub fn logits_floats(&self) -> u32 {
        self.raw.logits_floats
    }
    /// SYNC*: tokens held after it (preset to the command's token count).
    pub fn position(&self) -> u32 {
        self.raw.position
    }
    pub fn set_position(&mut self, position: u32) {
        self.raw.position = position;
    }
    /// HASH: this rank's state hash.
    pub fn hash(&self) -> u64 {
        self.raw.hash
    }
    /// HASH: this rank's state hash.
    pub fn set_hash(&mut self, hash: u64) {
        self.raw.hash = hash;
    }
    /// The message set so far.
    pub fn message(&self) -> String {
        let bytes: Vec<u8> = self.raw.message.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
    /// Why, when failing (truncated to REPLY_MESSAGE_MAX - 1 bytes).
    pub fn set_message(&mut self, message: &str) {
        let bytes = message.as_bytes();
        let n = bytes.len().min(self.raw.message.len() - 1);
        for (dst, &src) in self.raw.message.iter_mut().zip(&bytes[..n]) {
            *dst = src as std::os::raw::c_char;
        }
        self.raw.message[n] = 0;
    }
}

/// A worker's engine, one method per command kind (the ds4tp_worker_ops
/// slots). Each returns 0 on success, a positive ack status (e.g.
/// ACK_UNAVAILABLE), or a negative engine status to fail the command (the
/// loop reports it to the leader and ends). `pair` serves the symmetric
/// calls and gates. A kind left at its default is reported unsupported.
#[allow(unused_variables)]
pub trait Worker {
    fn session_create(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    fn session_destroy(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    fn sync(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    fn sync_images(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    fn eval(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    fn mtp(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    fn rewind(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    fn invalidate(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    fn spec_restore(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    fn eval_batch(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    fn mixed_batch(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    fn verify(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    fn verify_commit(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    fn draft(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    fn hash(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
}

fn unsupported(cmd: &Command, reply: &mut Reply) -> i32 {
    reply.set_message(&format!("this worker does not support {}", command_name(cmd.raw.kind)));
    Status::EUNSUPPORTED as i32
}

/// Calls the [`Worker`] method for `cmd`'s kind (unsupported for STOP and
/// unknown kinds): what ds4tp_worker_run does per command, for loops that
/// receive commands by hand.
pub fn dispatch_command(w: &mut dyn Worker, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
    match cmd.kind() {
        Some(CommandKind::SessionCreate) => w.session_create(pair, cmd, reply),
        Some(CommandKind::SessionDestroy) => w.session_destroy(pair, cmd, reply),
        Some(CommandKind::Sync) => w.sync(pair, cmd, reply),
        Some(CommandKind::SyncImages) => w.sync_images(pair, cmd, reply),
        Some(CommandKind::Eval) => w.eval(pair, cmd, reply),
        Some(CommandKind::Mtp) => w.mtp(pair, cmd, reply),
        Some(CommandKind::Rewind) => w.rewind(pair, cmd, reply),
        Some(CommandKind::Invalidate) => w.invalidate(pair, cmd, reply),
        Some(CommandKind::SpecRestore) => w.spec_restore(pair, cmd, reply),
        Some(CommandKind::EvalBatch) => w.eval_batch(pair, cmd, reply),
        Some(CommandKind::MixedBatch) => w.mixed_batch(pair, cmd, reply),
        Some(CommandKind::Verify) => w.verify(pair, cmd, reply),
        Some(CommandKind::VerifyCommit) => w.verify_commit(pair, cmd, reply),
        Some(CommandKind::Draft) => w.draft(pair, cmd, reply),
        Some(CommandKind::Hash) => w.hash(pair, cmd, reply),
        _ => unsupported(cmd, reply),
    }
}

struct LoopState<'w> {
    worker: &'w mut dyn Worker,
    panicked: bool,
}

unsafe extern "C" fn command_trampoline(
    user_data: *mut c_void,
    pair: *mut sys::ds4tp_pair,
    cmd: *const sys::ds4tp_command,
    reply: *mut sys::ds4tp_reply,
) -> c_int {
    let state = &mut *(user_data as *mut LoopState);
    let cmd = Command { raw: *cmd, owned: false };
    let mut reply = Reply { raw: &mut *reply };
    let mut handle = Handle { p: pair };
    let w = &mut *state.worker;
    let result = catch_unwind(AssertUnwindSafe(|| dispatch_command(w, &mut handle, &cmd, &mut reply)));
    match result {
        Ok(rc) => rc,
        Err(_) => {
            // A panic must not unwind into C: fail the command instead.
            state.panicked = true;
            reply.set_message(&format!("worker callback for {} panicked", command_name(cmd.raw.kind)));
            -1
        }
    }
}

fn ptr_or_null<T>(s: &[T]) -> *const T {
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

    // ---- worker ----

    /// Waits up to `timeout_ms` (WAIT_FOREVER: as long as the leader lives)
    /// for the next command.
    pub fn recv_command(&mut self, timeout_ms: i32) -> Result<Command> {
        let mut cmd = Command::empty();
        check(unsafe { sys::ds4tp_recv_command(self.p, &mut cmd.raw, timeout_ms) })?;
        Ok(cmd)
    }
    /// COMMAND_ACK for the last command.
    pub fn send_ack(&mut self, status: i32) -> Result<()> {
        check(unsafe { sys::ds4tp_send_ack(self.p, status) })
    }
    /// SYNC_ACK: status and the tokens the session holds now.
    pub fn send_sync_ack(&mut self, status: i32, position: u32) -> Result<()> {
        check(unsafe { sys::ds4tp_send_sync_ack(self.p, status, position) })
    }
    /// One logits half (the command's logits_floats values).
    pub fn send_logits(&mut self, half: &[f32]) -> Result<()> {
        check(unsafe { sys::ds4tp_send_logits(self.p, half.as_ptr(), len32(half.len())?) })
    }
    /// Reports that the last command failed; the worker takes no more.
    pub fn send_error(&mut self, status: i32, message: &str) -> Result<()> {
        let msg = CString::new(message.replace('\0', " ")).unwrap_or_default();
        check(unsafe { sys::ds4tp_send_error(self.p, status, msg.as_ptr()) })
    }
    /// Serves commands with `worker` until STOP (Ok) or a failure (Err; a
    /// failed callback gives EFAILED after the leader was told).
    pub fn worker_run(&mut self, worker: &mut dyn Worker) -> Result<()> {
        let mut ops = std::mem::MaybeUninit::<sys::ds4tp_worker_ops>::zeroed();
        unsafe { sys::ds4tp_worker_ops_init(ops.as_mut_ptr()) };
        let mut ops = unsafe { ops.assume_init() };
        let f: sys::ds4tp_command_fn = Some(command_trampoline);
        for slot in [
            &mut ops.session_create,
            &mut ops.session_destroy,
            &mut ops.sync,
            &mut ops.sync_images,
            &mut ops.eval,
            &mut ops.mtp,
            &mut ops.rewind,
            &mut ops.invalidate,
            &mut ops.spec_restore,
            &mut ops.eval_batch,
            &mut ops.mixed_batch,
            &mut ops.verify,
            &mut ops.verify_commit,
            &mut ops.draft,
            &mut ops.hash,
        ] {
            *slot = f;
        }
        let mut state = LoopState { worker, panicked: false };
        let rc = unsafe { sys::ds4tp_worker_run(self.p, &ops, &mut state as *mut LoopState as *mut c_void) };
        let result = check(rc);
        if state.panicked {
            if let Err(e) = result {
                return Err(Error::new(e.code(), format!("{} (a worker callback panicked)", e.message())));
            }
        }
        result
    }
}

fn len32(n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::new(Status::EINVAL as i32, format!("{} elements exceed u32", n)))
}

