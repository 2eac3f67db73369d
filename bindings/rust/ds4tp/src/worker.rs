//! The worker side of the control plane: received commands, replies, and
//! serving them by hand ([`Handle::recv_command`] and the explicit replies)
//! or with [`Handle::worker_run`] and a [`Worker`] implementation.

use crate::control::len32;
use crate::{check, command_name, sys, BatchItem, CommandKind, Error, Handle, Image, Result, Status};
use std::ffi::CString;
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

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
    /// The session the command is for.
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
    /// Rows of logits the leader reads.
    pub fn logits_rows(&self) -> u32 {
        self.raw.logits_rows
    }
    /// Floats per logits row (the leader's half).
    pub fn logits_floats(&self) -> u32 {
        self.raw.logits_floats
    }
    /// SYNC*: tokens held after it (preset to the command's token count).
    pub fn position(&self) -> u32 {
        self.raw.position
    }
    /// SYNC*: sets the tokens the session holds after the command.
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
    /// The `SESSION_CREATE` command (CommandKind::SessionCreate); default: unsupported.
    fn session_create(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    /// The `SESSION_DESTROY` command (CommandKind::SessionDestroy); default: unsupported.
    fn session_destroy(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    /// The `SYNC` command (CommandKind::Sync); default: unsupported.
    fn sync(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    /// The `SYNC_IMAGES` command (CommandKind::SyncImages); default: unsupported.
    fn sync_images(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    /// The `EVAL` command (CommandKind::Eval); default: unsupported.
    fn eval(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    /// The `MTP` command (CommandKind::Mtp); default: unsupported.
    fn mtp(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    /// The `REWIND` command (CommandKind::Rewind); default: unsupported.
    fn rewind(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    /// The `INVALIDATE` command (CommandKind::Invalidate); default: unsupported.
    fn invalidate(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    /// The `SPEC_RESTORE` command (CommandKind::SpecRestore); default: unsupported.
    fn spec_restore(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    /// The `EVAL_BATCH` command (CommandKind::EvalBatch); default: unsupported.
    fn eval_batch(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    /// The `MIXED_BATCH` command (CommandKind::MixedBatch); default: unsupported.
    fn mixed_batch(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    /// The `VERIFY` command (CommandKind::Verify); default: unsupported.
    fn verify(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    /// The `VERIFY_COMMIT` command (CommandKind::VerifyCommit); default: unsupported.
    fn verify_commit(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    /// The `DRAFT` command (CommandKind::Draft); default: unsupported.
    fn draft(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        unsupported(cmd, reply)
    }
    /// The `HASH` command (CommandKind::Hash); default: unsupported.
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

impl Handle {
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
