//! The #[repr(C)] mirrors in ds4tp::sys against the C compiler's layout
//! (ds4tp_peer layout: "struct field offset size" lines).
mod common;

use ds4tp::sys;
use std::collections::BTreeMap;
use std::mem::{size_of, MaybeUninit};
use std::process::Command;
use std::ptr::addr_of;

type Fields = BTreeMap<String, (usize, usize)>;

fn c_layout() -> BTreeMap<String, Fields> {
    let out = Command::new(common::peer_exe()).arg("layout").output().expect("run ds4tp_peer layout");
    assert!(out.status.success());
    let mut all: BTreeMap<String, Fields> = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        all.entry(f[0].to_string()).or_default().insert(f[1].to_string(), (f[2].parse().unwrap(), f[3].parse().unwrap()));
    }
    all
}

fn size_of_pointee<T>(_: *const T) -> usize {
    size_of::<T>()
}

// Offset and size of each named field, computed without offset_of! (1.63).
macro_rules! rust_fields {
    ($t:ty, $($f:ident),* $(,)?) => {{
        let u = MaybeUninit::<$t>::uninit();
        let base = u.as_ptr() as usize;
        let mut m = Fields::new();
        m.insert("sizeof".to_string(), (size_of::<$t>(), 0));
        $(
            let p = unsafe { addr_of!((*u.as_ptr()).$f) };
            m.insert(stringify!($f).to_string(), (p as usize - base, size_of_pointee(p)));
        )*
        m
    }};
}

#[test]
fn structs_match_the_c_compiler() {
    // Every struct ds4tp_peer prints has a Rust mirror checked here.
    let c = c_layout();
    let rust: Vec<(&str, Fields)> = vec![
        ("ds4tp_options", rust_fields!(sys::ds4tp_options, size, role, transport, listen_host, listen_port,
            leader_host, leader_port, connect_timeout_ms, hello_timeout_ms, gate_timeout_ms,
            big_gate_timeout_ms, frame_timeout_ms, spin_us, log_fn, log_user_data, log_level,
            max_frame_bytes, rdma_device, rdma_port, rdma_gid_index, psk, psk_bytes, psk_file,
            peer_silence_ms, peer_arrival_timeout_ms, failover, rails, rdma_rails)),
        ("ds4tp_identity", rust_fields!(sys::ds4tp_identity, size, model_bytes, model_id, n_layer, n_embd,
            n_vocab, quant_bits, ctx_size, gate_slot_start, gate_slot_step, gates_per_token,
            gate_slot_mask, features, engine_blob, engine_blob_bytes)),
        ("ds4tp_slab_layout", rust_fields!(sys::ds4tp_slab_layout, size, slots, batch_gates, batch_rows,
            total_bytes, vec_bytes, vec_stride, flag_stride, out_offset, in_offset, in_seq_offset,
            token_offset, gpu_flags_offset, batch_out_offset, batch_in_offset, batch_gate_stride,
            big_out_offset, big_in_offset, big_staging_bytes, gpu_release_offset, slot_stride)),
        ("ds4tp_staging_hooks", rust_fields!(sys::ds4tp_staging_hooks, size, user_data, before_exchange,
            after_exchange)),
        ("ds4tp_gate_service_options", rust_fields!(sys::ds4tp_gate_service_options, size, spin_us,
            yield_us, sleep_us, stop_timeout_ms, cpu)),
        ("ds4tp_group_options", rust_fields!(sys::ds4tp_group_options, size, rank, group_size,
            rendezvous_host, rendezvous_port, transport, connect_timeout_ms, op_timeout_ms, chunk_bytes,
            psk, psk_bytes, spin_us, peer_silence_ms, yield_us, peer_arrival_timeout_ms, job_id)),
        ("ds4tp_batch_item", rust_fields!(sys::ds4tp_batch_item, session_id, token, flags)),
        ("ds4tp_image_span", rust_fields!(sys::ds4tp_image_span, token_start, token_count, data_width, width,
            height, content_width, content_height, fingerprint, embd)),
        ("ds4tp_command", rust_fields!(sys::ds4tp_command, size, kind, session_id, seq, hash, token, pos,
            limit, count, mode, flags, ctx_size, logits_floats, tokens, n_tokens, items, n_items, images,
            n_images)),
        ("ds4tp_reply", rust_fields!(sys::ds4tp_reply, logits, logits_rows, logits_floats, position, hash,
            message)),
        ("ds4tp_worker_ops", rust_fields!(sys::ds4tp_worker_ops, size, session_create, session_destroy, sync,
            sync_images, eval, mtp, rewind, invalidate, spec_restore, eval_batch, mixed_batch, verify,
            verify_commit, draft, hash)),
    ];
    let names: Vec<&str> = rust.iter().map(|(n, _)| *n).collect();
    for c_struct in c.keys() {
        assert!(names.contains(&c_struct.as_str()), "{} has no Rust mirror in this test", c_struct);
    }
    for (name, fields) in rust {
        let want = c.get(name).unwrap_or_else(|| panic!("ds4tp_peer does not print {}", name));
        assert_eq!(&fields, want, "{} differs from C", name);
    }
}
