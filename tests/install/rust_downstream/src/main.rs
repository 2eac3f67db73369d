//! Leader and worker in one process (two threads) over loopback: one gate
//! each way, checked, with the worker watched through a Monitor. Prints
//! "downstream OK" and the linked library's version.
use ds4tp::{Identity, LogLevel, Options, Pair, GATE_ATTN};

fn main() -> Result<(), ds4tp::Error> {
    let id = Identity { model_bytes: 1, n_layer: 1, n_embd: 16, n_vocab: 10, ..Identity::default() };
    let mut leader = Pair::new(&Options { log_level: LogLevel::Warn, ..Options::leader(0) }, &id)?;
    let port = leader.listen_port();
    let wid = id.clone();
    let worker = std::thread::spawn(move || -> Result<f32, ds4tp::Error> {
        let opt = Options { log_level: LogLevel::Warn, ..Options::worker("127.0.0.1", port) };
        let mut tp = Pair::new(&opt, &wid)?;
        let monitor = tp.monitor();
        tp.connect()?;
        tp.attach_slab()?;
        tp.out_vector(0, GATE_ATTN)?.fill(2.0);
        tp.gate_exchange(0, GATE_ATTN, 1)?;
        assert!(!monitor.failed(), "{}", monitor.errmsg());
        Ok(tp.in_vector(0, GATE_ATTN)?[0])
    });
    leader.connect()?;
    leader.attach_slab()?;
    leader.out_vector(0, GATE_ATTN)?.fill(1.0);
    leader.gate_exchange(0, GATE_ATTN, 1)?;
    let from_worker = leader.in_vector(0, GATE_ATTN)?[0];
    let from_leader = worker.join().expect("worker thread")?;
    assert_eq!((from_worker, from_leader), (2.0, 1.0));
    println!("downstream OK: libds4tp {} over {}", ds4tp::version_string(), leader.transport().name());
    Ok(())
}
