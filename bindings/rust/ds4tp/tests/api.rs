//! The safe API without a peer: versions, names, defaults, the schedule,
//! errors and a leader's queries (these were the crate's unit tests).
use ds4tp::*;
use std::sync::Arc;


#[test]
fn versions_match_the_header() {
    assert_eq!(version(), sys::DS4TP_VERSION_HEX);
    assert_eq!(protocol_version(), sys::DS4TP_PROTOCOL_VERSION);
    assert_eq!(
        version_string(),
        format!("{}.{}.{}", sys::DS4TP_VERSION_MAJOR, sys::DS4TP_VERSION_MINOR, sys::DS4TP_VERSION_PATCH)
    );
}

#[test]
fn status_names_match_the_library() {
    for s in Status::ALL {
        assert_eq!(s.name(), format!("DS4TP_{:?}", s));
        assert!(!strerror(s.code()).is_empty());
    }
    assert_eq!(err_name(-999), "DS4TP_UNKNOWN");
}

#[test]
fn defaults_come_from_the_library() {
    let o = Options::default();
    assert_eq!(o.listen_host, "127.0.0.1");
    assert_eq!(o.gate_timeout_ms, 750);
    assert_eq!(o.transport, Transport::Auto);
    assert_eq!(GateServiceOptions::default().cpu, -1);
    assert_eq!(Transport::Tcp.name(), "tcp");
    assert!(Transport::Tcp.available().0);
}

#[test]
fn auto_choice_follows_what_this_host_offers() {
    let rdma_or_tcp = if Transport::Rdma.available().0 { Transport::Rdma } else { Transport::Tcp };
    let same = if Transport::Shm.available().0 { Transport::Shm } else { rdma_or_tcp };
    assert_eq!(Transport::auto_choice(true), same);
    assert_eq!(Transport::auto_choice(false), rdma_or_tcp);
}

#[test]
fn schedule_and_layout() {
    let id = Identity { n_layer: 4, n_embd: 256, ..Identity::default() };
    let slots: Vec<_> = [1, 2, 8, 9, 0].iter().map(|&s| id.schedule_slot(s)).collect();
    assert_eq!(slots, vec![Some(0), Some(1), Some(7), Some(0), None]);
    let l = id.slab_layout().unwrap();
    assert_eq!((l.slots, l.vec_bytes, l.batch_rows), (8, 1024, BATCH_MAX_ROWS));
    let err = Identity::default().slab_layout().unwrap_err();
    assert_eq!(err.status(), Some(Status::EINVAL));
}

#[test]
fn bad_options_are_errors_with_the_library_message() {
    let id = Identity { n_layer: 1, n_embd: 4, ..Identity::default() };
    let err = Pair::new(&Options::default(), &id).unwrap_err();
    assert_eq!(err.status(), Some(Status::EINVAL));
    assert!(err.message().contains("role"), "{}", err);
    assert!(err.to_string().starts_with("DS4TP_EINVAL: "));
    let bad_host = Options { listen_host: "a\0b".into(), ..Options::leader(0) };
    assert_eq!(Pair::new(&bad_host, &id).unwrap_err().status(), Some(Status::EINVAL));
}

#[test]
fn leader_handle_queries() {
    let id = Identity { n_layer: 2, n_embd: 64, ..Identity::default() };
    let logged = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = logged.clone();
    let opt = Options { log_level: LogLevel::Debug, ..Options::leader(0) }
        .with_log(move |level, msg| sink.lock().unwrap().push((level, msg.to_string())));
    let mut tp = Pair::new(&opt, &id).unwrap();
    assert!(tp.listen_port() > 0);
    assert_eq!((tp.rank(), tp.transport(), tp.failed()), (0, Transport::Auto, false));
    let l = tp.layout();
    assert_eq!(tp.slab_bytes(), l.total_bytes);
    assert_eq!(tp.out_offset(1, GATE_FFN), Some(l.out_offset + 3 * l.slot_stride));
    assert_eq!(tp.out_offset(2, 0), None);
    assert_eq!(tp.out_vector(0, 0).unwrap_err().status(), Some(Status::ESTATE));
    assert_eq!(tp.gate_exchange(0, 0, 1).unwrap_err().status(), Some(Status::ESTATE));
    tp.mark_failed("engine lost its GPU");
    assert!(tp.failed());
    let err = tp.connect().unwrap_err();
    assert_eq!(err.status(), Some(Status::EFAILED));
    assert!(err.message().contains("engine lost its GPU"), "{}", err);
    drop(tp);
    assert!(logged.lock().unwrap().iter().any(|(_, m)| m.contains("listen")));
}

fn send_sync_clone<T: Send + Sync + Clone>(_: &T) {}

#[test]
fn monitor_watches_and_fails_the_pair_from_another_thread() {
    let id = Identity { n_layer: 2, n_embd: 64, ..Identity::default() };
    let tp = Pair::new(&Options { log_level: LogLevel::Error, ..Options::leader(0) }, &id).unwrap();
    let mon = tp.monitor();
    send_sync_clone(&mon);
    assert!(!mon.failed());
    let other = mon.clone();
    std::thread::spawn(move || other.mark_failed("GPU fell off the bus")).join().unwrap();
    assert!(tp.failed() && mon.failed());
    let mut tp = tp;
    let err = tp.connect().unwrap_err();
    assert_eq!(err.status(), Some(Status::EFAILED));
    assert!(mon.errmsg().contains("GPU fell off the bus"), "{}", mon.errmsg());
    // The monitor outlives the pair: it stays valid and reads failed.
    let id2 = Identity { n_layer: 2, n_embd: 64, ..Identity::default() };
    let tp2 = Pair::new(&Options { log_level: LogLevel::Error, ..Options::leader(0) }, &id2).unwrap();
    let late = tp2.monitor();
    drop(tp2);
    assert!(late.failed());
    assert!(format!("{:?}", late).contains("failed: true"));
}

#[test]
fn the_loaded_library_has_this_crates_major_version() {
    check_version().unwrap();
    assert_eq!(version() >> 16, sys::DS4TP_VERSION_MAJOR);
}
