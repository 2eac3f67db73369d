//! Programs using the `ds4tp` crate (bindings/rust): `examples/leader.rs`
//! and `examples/worker.rs` (the README's minimal pair) and
//! `examples/demo_worker` (the C demo's worker in Rust). This library only
//! shares the demo's toy model with the tests.

#[path = "../examples/demo_worker/toy.rs"]
pub mod toy;
