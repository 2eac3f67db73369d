//! The README's examples, built by cargo test, run against each other.
#[path = "../../../bindings/rust/ds4tp/tests/common/mod.rs"]
mod common;

use std::path::PathBuf;

fn example(name: &str) -> PathBuf {
    // target/<profile>/deps/examples-<hash> -> target/<profile>/examples/<name>
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("examples").join(name)
}

#[test]
fn minimal_leader_and_worker_run() {
    let mut leader = common::Peer::spawn(&example("leader"), &["0".to_string()]);
    let port = leader.read_port();
    let worker = common::Peer::spawn(&example("worker"), &["127.0.0.1".to_string(), port.to_string()]);
    let w = worker.finish();
    let l = leader.finish();
    assert!(w.ok && l.ok, "worker: {}{}\nleader: {}{}", w.out, w.err, l.out, l.err);
    assert!(w.out.contains("leader sent 1") && w.out.contains("session 1 with ctx 4096"), "{}", w.out);
    assert!(l.out.contains("worker sent 2") && l.out.contains("[42.0, 42.0"), "{}", l.out);
}
