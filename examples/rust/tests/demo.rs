//! The demo_worker example's toy model (the C demo's weights and f32
//! arithmetic) against the C demo (ds4tp_demo), in both roles.
#[path = "../../../bindings/rust/ds4tp/tests/common/mod.rs"]
mod common;

use common::{args, demo_exe, start_demo_leader, Peer};
use ds4tp::{LogLevel, Options, Pair};
use ds4tp_examples::toy;

fn quiet(mut o: Options) -> Options {
    o.connect_timeout_ms = 30000;
    o.gate_timeout_ms = 5000;
    o.log_level = LogLevel::Warn;
    o
}

const DEMO: toy::Dims = toy::Dims { layers: 3, embd: 256, ffn: 32, tokens: 6 };

fn demo_dims() -> Vec<String> {
    args(&[&"--layers", &DEMO.layers, &"--embd", &DEMO.embd, &"--ffn", &DEMO.ffn, &"--tokens", &DEMO.tokens])
}

#[test]
fn rust_demo_worker_against_c_demo_leader() {
    let (child, port) = start_demo_leader(&demo_dims());
    let mut tp = Pair::new(&quiet(Options::worker("127.0.0.1", port)), &toy::identity(&DEMO)).unwrap();
    let outcome = toy::run(&mut tp, &DEMO);
    let done = child.finish();
    assert!(done.ok, "demo leader failed:\n{}{}", done.out, done.err);
    assert!(done.out.contains("reference: bit-identical (0 of 6 tokens differ)"), "{}", done.out);
    assert!(done.out.contains("hidden state vs the worker's: bit-identical"), "{}", done.out);
    assert!(done.out.contains("demo OK"), "{}", done.out);
    assert_eq!(outcome.unwrap(), toy::Outcome { mismatches: 0, same_as_peer: true });
}

#[test]
fn rust_leader_against_c_demo_worker() {
    let mut tp = Pair::new(&quiet(Options::leader(0)), &toy::identity(&DEMO)).unwrap();
    let mut a = args(&[&"--role", &"worker", &"--connect", &format!("127.0.0.1:{}", tp.listen_port())]);
    a.extend(demo_dims());
    let child = Peer::spawn(&demo_exe(), &a);
    let outcome = toy::run(&mut tp, &DEMO);
    let done = child.finish();
    // The C worker exits 1 unless it matched its reference and our state.
    assert!(done.ok, "demo worker failed:\n{}{}", done.out, done.err);
    assert_eq!(outcome.unwrap(), toy::Outcome { mismatches: 0, same_as_peer: true });
}
