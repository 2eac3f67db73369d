//! Raw declarations of include/ds4tp/ds4tp.h, one block per header section.
//! Structs are `#[repr(C)]` field for field; the crate's tests compare
//! their sizes and offsets with the C compiler's (ds4tp_peer layout).
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_uint, c_void};

// ---- versions ---------------------------------------------------------

pub const DS4TP_VERSION_MAJOR: u32 = 0;
pub const DS4TP_VERSION_MINOR: u32 = 1;
pub const DS4TP_VERSION_PATCH: u32 = 0;
pub const DS4TP_VERSION_HEX: u32 =
    (DS4TP_VERSION_MAJOR << 16) | (DS4TP_VERSION_MINOR << 8) | DS4TP_VERSION_PATCH;
pub const DS4TP_PROTOCOL_VERSION: u32 = 2;

extern "C" {
    pub fn ds4tp_version() -> c_uint;
    pub fn ds4tp_version_string() -> *const c_char;
    pub fn ds4tp_protocol_version() -> c_uint;
}

// ---- status codes (values pinned by the header; see crate::Status) ----

extern "C" {
    pub fn ds4tp_strerror(status: c_int) -> *const c_char;
    pub fn ds4tp_err_name(status: c_int) -> *const c_char;
    pub fn ds4tp_last_error() -> *const c_char;
}

// ---- constants ----------------------------------------------------------

pub const DS4TP_GATE_ATTN: u32 = 0;
pub const DS4TP_GATE_FFN: u32 = 1;
pub const DS4TP_GATES_PER_LAYER: u32 = 2;
pub const DS4TP_BATCH_MAX_ROWS: u32 = 8;
pub const DS4TP_BATCH_GATES_PER_LAYER: u32 = 2;
pub const DS4TP_GATE_MASK_WORDS: usize = 4;
pub const DS4TP_ENGINE_BLOB_MAX: u32 = 4096;

pub const DS4TP_ROLE_NONE: c_int = 0;
pub const DS4TP_ROLE_LEADER: c_int = 1;
pub const DS4TP_ROLE_WORKER: c_int = 2;

pub const DS4TP_TRANSPORT_AUTO: c_int = 0;
pub const DS4TP_TRANSPORT_TCP: c_int = 1;
pub const DS4TP_TRANSPORT_SHM: c_int = 2;
pub const DS4TP_TRANSPORT_RDMA: c_int = 3;

pub const DS4TP_LOG_ERROR: c_int = 0;
pub const DS4TP_LOG_WARN: c_int = 1;
pub const DS4TP_LOG_INFO: c_int = 2;
pub const DS4TP_LOG_DEBUG: c_int = 3;

pub type ds4tp_log_fn = Option<unsafe extern "C" fn(user_data: *mut c_void, level: c_int, msg: *const c_char)>;

extern "C" {
    pub fn ds4tp_transport_name(transport: c_int) -> *const c_char;
    pub fn ds4tp_transport_available(transport: c_int, why: *mut c_char, why_len: usize) -> c_int;
}

// ---- options ------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds4tp_options {
    pub size: u32,
    pub role: i32,
    pub transport: i32,
    pub listen_host: *const c_char,
    pub listen_port: i32,
    pub leader_host: *const c_char,
    pub leader_port: i32,
    pub connect_timeout_ms: i32,
    pub hello_timeout_ms: i32,
    pub gate_timeout_ms: i32,
    pub big_gate_timeout_ms: i32,
    pub frame_timeout_ms: i32,
    pub spin_us: i32,
    pub log_fn: ds4tp_log_fn,
    pub log_user_data: *mut c_void,
    pub log_level: i32,
    pub max_frame_bytes: u32,
    pub rdma_device: *const c_char,
    pub rdma_port: i32,
    pub rdma_gid_index: i32,
    pub psk: *const c_void,
    pub psk_bytes: u32,
    pub psk_file: *const c_char,
    pub peer_silence_ms: i32,
    pub peer_arrival_timeout_ms: i32,
}

extern "C" {
    pub fn ds4tp_options_init(opt: *mut ds4tp_options);
}

// ---- engine identity ----------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds4tp_identity {
    pub size: u32,
    pub model_bytes: u64,
    pub model_id: u32,
    pub n_layer: u32,
    pub n_embd: u32,
    pub n_vocab: u32,
    pub quant_bits: u32,
    pub ctx_size: u32,
    pub gate_slot_start: u32,
    pub gate_slot_step: u32,
    pub gates_per_token: u32,
    pub gate_slot_mask: [u64; DS4TP_GATE_MASK_WORDS],
    pub features: u64,
    pub engine_blob: *const c_void,
    pub engine_blob_bytes: u32,
}

extern "C" {
    pub fn ds4tp_identity_init(id: *mut ds4tp_identity);
    pub fn ds4tp_schedule_slot(id: *const ds4tp_identity, seq: u64) -> i64;
}

// ---- slab layout --------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ds4tp_slab_layout {
    pub size: u32,
    pub slots: u32,
    pub batch_gates: u32,
    pub batch_rows: u32,
    pub total_bytes: u64,
    pub vec_bytes: u64,
    pub vec_stride: u64,
    pub flag_stride: u64,
    pub out_offset: u64,
    pub in_offset: u64,
    pub in_seq_offset: u64,
    pub token_offset: u64,
    pub gpu_flags_offset: u64,
    pub batch_out_offset: u64,
    pub batch_in_offset: u64,
    pub batch_gate_stride: u64,
    pub big_out_offset: u64,
    pub big_in_offset: u64,
    pub big_staging_bytes: u64,
    pub gpu_release_offset: u64,
}

extern "C" {
    pub fn ds4tp_slab_layout_compute(id: *const ds4tp_identity, out: *mut ds4tp_slab_layout) -> c_int;
}

// ---- the pair handle ----------------------------------------------------

/// Opaque ds4tp_pair.
#[repr(C)]
pub struct ds4tp_pair {
    _private: [u8; 0],
}

extern "C" {
    pub fn ds4tp_new(out: *mut *mut ds4tp_pair, opt: *const ds4tp_options, id: *const ds4tp_identity) -> c_int;
    pub fn ds4tp_connect(pair: *mut ds4tp_pair) -> c_int;
    pub fn ds4tp_free(pair: *mut ds4tp_pair);
    pub fn ds4tp_listen_port(pair: *const ds4tp_pair) -> c_int;
    pub fn ds4tp_rank(pair: *const ds4tp_pair) -> c_int;
    pub fn ds4tp_transport_active(pair: *const ds4tp_pair) -> c_int;
    pub fn ds4tp_peer_ctx_size(pair: *const ds4tp_pair) -> u32;
    pub fn ds4tp_failed(pair: *const ds4tp_pair) -> c_int;
    pub fn ds4tp_mark_failed(pair: *mut ds4tp_pair, reason: *const c_char);
    pub fn ds4tp_errmsg(pair: *const ds4tp_pair) -> *const c_char;
}

// ---- slab ---------------------------------------------------------------

extern "C" {
    pub fn ds4tp_slab_layout_get(pair: *const ds4tp_pair, out: *mut ds4tp_slab_layout) -> c_int;
    pub fn ds4tp_slab_bytes(pair: *const ds4tp_pair) -> u64;
    pub fn ds4tp_slab_out_offset(pair: *const ds4tp_pair, layer: u32, gate: u32) -> u64;
    pub fn ds4tp_slab_in_offset(pair: *const ds4tp_pair, layer: u32, gate: u32) -> u64;
    pub fn ds4tp_slab_batch_out_offset(pair: *const ds4tp_pair, index: u32) -> u64;
    pub fn ds4tp_slab_batch_in_offset(pair: *const ds4tp_pair, index: u32) -> u64;
    pub fn ds4tp_slab_gpu_flags_offset(pair: *const ds4tp_pair) -> u64;
    pub fn ds4tp_attach_slab(pair: *mut ds4tp_pair, base: *mut c_void, bytes: u64) -> c_int;
    pub fn ds4tp_slab_base(pair: *const ds4tp_pair) -> *mut c_void;
    pub fn ds4tp_detach_slab(pair: *mut ds4tp_pair);
}

// ---- data plane ---------------------------------------------------------

extern "C" {
    pub fn ds4tp_gate_exchange(pair: *mut ds4tp_pair, layer: u32, gate: u32, seq: u64) -> c_int;
    pub fn ds4tp_batch_gate_exchange(pair: *mut ds4tp_pair, index: u32, rows: u32, seq: u64) -> c_int;
    pub fn ds4tp_big_gate_exchange(
        pair: *mut ds4tp_pair,
        layer: u32,
        seq: u64,
        out: *const c_void,
        into: *mut c_void,
        bytes: u64,
    ) -> c_int;
}

// ---- engine integration: callbacks, staging hooks, gate service -------

pub type ds4tp_gate_fn = Option<unsafe extern "C" fn(user_data: *mut c_void, layer: u32, gate: u32, seq: u64) -> c_int>;
pub type ds4tp_batch_gate_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, index: u32, rows: u32, seq: u64) -> c_int>;
pub type ds4tp_big_gate_fn = Option<
    unsafe extern "C" fn(user_data: *mut c_void, layer: u32, seq: u64, out: *const c_void, into: *mut c_void, bytes: u64) -> c_int,
>;

pub const DS4TP_STAGE_ROW: c_int = 1;
pub const DS4TP_STAGE_BATCH: c_int = 2;

pub type ds4tp_stage_before_fn = Option<
    unsafe extern "C" fn(user_data: *mut c_void, kind: c_int, a: u32, b: u32, seq: u64, slab_out: *mut c_void, bytes: u64) -> c_int,
>;
pub type ds4tp_stage_after_fn = Option<
    unsafe extern "C" fn(user_data: *mut c_void, kind: c_int, a: u32, b: u32, seq: u64, slab_in: *const c_void, bytes: u64) -> c_int,
>;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds4tp_staging_hooks {
    pub size: u32,
    pub user_data: *mut c_void,
    pub before_exchange: ds4tp_stage_before_fn,
    pub after_exchange: ds4tp_stage_after_fn,
}

pub const DS4TP_GATE_POISON: u64 = u64::MAX;

pub const DS4TP_SERVICE_STOPPED: c_int = 0;
pub const DS4TP_SERVICE_RUNNING: c_int = 1;
pub const DS4TP_SERVICE_FAILED: c_int = 2;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds4tp_gate_service_options {
    pub size: u32,
    pub spin_us: i32,
    pub yield_us: i32,
    pub sleep_us: i32,
    pub stop_timeout_ms: i32,
    pub cpu: i32,
}

extern "C" {
    pub fn ds4tp_gate_callback(pair: *mut c_void, layer: u32, gate: u32, seq: u64) -> c_int;
    pub fn ds4tp_batch_gate_callback(pair: *mut c_void, index: u32, rows: u32, seq: u64) -> c_int;
    pub fn ds4tp_big_gate_callback(
        pair: *mut c_void,
        layer: u32,
        seq: u64,
        out: *const c_void,
        into: *mut c_void,
        bytes: u64,
    ) -> c_int;
    pub fn ds4tp_set_staging_hooks(pair: *mut ds4tp_pair, hooks: *const ds4tp_staging_hooks) -> c_int;
    pub fn ds4tp_gate_service_options_init(opt: *mut ds4tp_gate_service_options);
    pub fn ds4tp_gate_service_start(pair: *mut ds4tp_pair, opt: *const ds4tp_gate_service_options) -> c_int;
    pub fn ds4tp_gate_service_stop(pair: *mut ds4tp_pair) -> c_int;
    pub fn ds4tp_gate_service_state(pair: *const ds4tp_pair) -> c_int;
    pub fn ds4tp_gate_seq(pair: *const ds4tp_pair) -> u64;
}

// ---- control plane: lockstep mirroring ----------------------------------

pub const DS4TP_WAIT_FOREVER: i32 = -1;
pub const DS4TP_SMALL_EXCHANGE_MAX: u32 = 192;
pub const DS4TP_HEAD_ROW_MAX: u32 = 131072;
pub const DS4TP_DRAFTER_META_BYTES: usize = 64;
pub const DS4TP_IMAGE_FINGERPRINT_BYTES: usize = 32;
pub const DS4TP_MTP_LIMIT_MAX: u32 = 7;
pub const DS4TP_REPLY_MESSAGE_MAX: usize = 256;

pub const DS4TP_CMD_SYNC: c_int = 1;
pub const DS4TP_CMD_EVAL: c_int = 2;
pub const DS4TP_CMD_REWIND: c_int = 3;
pub const DS4TP_CMD_INVALIDATE: c_int = 4;
pub const DS4TP_CMD_STOP: c_int = 5;
pub const DS4TP_CMD_HASH: c_int = 6;
pub const DS4TP_CMD_VERIFY: c_int = 11;
pub const DS4TP_CMD_VERIFY_COMMIT: c_int = 12;
pub const DS4TP_CMD_SESSION_CREATE: c_int = 13;
pub const DS4TP_CMD_SESSION_DESTROY: c_int = 14;
pub const DS4TP_CMD_EVAL_BATCH: c_int = 15;
pub const DS4TP_CMD_MIXED_BATCH: c_int = 16;
pub const DS4TP_CMD_SYNC_IMAGES: c_int = 18;
pub const DS4TP_CMD_MTP: c_int = 21;
pub const DS4TP_CMD_DRAFT: c_int = 23;
pub const DS4TP_CMD_SPEC_RESTORE: c_int = 24;

pub const DS4TP_ACK_DONE: i32 = 0;
pub const DS4TP_ACK_UNAVAILABLE: i32 = 1;
pub const DS4TP_ACK_CANCELLED: i32 = 2;

pub const DS4TP_VERIFY_HEAD_SPLIT: u32 = 1;
pub const DS4TP_VERIFY_DRAFT_SHARED: u32 = 2;
pub const DS4TP_VERIFY_DRAFT_SEED: u32 = 4;

pub const DS4TP_COMMIT_ROLLBACK: i32 = 0;
pub const DS4TP_COMMIT_FULL: i32 = 1;
pub const DS4TP_COMMIT_PREFIX: i32 = 2;

pub const DS4TP_DRAFT_MAINTAIN: u32 = 1;
pub const DS4TP_DRAFT_PROPOSE: u32 = 2;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ds4tp_batch_item {
    pub session_id: u64,
    pub token: i32,
    pub flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds4tp_image_span {
    pub token_start: u32,
    pub token_count: u32,
    pub data_width: u32,
    pub width: u32,
    pub height: u32,
    pub content_width: u32,
    pub content_height: u32,
    pub fingerprint: [u8; DS4TP_IMAGE_FINGERPRINT_BYTES],
    pub embd: *const f32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds4tp_command {
    pub size: u32,
    pub kind: i32,
    pub session_id: u64,
    pub seq: u64,
    pub hash: u64,
    pub token: i32,
    pub pos: i32,
    pub limit: i32,
    pub count: i32,
    pub mode: u32,
    pub flags: u32,
    pub ctx_size: u32,
    pub logits_floats: u32,
    pub tokens: *mut i32,
    pub n_tokens: u32,
    pub items: *mut ds4tp_batch_item,
    pub n_items: u32,
    pub images: *mut ds4tp_image_span,
    pub n_images: u32,
}

#[repr(C)]
pub struct ds4tp_reply {
    pub logits: *mut f32,
    pub logits_rows: u32,
    pub logits_floats: u32,
    pub position: u32,
    pub hash: u64,
    pub message: [c_char; DS4TP_REPLY_MESSAGE_MAX],
}

pub type ds4tp_command_fn = Option<
    unsafe extern "C" fn(user_data: *mut c_void, pair: *mut ds4tp_pair, cmd: *const ds4tp_command, reply: *mut ds4tp_reply) -> c_int,
>;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ds4tp_worker_ops {
    pub size: u32,
    pub session_create: ds4tp_command_fn,
    pub session_destroy: ds4tp_command_fn,
    pub sync: ds4tp_command_fn,
    pub sync_images: ds4tp_command_fn,
    pub eval: ds4tp_command_fn,
    pub mtp: ds4tp_command_fn,
    pub rewind: ds4tp_command_fn,
    pub invalidate: ds4tp_command_fn,
    pub spec_restore: ds4tp_command_fn,
    pub eval_batch: ds4tp_command_fn,
    pub mixed_batch: ds4tp_command_fn,
    pub verify: ds4tp_command_fn,
    pub verify_commit: ds4tp_command_fn,
    pub draft: ds4tp_command_fn,
    pub hash: ds4tp_command_fn,
}

extern "C" {
    pub fn ds4tp_command_name(kind: c_int) -> *const c_char;

    // leader: commands
    pub fn ds4tp_send_session_create(pair: *mut ds4tp_pair, session_id: u64, ctx_size: u32) -> c_int;
    pub fn ds4tp_send_session_destroy(pair: *mut ds4tp_pair, session_id: u64) -> c_int;
    pub fn ds4tp_send_sync(pair: *mut ds4tp_pair, session_id: u64, tokens: *const i32, n_tokens: u32, logits_floats: u32) -> c_int;
    pub fn ds4tp_send_sync_images(
        pair: *mut ds4tp_pair,
        session_id: u64,
        tokens: *const i32,
        n_tokens: u32,
        images: *const ds4tp_image_span,
        n_images: u32,
        logits_floats: u32,
    ) -> c_int;
    pub fn ds4tp_send_eval(pair: *mut ds4tp_pair, session_id: u64, seq: u64, token: i32, logits_floats: u32) -> c_int;
    pub fn ds4tp_send_mtp(pair: *mut ds4tp_pair, session_id: u64, seq: u64, token: i32, limit: u32) -> c_int;
    pub fn ds4tp_send_rewind(pair: *mut ds4tp_pair, session_id: u64, pos: i32) -> c_int;
    pub fn ds4tp_send_invalidate(pair: *mut ds4tp_pair, session_id: u64) -> c_int;
    pub fn ds4tp_send_spec_restore(pair: *mut ds4tp_pair, session_id: u64, pos: i32) -> c_int;
    pub fn ds4tp_send_eval_batch(pair: *mut ds4tp_pair, items: *const ds4tp_batch_item, count: u32, logits_floats: u32) -> c_int;
    pub fn ds4tp_send_mixed_batch(
        pair: *mut ds4tp_pair,
        prefill_session_id: u64,
        prompt: *const i32,
        prompt_count: u32,
        items: *const ds4tp_batch_item,
        count: u32,
        logits_floats: u32,
    ) -> c_int;
    pub fn ds4tp_send_verify(pair: *mut ds4tp_pair, session_id: u64, drafts: *const i32, n: u32, flags: u32) -> c_int;
    pub fn ds4tp_send_verify_commit(pair: *mut ds4tp_pair, mode: i32, count: i32, logits_floats: u32) -> c_int;
    pub fn ds4tp_send_draft(pair: *mut ds4tp_pair, session_id: u64, token: i32, pos: i32, mode: u32) -> c_int;
    pub fn ds4tp_send_stop(pair: *mut ds4tp_pair) -> c_int;

    // leader: replies
    pub fn ds4tp_wait_ack(pair: *mut ds4tp_pair, session_id: u64, status: *mut i32) -> c_int;
    pub fn ds4tp_wait_sync(pair: *mut ds4tp_pair, session_id: u64, status: *mut i32, position: *mut u32) -> c_int;
    pub fn ds4tp_recv_logits(pair: *mut ds4tp_pair, half: *mut f32, count: u32) -> c_int;
    pub fn ds4tp_remote_status(pair: *const ds4tp_pair) -> i32;

    // both ranks
    pub fn ds4tp_hash_check(pair: *mut ds4tp_pair, session_id: u64, seq: u64, hash: u64) -> c_int;
    pub fn ds4tp_sync_checkpoint(pair: *mut ds4tp_pair, point: u32, current: i32, total: i32, requested: c_int, cancelled: *mut c_int) -> c_int;
    pub fn ds4tp_agree_execution_mode(pair: *mut ds4tp_pair, flags: u32, caps: *mut u32) -> c_int;
    pub fn ds4tp_agree_drafter_split(pair: *mut ds4tp_pair, mine_on: c_int, meta: *const c_void, agreed: *mut c_int, peer_on: *mut c_int) -> c_int;
    pub fn ds4tp_block_begin(pair: *mut ds4tp_pair, rows: u32, n_layers: u32, gates_per_layer: *mut u32) -> c_int;
    pub fn ds4tp_block_end(pair: *mut ds4tp_pair) -> c_int;
    pub fn ds4tp_small_exchange(pair: *mut ds4tp_pair, mine: *const c_void, peer: *mut c_void, bytes: u32) -> c_int;
    pub fn ds4tp_head_row_send(pair: *mut ds4tp_pair, row: u32, src: *const f32, floats: u32) -> c_int;
    pub fn ds4tp_head_row_recv(pair: *mut ds4tp_pair, row: u32, dst: *mut f32, floats: u32) -> c_int;

    // worker
    pub fn ds4tp_command_init(cmd: *mut ds4tp_command);
    pub fn ds4tp_command_free(cmd: *mut ds4tp_command);
    pub fn ds4tp_recv_command(pair: *mut ds4tp_pair, cmd: *mut ds4tp_command, timeout_ms: i32) -> c_int;
    pub fn ds4tp_send_ack(pair: *mut ds4tp_pair, status: i32) -> c_int;
    pub fn ds4tp_send_sync_ack(pair: *mut ds4tp_pair, status: i32, position: u32) -> c_int;
    pub fn ds4tp_send_logits(pair: *mut ds4tp_pair, half: *const f32, count: u32) -> c_int;
    pub fn ds4tp_send_error(pair: *mut ds4tp_pair, status: i32, message: *const c_char) -> c_int;
    pub fn ds4tp_worker_ops_init(ops: *mut ds4tp_worker_ops);
    pub fn ds4tp_worker_run(pair: *mut ds4tp_pair, ops: *const ds4tp_worker_ops, user_data: *mut c_void) -> c_int;
}
