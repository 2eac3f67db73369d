//! The control plane from Rust against C (tests/bindings/ds4tp_peer.c
//! --control): a Rust leader sends every command to a C worker (callback
//! loop or manual), and a Rust worker (worker_run with a Worker, or
//! recv_command by hand) serves a C leader. Every value is checked on both
//! sides; see the peer's control_leader() and worker_handle().
mod common;

use common::{args, peer_exe, Peer};
use ds4tp::{
    BatchItem, Command, CommandKind, CommitMode, DraftMode, Handle, Identity, Image, LogLevel, Options, Pair, Reply, Status,
    Worker, dispatch_command, ACK_CANCELLED, ACK_DONE, ACK_UNAVAILABLE, DRAFTER_META_BYTES, VERIFY_DRAFT_SHARED,
};

const N_LAYER: u32 = 2;
const N_EMBD: u32 = 32;
const SID: u64 = 42;
const SID2: u64 = 43;
const LF: u32 = 16;
const HEAD_FLOATS: usize = 32;
const BAD_SID: u64 = 999;
const FAIL_STATUS: i32 = -42;
const LEADER_CAPS: u32 = 0xB;
const WORKER_CAPS: u32 = 0x6;
const EXEC_FLAGS: u32 = 0x5;
const GOOD_HASH: u64 = 0xABCDEF;
const TEN: [i32; 10] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];

fn logit(kind: CommandKind, row: u32, i: u32) -> f32 {
    (kind as i32 * 10000 + row as i32 * 100 + i as i32) as f32 * 0.5
}

fn logits(kind: CommandKind, rows: u32) -> Vec<f32> {
    (0..rows).flat_map(|r| (0..LF).map(move |i| logit(kind, r, i))).collect()
}

fn head_row() -> Vec<f32> {
    (0..HEAD_FLOATS).map(|i| (1000 + i) as f32 * 0.125).collect()
}

fn meta() -> [u8; DRAFTER_META_BYTES] {
    let mut m = [0u8; DRAFTER_META_BYTES];
    for (i, b) in m.iter_mut().enumerate() {
        *b = (i as u8) ^ 0x5A;
    }
    m
}

fn fingerprint() -> [u8; 32] {
    let mut f = [0u8; 32];
    for (i, b) in f.iter_mut().enumerate() {
        *b = (i * 7) as u8;
    }
    f
}

fn image_embd() -> Vec<f32> {
    (0..2).flat_map(|t| (0..N_EMBD).map(move |i| (t * 1000 + i) as f32 * 0.25)).collect()
}

fn image(embd: &[f32]) -> Image<'_> {
    Image { token_start: 1, token_count: 2, data_width: N_EMBD, width: 4, height: 4, content_width: 4, content_height: 3, fingerprint: fingerprint(), embd }
}

fn identity() -> Identity {
    Identity { model_bytes: 0xB1D, model_id: 7, n_layer: N_LAYER, n_embd: N_EMBD, n_vocab: 1000, quant_bits: 32, ctx_size: 512, ..Identity::default() }
}

fn options(mut o: Options) -> Options {
    o.connect_timeout_ms = 30000;
    o.gate_timeout_ms = 5000;
    o.frame_timeout_ms = 20000;
    o.log_level = LogLevel::Warn;
    o
}

fn read_logits(tp: &mut Pair, kind: CommandKind, row: u32) -> ds4tp::Result<()> {
    let mut half = vec![0f32; LF as usize];
    tp.recv_logits(&mut half)?;
    assert_eq!(half, logits(kind, row + 1)[(row * LF) as usize..], "{:?} row {}", kind, row);
    Ok(())
}

fn leader_script(tp: &mut Pair, fail: bool) -> ds4tp::Result<()> {
    tp.connect()?;
    assert_eq!(tp.agree_execution_mode(EXEC_FLAGS, LEADER_CAPS)?, LEADER_CAPS & WORKER_CAPS);
    assert_eq!(tp.agree_drafter_split(true, Some(&meta()))?, (true, true));

    tp.send_session_create(SID, 512)?;
    assert_eq!(tp.wait_ack(SID)?, ACK_DONE);
    tp.send_sync(SID, &TEN, LF)?;
    assert_eq!(tp.wait_sync(SID)?, (0, 10));
    read_logits(tp, CommandKind::Sync, 0)?;

    tp.send_session_create(SID2, 256)?;
    assert_eq!(tp.wait_ack(SID2)?, 0);
    tp.send_sync(SID2, &TEN, LF)?;
    assert!(tp.sync_checkpoint(1, 5, 10, false)?);
    assert_eq!(tp.wait_sync(SID2)?, (ACK_CANCELLED, 5));
    let mut half = vec![0f32; LF as usize];
    assert_eq!(tp.recv_logits(&mut half).unwrap_err().status(), Some(Status::ESTATE));

    let embd = image_embd();
    tp.send_sync_images(SID, &TEN[..6], &[image(&embd)], LF)?;
    assert_eq!(tp.wait_sync(SID)?, (0, 6));
    read_logits(tp, CommandKind::SyncImages, 0)?;
    tp.send_eval(SID, 1, 77, LF)?;
    read_logits(tp, CommandKind::Eval, 0)?;
    tp.send_mtp(SID, 2, 78, 3)?;
    assert_eq!(tp.wait_ack(SID)?, 0);
    tp.send_rewind(SID, 5)?;
    tp.send_invalidate(SID)?;
    tp.send_spec_restore(SID, 4)?;
    assert_eq!(tp.wait_ack(SID)?, ACK_UNAVAILABLE);

    tp.send_eval_batch(&[BatchItem::new(SID, 5), BatchItem::new(SID2, 6)], LF)?;
    assert_eq!(tp.wait_ack(0)?, 0);
    read_logits(tp, CommandKind::EvalBatch, 0)?;
    read_logits(tp, CommandKind::EvalBatch, 1)?;
    tp.send_mixed_batch(SID, &[9, 8, 7], &[BatchItem::new(SID2, 3)], LF)?;
    assert_eq!(tp.wait_ack(SID)?, 0);
    read_logits(tp, CommandKind::MixedBatch, 0)?;
    read_logits(tp, CommandKind::MixedBatch, 1)?;

    tp.send_verify(SID, &[11, 12, 13], VERIFY_DRAFT_SHARED)?;
    assert_eq!(tp.block_begin(3, N_LAYER, 1)?, 1);
    let mut peer = [0u8; 8];
    tp.small_exchange(b"leader!!", &mut peer)?;
    assert_eq!(&peer, b"worker!!");
    let mut row = vec![0f32; HEAD_FLOATS];
    tp.head_row_recv(1, &mut row)?;
    assert_eq!(row, head_row());
    tp.block_end()?;
    tp.send_verify_commit(CommitMode::Prefix, 2, 0)?;
    tp.send_draft(SID, 5, 7, DraftMode::Propose)?;

    tp.hash_check(SID, 9, GOOD_HASH)?;
    assert_eq!(tp.hash_check(SID, 10, 1).unwrap_err().status(), Some(Status::EDIVERGED));
    assert!(!tp.failed());

    tp.send_session_destroy(SID2)?;
    assert_eq!(tp.wait_ack(SID2)?, 0);
    tp.send_session_destroy(SID)?;
    assert_eq!(tp.wait_ack(SID)?, 0);
    if fail {
        tp.send_session_destroy(BAD_SID)?;
        let err = tp.wait_ack(BAD_SID).unwrap_err();
        // EREMOTE per ds4tp.h; EFAILED (same words) when the library's
        // watcher sees the worker close first (a known library race).
        assert!(matches!(err.status(), Some(Status::EREMOTE) | Some(Status::EFAILED)), "{}", err);
        assert!(err.message().contains("no session 999"), "{}", err);
        assert_eq!(tp.remote_status(), FAIL_STATUS);
        assert!(tp.failed());
        return Ok(());
    }
    tp.send_stop()?;
    // Closing handshake (see ds4tp_peer.c): the worker has read STOP.
    let mut bye = [0u8];
    tp.small_exchange(b"L", &mut bye)?;
    assert_eq!(&bye, b"W");
    Ok(())
}

fn rust_leader(worker_flags: &[&str], fail: bool) {
    let mut tp = Pair::new(&options(Options::leader(0)), &identity()).unwrap();
    let mut a = args(&[&"worker", &"--control", &"--port", &tp.listen_port(), &"--layers", &N_LAYER, &"--embd", &N_EMBD]);
    a.extend(worker_flags.iter().map(|s| s.to_string()));
    let child = Peer::spawn(&peer_exe(), &a);
    let result = leader_script(&mut tp, fail);
    let done = child.finish();
    assert!(result.is_ok(), "{:?}\nworker: {}", result, done.err);
    assert!(done.ok && done.out.contains("peer OK: rank 1"), "{}{}", done.out, done.err);
    assert_eq!(done.out.contains("reported the failure"), fail);
}

#[test]
fn rust_leader_c_worker_loop() {
    rust_leader(&[], false);
}

#[test]
fn rust_leader_c_worker_manual() {
    rust_leader(&["--manual"], false);
}

#[test]
fn rust_leader_c_worker_remote_failure() {
    rust_leader(&[], true);
}

/// The Rust twin of the peer's worker_handle.
#[derive(Default)]
struct TestWorker {
    commands: u32,
    failed_on_purpose: bool,
    panic_on_sync: bool,
}

impl Worker for TestWorker {
    fn session_create(&mut self, _: &mut Handle, cmd: &Command, _: &mut Reply) -> i32 {
        self.commands += 1;
        assert!([(SID, 512), (SID2, 256)].contains(&(cmd.session_id(), cmd.ctx_size())));
        0
    }
    fn session_destroy(&mut self, _: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        self.commands += 1;
        if cmd.session_id() == BAD_SID {
            self.failed_on_purpose = true;
            reply.set_message("no session 999 on the worker");
            return FAIL_STATUS;
        }
        assert!(cmd.session_id() == SID || cmd.session_id() == SID2);
        0
    }
    fn sync(&mut self, pair: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        self.commands += 1;
        if self.panic_on_sync {
            panic!("engine blew up");
        }
        assert_eq!((cmd.tokens(), cmd.logits_floats()), (&TEN[..], LF));
        if cmd.session_id() == SID2 {
            assert!(pair.sync_checkpoint(1, 5, 10, true).unwrap());
            reply.set_position(5);
            return ACK_CANCELLED;
        }
        assert_eq!((reply.position(), reply.logits_rows()), (10, 1));
        reply.logits().copy_from_slice(&logits(CommandKind::Sync, 1));
        0
    }
    fn sync_images(&mut self, _: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        self.commands += 1;
        assert_eq!(cmd.tokens(), &TEN[..6]);
        let embd = image_embd();
        assert_eq!(cmd.images(), vec![image(&embd)]);
        reply.logits().copy_from_slice(&logits(CommandKind::SyncImages, 1));
        0
    }
    fn eval(&mut self, _: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        self.commands += 1;
        assert_eq!((cmd.session_id(), cmd.seq(), cmd.token(), cmd.logits_floats()), (SID, 1, 77, LF));
        reply.logits().copy_from_slice(&logits(CommandKind::Eval, 1));
        0
    }
    fn mtp(&mut self, _: &mut Handle, cmd: &Command, _: &mut Reply) -> i32 {
        self.commands += 1;
        assert_eq!((cmd.session_id(), cmd.seq(), cmd.token(), cmd.limit()), (SID, 2, 78, 3));
        0
    }
    fn rewind(&mut self, _: &mut Handle, cmd: &Command, _: &mut Reply) -> i32 {
        self.commands += 1;
        assert_eq!((cmd.session_id(), cmd.pos()), (SID, 5));
        0
    }
    fn invalidate(&mut self, _: &mut Handle, cmd: &Command, _: &mut Reply) -> i32 {
        self.commands += 1;
        assert_eq!(cmd.session_id(), SID);
        0
    }
    fn spec_restore(&mut self, _: &mut Handle, cmd: &Command, _: &mut Reply) -> i32 {
        self.commands += 1;
        assert_eq!((cmd.session_id(), cmd.pos()), (SID, 4));
        ACK_UNAVAILABLE
    }
    fn eval_batch(&mut self, _: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        self.commands += 1;
        assert_eq!(cmd.items(), &[BatchItem::new(SID, 5), BatchItem::new(SID2, 6)]);
        reply.logits().copy_from_slice(&logits(CommandKind::EvalBatch, 2));
        0
    }
    fn mixed_batch(&mut self, _: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        self.commands += 1;
        assert_eq!((cmd.session_id(), cmd.tokens()), (SID, &[9, 8, 7][..]));
        assert_eq!(cmd.items(), &[BatchItem::new(SID2, 3)]);
        reply.logits().copy_from_slice(&logits(CommandKind::MixedBatch, 2));
        0
    }
    fn verify(&mut self, pair: &mut Handle, cmd: &Command, _: &mut Reply) -> i32 {
        self.commands += 1;
        assert_eq!((cmd.tokens(), cmd.flags()), (&[11, 12, 13][..], VERIFY_DRAFT_SHARED));
        assert_eq!(pair.block_begin(3, N_LAYER, 2).unwrap(), 1);
        let mut peer = [0u8; 8];
        pair.small_exchange(b"worker!!", &mut peer).unwrap();
        assert_eq!(&peer, b"leader!!");
        pair.head_row_send(1, &head_row()).unwrap();
        pair.block_end().unwrap();
        0
    }
    fn verify_commit(&mut self, _: &mut Handle, cmd: &Command, _: &mut Reply) -> i32 {
        self.commands += 1;
        assert_eq!((cmd.mode(), cmd.count()), (CommitMode::Prefix as u32, 2));
        0
    }
    fn draft(&mut self, _: &mut Handle, cmd: &Command, _: &mut Reply) -> i32 {
        self.commands += 1;
        assert_eq!((cmd.session_id(), cmd.token(), cmd.pos(), cmd.mode()), (SID, 5, 7, DraftMode::Propose as u32));
        0
    }
    fn hash(&mut self, _: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        self.commands += 1;
        assert!(cmd.session_id() == SID && (cmd.seq() == 9 || cmd.seq() == 10));
        reply.set_hash(if cmd.seq() == 9 { GOOD_HASH } else { 2 });
        0
    }
}

/// recv_command and the explicit replies, as ds4tp.h describes them.
fn serve_by_hand(tp: &mut Pair, w: &mut TestWorker) -> ds4tp::Result<()> {
    loop {
        let cmd = tp.recv_command(30000)?;
        let kind = cmd.kind().expect("a known command");
        if kind == CommandKind::Stop {
            return Ok(());
        }
        let rows = match kind {
            _ if cmd.logits_floats() == 0 => 0,
            CommandKind::Eval | CommandKind::Sync | CommandKind::SyncImages => 1,
            CommandKind::EvalBatch => cmd.items().len() as u32,
            CommandKind::MixedBatch => 1 + cmd.items().len() as u32,
            CommandKind::VerifyCommit => (cmd.mode() == CommitMode::Rollback as u32 && cmd.count() > 0) as u32,
            _ => 0,
        };
        let mut logits = vec![0f32; (rows * cmd.logits_floats()) as usize];
        let mut raw = ds4tp::sys::ds4tp_reply {
            logits: if rows > 0 { logits.as_mut_ptr() } else { std::ptr::null_mut() },
            logits_rows: rows,
            logits_floats: cmd.logits_floats(),
            position: cmd.tokens().len() as u32,
            hash: 0,
            message: [0; 256],
        };
        let (status, position, hash, message) = {
            let mut reply = Reply::from_raw(&mut raw);
            let status = dispatch_command(w, tp, &cmd, &mut reply);
            (status, reply.position(), reply.hash(), reply.message())
        };
        if status < 0 {
            return tp.send_error(status, &message);
        }
        match kind {
            CommandKind::SessionCreate
            | CommandKind::SessionDestroy
            | CommandKind::Mtp
            | CommandKind::SpecRestore
            | CommandKind::EvalBatch
            | CommandKind::MixedBatch => tp.send_ack(status)?,
            CommandKind::Sync | CommandKind::SyncImages => tp.send_sync_ack(status, position)?,
            CommandKind::Hash => match tp.hash_check(cmd.session_id(), cmd.seq(), hash) {
                Err(e) if e.status() == Some(Status::EDIVERGED) && cmd.seq() == 10 => {}
                other => other?,
            },
            _ => {}
        }
        if status == 0 {
            for half in logits.chunks(LF as usize) {
                tp.send_logits(half)?;
            }
        }
    }
}

fn rust_worker(manual: bool, fail: bool) {
    let mut a = args(&[&"leader", &"--control", &"--layers", &N_LAYER, &"--embd", &N_EMBD]);
    if fail {
        a.push("--fail".into());
    }
    let mut child = Peer::spawn(&peer_exe(), &a);
    let port = child.read_port();
    let mut tp = Pair::new(&options(Options::worker("127.0.0.1", port)), &identity()).unwrap();
    let mut w = TestWorker::default();
    let result = (|| -> ds4tp::Result<()> {
        tp.connect()?;
        assert_eq!(tp.agree_execution_mode(EXEC_FLAGS, WORKER_CAPS)?, LEADER_CAPS & WORKER_CAPS);
        assert_eq!(tp.agree_drafter_split(true, Some(&meta()))?, (true, true));
        if manual {
            serve_by_hand(&mut tp, &mut w)?;
        } else {
            tp.worker_run(&mut w)?;
        }
        if !fail {
            // The leader's closing handshake.
            let mut bye = [0u8];
            tp.small_exchange(b"W", &mut bye)?;
            assert_eq!(&bye, b"L");
        }
        Ok(())
    })();
    let done = child.finish();
    if fail && !manual {
        assert_eq!(result.unwrap_err().status(), Some(Status::EFAILED));
    } else {
        assert!(result.is_ok(), "{:?}\nleader: {}", result, done.err);
    }
    assert!(done.ok && done.out.contains("peer OK: rank 0"), "{}{}", done.out, done.err);
    assert_eq!((w.failed_on_purpose, w.commands), (fail, 19 + fail as u32));
}

#[test]
fn rust_worker_loop_c_leader() {
    rust_worker(false, false);
}

#[test]
fn rust_worker_manual_c_leader() {
    rust_worker(true, false);
}

#[test]
fn rust_worker_loop_remote_failure() {
    rust_worker(false, true);
}

#[test]
fn rust_worker_manual_remote_failure() {
    rust_worker(true, true);
}

#[test]
fn a_panicking_callback_fails_the_command_not_the_process() {
    let mut child = Peer::spawn(&peer_exe(), &args(&[&"leader", &"--control", &"--layers", &N_LAYER, &"--embd", &N_EMBD]));
    let port = child.read_port();
    let mut tp = Pair::new(&options(Options::worker("127.0.0.1", port)), &identity()).unwrap();
    tp.connect().unwrap();
    tp.agree_execution_mode(EXEC_FLAGS, WORKER_CAPS).unwrap();
    tp.agree_drafter_split(true, Some(&meta())).unwrap();
    let mut w = TestWorker { panic_on_sync: true, ..TestWorker::default() };
    let err = tp.worker_run(&mut w).unwrap_err();
    assert_eq!(err.status(), Some(Status::EFAILED));
    assert!(err.message().contains("panicked"), "{}", err);
    let done = child.finish();
    assert!(!done.ok && done.err.contains("panicked"), "{}", done.err);
}
