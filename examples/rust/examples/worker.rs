//! Minimal worker for examples/leader.rs: mirrors its gates, then serves
//! its commands until STOP.
//!   cargo run --offline --example worker -- 127.0.0.1 7070
use ds4tp::{Command, Handle, Identity, Options, Pair, Reply, Worker};

/// One method per command kind this worker supports (the rest are
/// reported unsupported).
struct Engine;

impl Worker for Engine {
    fn session_create(&mut self, _: &mut Handle, cmd: &Command, _: &mut Reply) -> i32 {
        println!("session {} with ctx {}", cmd.session_id(), cmd.ctx_size());
        0
    }
    fn eval(&mut self, _: &mut Handle, cmd: &Command, reply: &mut Reply) -> i32 {
        reply.logits().fill(cmd.token() as f32);
        0
    }
}

fn main() -> Result<(), ds4tp::Error> {
    let mut args = std::env::args().skip(1);
    let host = args.next().unwrap_or_else(|| "127.0.0.1".into());
    let port = args.next().and_then(|p| p.parse().ok()).unwrap_or(7070);
    let id = Identity { model_bytes: 1, n_layer: 2, n_embd: 64, n_vocab: 1000, ..Identity::default() };
    let mut tp = Pair::new(&Options::worker(&host, port), &id)?;
    tp.connect()?; // dials with retry until the leader answers
    tp.attach_slab()?;
    let mut seq = 0;
    for layer in 0..id.n_layer {
        for gate in [ds4tp::GATE_ATTN, ds4tp::GATE_FFN] {
            tp.out_vector(layer, gate)?.fill(2.0);
            seq += 1;
            tp.gate_exchange(layer, gate, seq)?;
            println!("layer {} gate {}: leader sent {}", layer, gate, tp.in_vector(layer, gate)?[0]);
        }
    }
    tp.worker_run(&mut Engine) // returns at the leader's STOP
}
