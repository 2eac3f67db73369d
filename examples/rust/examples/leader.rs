//! Minimal leader: swaps one partial per gate with the worker
//! (examples/worker.rs) for one token, then mirrors one EVAL and reads the
//! worker's logits half.
//!   cargo run --offline --example leader -- 7070   (0: a free port, printed as "port P")
use ds4tp::{Identity, Options, Pair};

fn main() -> Result<(), ds4tp::Error> {
    let port = std::env::args().nth(1).and_then(|p| p.parse().ok()).unwrap_or(7070);
    let id = Identity { model_bytes: 1, n_layer: 2, n_embd: 64, n_vocab: 1000, ..Identity::default() };
    let mut tp = Pair::new(&Options::leader(port), &id)?;
    println!("port {}", tp.listen_port()); // port 0 picks a free one
    tp.connect()?; // waits for the worker, checks its identity
    tp.attach_slab()?;
    let mut seq = 0;
    for layer in 0..id.n_layer {
        for gate in [ds4tp::GATE_ATTN, ds4tp::GATE_FFN] {
            tp.out_vector(layer, gate)?.fill(1.0); // this rank's partial
            seq += 1;
            tp.gate_exchange(layer, gate, seq)?;
            println!("layer {} gate {}: worker sent {}", layer, gate, tp.in_vector(layer, gate)?[0]);
        }
    }
    tp.send_session_create(1, 4096)?;
    tp.wait_ack(1)?;
    tp.send_eval(1, 1, 42, 8)?;
    let mut half = [0f32; 8];
    tp.recv_logits(&mut half)?;
    println!("worker logits half: {:?}", half);
    tp.send_stop()
}
