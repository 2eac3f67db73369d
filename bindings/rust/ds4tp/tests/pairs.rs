//! Rust ranks against C ranks over loopback, payloads checked bit for bit:
//! the crate against ds4tp_peer (row, batch and big gates, driven by call,
//! callback, staging hooks or the gate service).
mod common;

use common::{args, peer_exe, Peer};
use ds4tp::{GateServiceOptions, Identity, LogLevel, Options, Pair, ServiceState, Stage, StagingHooks, Status, Transport};
use std::time::{Duration, Instant};

const BIG_WORDS: usize = 3 * 65536 + 7;

/// ds4tp_peer's word(rank, seq, i).
fn word(rank: u32, seq: u64, i: u64) -> u32 {
    rank.wrapping_mul(0x9e3779b1) ^ (seq as u32).wrapping_mul(0x85ebca6b) ^ (i as u32).wrapping_mul(0xc2b2ae35)
}

fn peer_identity(n_layer: u32, n_embd: u32) -> Identity {
    Identity { model_bytes: 0xB1D, model_id: 7, n_layer, n_embd, n_vocab: 1000, quant_bits: 32, ctx_size: 512, ..Identity::default() }
}

fn quiet(mut o: Options) -> Options {
    o.connect_timeout_ms = 30000;
    o.gate_timeout_ms = 5000;
    o.log_level = LogLevel::Warn;
    o
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Call,
    Callback,
    Hooks,
    Service,
}

fn fill(dst: &mut [u8], rank: u32, seq: u64, first: u64) {
    for (i, chunk) in dst.chunks_exact_mut(4).enumerate() {
        chunk.copy_from_slice(&word(rank, seq, first + i as u64).to_le_bytes());
    }
}

fn matches(src: &[u8], rank: u32, seq: u64, first: u64) -> bool {
    src.chunks_exact(4).enumerate().all(|(i, c)| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) == word(rank, seq, first + i as u64))
}

fn as_bytes_mut(v: &mut [f32]) -> &mut [u8] {
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, v.len() * 4) }
}

fn as_bytes(v: &[f32]) -> &[u8] {
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len() * 4) }
}

/// Hooks that fill and check the payloads in the staging callbacks.
struct PatternHooks {
    rank: u32,
    n: u64,
    stride: usize,
    calls: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl StagingHooks for PatternHooks {
    fn before_exchange(&mut self, stage: Stage, seq: u64, out: &mut [u8]) -> i32 {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match stage {
            Stage::Row { .. } => fill(out, self.rank, seq, 0),
            Stage::Batch { rows, .. } => {
                for k in 0..rows as usize {
                    let at = k * self.stride;
                    fill(&mut out[at..at + self.n as usize * 4], self.rank, 1_000_000 + seq, k as u64 * self.n);
                }
            }
        }
        0
    }
    fn after_exchange(&mut self, stage: Stage, seq: u64, inp: &[u8]) -> i32 {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let peer = 1 - self.rank;
        let ok = match stage {
            Stage::Row { .. } => matches(inp, peer, seq, 0),
            Stage::Batch { rows, .. } => (0..rows as usize).all(|k| {
                let at = k * self.stride;
                matches(&inp[at..at + self.n as usize * 4], peer, 1_000_000 + seq, k as u64 * self.n)
            }),
        };
        if ok {
            0
        } else {
            7 // fails the gate with EIO naming 7
        }
    }
}

/// The Rust side of ds4tp_peer's script (see tests/bindings/ds4tp_peer.c).
fn play(tp: &mut Pair, tokens: u32, mode: Mode) -> Result<(), String> {
    let (rank, peer) = (tp.rank(), 1 - tp.rank());
    tp.connect().map_err(|e| e.to_string())?;
    tp.attach_slab().map_err(|e| e.to_string())?;
    let l = tp.layout();
    let n = l.vec_bytes / 4;
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    if mode == Mode::Hooks {
        let hooks = PatternHooks { rank, n, stride: l.vec_stride as usize, calls: calls.clone() };
        tp.set_staging_hooks(Some(Box::new(hooks))).map_err(|e| e.to_string())?;
    }
    let service = GateServiceOptions { spin_us: 100, ..GateServiceOptions::default() };
    if mode == Mode::Service {
        tp.gate_service_start(&service).map_err(|e| e.to_string())?;
        assert_eq!(tp.gate_service_state(), ServiceState::Running);
    }
    let mut seq = 0u64;
    for t in 0..tokens {
        for slot in 0..l.slots {
            let (layer, gate) = (slot / 2, slot % 2);
            seq += 1;
            if mode != Mode::Hooks {
                fill(as_bytes_mut(tp.out_vector(layer, gate).unwrap()), rank, seq, 0);
            }
            match mode {
                Mode::Callback => {
                    if !tp.gate_callback(layer, gate, seq) {
                        return Err(tp.errmsg());
                    }
                }
                Mode::Service => {
                    tp.gate_ready(slot, seq).unwrap();
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while tp.gate_released(slot).unwrap() < seq {
                        if Instant::now() > deadline {
                            return Err(format!("service never released seq {}", seq));
                        }
                        std::hint::spin_loop();
                    }
                    if tp.gate_released(slot).unwrap() != seq {
                        return Err(format!("poisoned: {}", tp.errmsg()));
                    }
                }
                _ => tp.gate_exchange(layer, gate, seq).map_err(|e| e.to_string())?,
            }
            if mode != Mode::Hooks && !matches(as_bytes(tp.in_vector(layer, gate).unwrap()), peer, seq, 0) {
                return Err(format!("gate seq {} payload differs", seq));
            }
        }
        if mode == Mode::Service {
            assert_eq!(tp.gate_seq(), seq);
            tp.gate_service_stop().map_err(|e| e.to_string())?;
        }
        let (index, rows, bseq) = (t % l.batch_gates, t % 8 + 1, u64::from(t) + 1);
        if mode != Mode::Hooks {
            for k in 0..rows {
                fill(as_bytes_mut(tp.batch_out_row(index, k).unwrap()), rank, 1_000_000 + bseq, u64::from(k) * n);
            }
        }
        if mode == Mode::Callback {
            if !tp.batch_gate_callback(index, rows, bseq) {
                return Err(tp.errmsg());
            }
        } else {
            tp.batch_gate_exchange(index, rows, bseq).map_err(|e| e.to_string())?;
        }
        if mode != Mode::Hooks {
            for k in 0..rows {
                if !matches(as_bytes(tp.batch_in_row(index, k).unwrap()), peer, 1_000_000 + bseq, u64::from(k) * n) {
                    return Err(format!("batch seq {} row {} differs", bseq, k));
                }
            }
        }
        if mode == Mode::Service && t + 1 < tokens {
            tp.gate_service_start(&service).map_err(|e| e.to_string())?;
        }
    }
    let out: Vec<u32> = (0..BIG_WORDS as u64).map(|i| word(rank, 2_000_000, i)).collect();
    let mut into = vec![0u32; BIG_WORDS];
    if mode == Mode::Callback {
        if !tp.big_gate_callback(0, 1, &out, &mut into) {
            return Err(tp.errmsg());
        }
    } else {
        tp.big_gate_exchange(0, 1, &out, &mut into).map_err(|e| e.to_string())?;
    }
    if (0..BIG_WORDS).any(|i| into[i] != word(peer, 2_000_000, i as u64)) {
        return Err("big gate payload differs".into());
    }
    if mode == Mode::Hooks {
        let staged = calls.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(staged, 2 * (seq + u64::from(tokens)), "hooks ran for every row and batch gate");
    }
    Ok(())
}

fn rust_leader_c_worker(mode: Mode, transport: &str) {
    let id = peer_identity(2, 48);
    let mut opt = quiet(Options::leader(0));
    opt.transport = if transport == "tcp" { Transport::Tcp } else { Transport::Auto };
    let mut tp = Pair::new(&opt, &id).unwrap();
    let child = Peer::spawn(
        &peer_exe(),
        &args(&[&"worker", &"--port", &tp.listen_port(), &"--layers", &2, &"--embd", &48, &"--tokens", &3, &"--transport", &transport]),
    );
    let result = play(&mut tp, 3, mode);
    let done = child.finish();
    assert!(result.is_ok(), "{:?}: {:?}\npeer: {}", mode, result, done.err);
    assert!(done.ok && done.out.contains("peer OK: rank 1"), "{}{}", done.out, done.err);
    if transport == "tcp" {
        assert_eq!(tp.transport(), Transport::Tcp);
    }
    // The stats count exactly what play() ran: 3 tokens x 2 layers x 2 gates,
    // a batch gate per token, one big gate.
    let st = tp.stats().unwrap();
    assert_eq!((st.row_gates, st.batch_gates, st.big_gates), (12, 3, 1), "{:?}", st);
    assert_eq!(st.row_gate.count, st.row_gate.buckets.iter().sum::<u64>());
    let text = tp.prometheus().unwrap();
    assert!(text.contains("# TYPE ds4tp_gate_duration_seconds histogram"), "{}", text);
}

#[test]
fn rust_leader_c_worker_call_tcp() {
    rust_leader_c_worker(Mode::Call, "tcp");
}

#[test]
fn rust_leader_c_worker_call_auto() {
    rust_leader_c_worker(Mode::Call, "auto");
}

#[test]
fn rust_leader_c_worker_callbacks() {
    rust_leader_c_worker(Mode::Callback, "auto");
}

#[test]
fn rust_leader_c_worker_staging_hooks() {
    rust_leader_c_worker(Mode::Hooks, "auto");
}

#[test]
fn rust_leader_c_worker_gate_service() {
    rust_leader_c_worker(Mode::Service, "auto");
}

#[test]
fn rust_worker_c_leader() {
    let mut child = Peer::spawn(&peer_exe(), &args(&[&"leader", &"--layers", &3, &"--embd", &80, &"--tokens", &4]));
    let port = child.read_port();
    let mut tp = Pair::new(&quiet(Options::worker("127.0.0.1", port)), &peer_identity(3, 80)).unwrap();
    let result = play(&mut tp, 4, Mode::Call);
    let done = child.finish();
    assert!(result.is_ok(), "{:?}\npeer: {}", result, done.err);
    assert!(done.ok && done.out.contains("peer OK: rank 0"), "{}{}", done.out, done.err);
    assert_eq!((tp.rank(), tp.peer_ctx_size()), (1, 512));
}

#[test]
fn identity_mismatch_is_an_error_naming_the_field() {
    let mut child = Peer::spawn(&peer_exe(), &args(&[&"leader", &"--layers", &4]));
    let port = child.read_port();
    let mut tp = Pair::new(&quiet(Options::worker("127.0.0.1", port)), &peer_identity(5, 64)).unwrap();
    let err = tp.connect().unwrap_err();
    assert_eq!(err.status(), Some(Status::EIDENTITY), "{}", err);
    assert!(err.message().contains("n_layer"), "{}", err);
    assert!(tp.failed());
    let done = child.finish();
    assert!(!done.ok && done.err.contains("EIDENTITY"), "{}", done.err);
}
