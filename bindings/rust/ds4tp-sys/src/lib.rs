//! Raw declarations of libds4tp's C ABI (include/ds4tp/ds4tp.h), one block
//! per header section, and the link to the library (see build.rs: pkg-config
//! or `DS4TP_LIB_DIR`, the `static` feature or `DS4TP_STATIC`). Structs are
//! `#[repr(C)]` field for field; the `ds4tp` crate's tests compare their
//! sizes and offsets with the C compiler's. Every item mirrors the header's
//! declaration of the same name; the safe API is the `ds4tp` crate.
#![allow(non_camel_case_types)]
#![deny(missing_docs)]

mod control;
mod group;
pub use control::*;
pub use group::*;

use std::os::raw::{c_char, c_int, c_uint, c_void};

// ---- versions ---------------------------------------------------------

/// `DS4TP_VERSION_MAJOR` (include/ds4tp/ds4tp.h).
pub const DS4TP_VERSION_MAJOR: u32 = 0;
/// `DS4TP_VERSION_MINOR` (include/ds4tp/ds4tp.h).
pub const DS4TP_VERSION_MINOR: u32 = 1;
/// `DS4TP_VERSION_PATCH` (include/ds4tp/ds4tp.h).
pub const DS4TP_VERSION_PATCH: u32 = 0;
/// `DS4TP_VERSION_HEX` (include/ds4tp/ds4tp.h).
pub const DS4TP_VERSION_HEX: u32 =
    (DS4TP_VERSION_MAJOR << 16) | (DS4TP_VERSION_MINOR << 8) | DS4TP_VERSION_PATCH;
/// Wire protocol version carried in the hello; both ranks must agree.
pub const DS4TP_PROTOCOL_VERSION: u32 = 3;

extern "C" {
    /// Returns DS4TP_VERSION_HEX of the linked library.
    pub fn ds4tp_version() -> c_uint;
    /// Returns "MAJOR.MINOR.PATCH" of the linked library (static storage).
    pub fn ds4tp_version_string() -> *const c_char;
    /// Returns the wire protocol version the linked library speaks.
    pub fn ds4tp_protocol_version() -> c_uint;
}

// ---- status codes (values pinned by the header; see crate::Status) ----

extern "C" {
    /// Short description of a status code; never NULL.
    pub fn ds4tp_strerror(status: c_int) -> *const c_char;
    /// Symbolic name of a status code ("DS4TP_ETIMEDOUT"); never NULL.
    pub fn ds4tp_err_name(status: c_int) -> *const c_char;
    /// Message of the last failed call made by this thread, "" if none. Valid until this thread's
    /// next ds4tp call.
    pub fn ds4tp_last_error() -> *const c_char;
}

// ---- constants ----------------------------------------------------------

/// `DS4TP_GATE_ATTN` (include/ds4tp/ds4tp.h).
pub const DS4TP_GATE_ATTN: u32 = 0;
/// `DS4TP_GATE_FFN` (include/ds4tp/ds4tp.h).
pub const DS4TP_GATE_FFN: u32 = 1;
/// `DS4TP_GATES_PER_LAYER` (include/ds4tp/ds4tp.h).
pub const DS4TP_GATES_PER_LAYER: u32 = 2;
/// Rows of a verify-block batch gate (seed row plus drafts).
pub const DS4TP_BATCH_MAX_ROWS: u32 = 8;
/// Batch gate indices per layer; batch index = layer * 2 + gate.
pub const DS4TP_BATCH_GATES_PER_LAYER: u32 = 2;
/// 64-bit words of the gate slot mask: up to 256 slots (128 layers).
pub const DS4TP_GATE_MASK_WORDS: usize = 4;
/// Largest opaque engine blob carried in the hello.
pub const DS4TP_ENGINE_BLOB_MAX: u32 = 4096;

/// `DS4TP_ROLE_NONE` (include/ds4tp/ds4tp.h).
pub const DS4TP_ROLE_NONE: c_int = 0;
/// rank 0: listens, drives the lockstep
pub const DS4TP_ROLE_LEADER: c_int = 1;
/// rank 1: dials the leader, mirrors it
pub const DS4TP_ROLE_WORKER: c_int = 2;

// ---- status codes (ds4tp_status; ds4tp_strerror words them) ------------

/// `DS4TP_OK` (include/ds4tp/ds4tp.h).
pub const DS4TP_OK: c_int = 0;
/// `DS4TP_EINVAL` (include/ds4tp/ds4tp.h).
pub const DS4TP_EINVAL: c_int = -1;
/// `DS4TP_ETIMEDOUT` (include/ds4tp/ds4tp.h).
pub const DS4TP_ETIMEDOUT: c_int = -2;
/// `DS4TP_EPEERCLOSED` (include/ds4tp/ds4tp.h).
pub const DS4TP_EPEERCLOSED: c_int = -3;
/// `DS4TP_EIDENTITY` (include/ds4tp/ds4tp.h).
pub const DS4TP_EIDENTITY: c_int = -4;
/// `DS4TP_EDESYNC` (include/ds4tp/ds4tp.h).
pub const DS4TP_EDESYNC: c_int = -5;
/// `DS4TP_EPROTO` (include/ds4tp/ds4tp.h).
pub const DS4TP_EPROTO: c_int = -6;
/// `DS4TP_EAUTH` (include/ds4tp/ds4tp.h).
pub const DS4TP_EAUTH: c_int = -7;
/// `DS4TP_EIO` (include/ds4tp/ds4tp.h).
pub const DS4TP_EIO: c_int = -8;
/// `DS4TP_EUNSUPPORTED` (include/ds4tp/ds4tp.h).
pub const DS4TP_EUNSUPPORTED: c_int = -9;
/// `DS4TP_ECANCELLED` (include/ds4tp/ds4tp.h).
pub const DS4TP_ECANCELLED: c_int = -10;
/// `DS4TP_EFAILED` (include/ds4tp/ds4tp.h).
pub const DS4TP_EFAILED: c_int = -11;
/// `DS4TP_EVERSION` (include/ds4tp/ds4tp.h).
pub const DS4TP_EVERSION: c_int = -12;
/// `DS4TP_ESTATE` (include/ds4tp/ds4tp.h).
pub const DS4TP_ESTATE: c_int = -13;
/// `DS4TP_ENOMEM` (include/ds4tp/ds4tp.h).
pub const DS4TP_ENOMEM: c_int = -14;
/// `DS4TP_EDIVERGED` (include/ds4tp/ds4tp.h).
pub const DS4TP_EDIVERGED: c_int = -15;
/// `DS4TP_EREMOTE` (include/ds4tp/ds4tp.h).
pub const DS4TP_EREMOTE: c_int = -16;

/// `spin_us`: learn the spin per pair or group (the default).
pub const DS4TP_SPIN_ADAPTIVE: i32 = -1;
/// `spin_us`: spin without limit while the peer is alive (dedicated cores).
pub const DS4TP_SPIN_ALWAYS: i32 = -2;
/// `spin_us`: never spin or yield: every wait sleeps in the kernel at once.
pub const DS4TP_SPIN_NEVER: i32 = -3;
/// `peer_arrival_timeout_ms`: wait as long as the peer stays alive.
pub const DS4TP_ARRIVAL_UNLIMITED: i32 = -1;

/// best both ranks offer
pub const DS4TP_TRANSPORT_AUTO: c_int = 0;
/// `DS4TP_TRANSPORT_TCP` (include/ds4tp/ds4tp.h).
pub const DS4TP_TRANSPORT_TCP: c_int = 1;
/// `DS4TP_TRANSPORT_SHM` (include/ds4tp/ds4tp.h).
pub const DS4TP_TRANSPORT_SHM: c_int = 2;
/// `DS4TP_TRANSPORT_RDMA` (include/ds4tp/ds4tp.h).
pub const DS4TP_TRANSPORT_RDMA: c_int = 3;

/// `DS4TP_LOG_ERROR` (include/ds4tp/ds4tp.h).
pub const DS4TP_LOG_ERROR: c_int = 0;
/// `DS4TP_LOG_WARN` (include/ds4tp/ds4tp.h).
pub const DS4TP_LOG_WARN: c_int = 1;
/// bring-up progress
pub const DS4TP_LOG_INFO: c_int = 2;
/// `DS4TP_LOG_DEBUG` (include/ds4tp/ds4tp.h).
pub const DS4TP_LOG_DEBUG: c_int = 3;

/// Log sink. Called from the thread that made the ds4tp call, never from inside a gate exchange.
/// `msg` has no trailing newline.
pub type ds4tp_log_fn = Option<unsafe extern "C" fn(user_data: *mut c_void, level: c_int, msg: *const c_char)>;

extern "C" {
    /// Lower-case name of a transport value ("tcp"); "?" when unknown.
    pub fn ds4tp_transport_name(transport: c_int) -> *const c_char;
    /// Whether `transport` (TCP, SHM or RDMA) can run on this host: returns 1 or 0, and writes what
    /// was found or what is missing (e.g. "libibverbs found no RDMA devices") into `why` (NUL-
    /// terminated, truncated to `why_len`; may be NULL). No network I/O. Returns 0 for AUTO or an
    /// unknown value.
    pub fn ds4tp_transport_available(transport: c_int, why: *mut c_char, why_len: usize) -> c_int;
    /// The transport AUTO would negotiate with a peer that offers what this host offers (as
    /// ds4tp_transport_available finds it): with `same_host` nonzero for a peer on this host (shm
    /// first), zero for one on another host (rdma, else tcp). No network I/O. Returns a
    /// DS4TP_TRANSPORT_* value, AUTO when this host offers no transport.
    pub fn ds4tp_transport_auto(same_host: c_int) -> c_int;
}

// ---- options ------------------------------------------------------------

/// `ds4tp_options` (include/ds4tp/ds4tp.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds4tp_options {
    /// sizeof(ds4tp_options) as compiled by the caller
    pub size: u32,
    /// ds4tp_role; required
    pub role: i32,
    /// ds4tp_transport; default AUTO
    pub transport: i32,
    /// Leader: address to listen on (default "127.0.0.1"); port 0 picks a free port, readable with
    /// ds4tp_listen_port after ds4tp_new.
    pub listen_host: *const c_char,
    /// `listen_port` of `ds4tp_options`.
    pub listen_port: i32,
    /// Worker: leader address to dial (default "127.0.0.1").
    pub leader_host: *const c_char,
    /// `leader_port` of `ds4tp_options`.
    pub leader_port: i32,
    /// whole bring-up (default 60000)
    pub connect_timeout_ms: i32,
    /// one connection's hello (default 2000)
    pub hello_timeout_ms: i32,
    /// gate without progress (default 750)
    pub gate_timeout_ms: i32,
    /// waiting for the peer to reach a big gate; prefill skew (default 10000)
    pub big_gate_timeout_ms: i32,
    /// control replies (default 30000)
    pub frame_timeout_ms: i32,
    /// Wait policy: busy-poll this long before blocking in the kernel. 0 = always block; default
    /// DS4TP_SPIN_ADAPTIVE (-1): learned per pair, at most 1000.
    pub spin_us: i32,
    /// Logging: default sink writes INFO and above to stderr.
    pub log_fn: ds4tp_log_fn,
    /// `log_user_data` of `ds4tp_options`.
    pub log_user_data: *mut c_void,
    /// `log_level` of `ds4tp_options`.
    pub log_level: i32,
    /// Control plane: largest frame payload a peer may send; a larger header is a protocol error
    /// before anything is allocated. Default 64 MiB.
    pub max_frame_bytes: u32,
    /// RDMA verbs transport: device name (NULL = first with an active port), port number (default
    /// 1), GID index (-1 = pick, preferring RoCE v2).
    pub rdma_device: *const c_char,
    /// `rdma_port` of `ds4tp_options`.
    pub rdma_port: i32,
    /// `rdma_gid_index` of `ds4tp_options`.
    pub rdma_gid_index: i32,
    /// Authentication: a pre-shared key turns the hello into a mutual HMAC-SHA256 challenge-
    /// response (both ranks need the same key, at least 16 bytes). NULL/0 = the DS4TP_PSK (the
    /// key's bytes) or DS4TP_PSK_FILE (a key file) environment variable, else none. A key file
    /// loses one trailing newline; ds4tp_new fails with EINVAL when it is not a regular file of
    /// this user (or root) with mode 0600 or less.
    pub psk: *const c_void,
    /// `psk_bytes` of `ds4tp_options`.
    pub psk_bytes: u32,
    /// read at ds4tp_new; must not be group/world readable
    pub psk_file: *const c_char,
    /// A peer whose heartbeats stop this long (ms) fails every wait (default 1000).
    pub peer_silence_ms: i32,
    /// A live peer may reach a gate or answer this late (ms; -1 no limit; default 300000).
    pub peer_arrival_timeout_ms: i32,
    /// 1 (default): a standby tcp link beside rdma, shm or tcp rails, taken when they fail; 0: off.
    pub failover: i32,
    /// The leader's IPv4 addresses of more tcp links ("10.0.2.1,10.0.3.1") a tcp pair
    /// stripes its big gates over; NULL = none.
    pub rails: *const c_char,
    /// This rank's ports of more rdma links ("mlx5_1", "rdma_en6:1:3"; rail k of each
    /// rank joined by one cable) an rdma pair stripes its big gates over; NULL = none.
    pub rdma_rails: *const c_char,
}

extern "C" {
    /// Fills `opt` with defaults (role NONE: you must set it).
    pub fn ds4tp_options_init(opt: *mut ds4tp_options);
}

// ---- engine identity ----------------------------------------------------

/// `ds4tp_identity` (include/ds4tp/ds4tp.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds4tp_identity {
    /// sizeof(ds4tp_identity) as compiled by the caller
    pub size: u32,
    /// model file size or another content measure
    pub model_bytes: u64,
    /// engine's model variant
    pub model_id: u32,
    /// `n_layer` of `ds4tp_identity`.
    pub n_layer: u32,
    /// gate vectors are n_embd f32
    pub n_embd: u32,
    /// `n_vocab` of `ds4tp_identity`.
    pub n_vocab: u32,
    /// `quant_bits` of `ds4tp_identity`.
    pub quant_bits: u32,
    /// not compared; the peer's is ds4tp_peer_ctx_size
    pub ctx_size: u32,
    /// Decode gate schedule: the slot (layer*2 + gate) that row gate `seq` (1-based) must hit. A
    /// nonempty mask lists the slots in firing order; else with gates_per_token &gt; 0: slot(seq) =
    /// start + ((seq-1) % gates_per_token) * step; else every slot fires in order: slot(seq) =
    /// (seq-1) % (n_layer*2).
    pub gate_slot_start: u32,
    /// `gate_slot_step` of `ds4tp_identity`.
    pub gate_slot_step: u32,
    /// `gates_per_token` of `ds4tp_identity`.
    pub gates_per_token: u32,
    /// `gate_slot_mask` of `ds4tp_identity`.
    pub gate_slot_mask: [u64; DS4TP_GATE_MASK_WORDS],
    /// Engine feature bits both ranks must share (arithmetic, layouts).
    pub features: u64,
    /// Opaque engine bytes compared byte for byte (e.g. a model hash).
    pub engine_blob: *const c_void,
    /// `engine_blob_bytes` of `ds4tp_identity`.
    pub engine_blob_bytes: u32,
}

extern "C" {
    /// Zeroes `id` and sets `size`.
    pub fn ds4tp_identity_init(id: *mut ds4tp_identity);
    /// Slot that row gate `seq` must hit under `id`'s schedule, or -1 when seq is 0 or the identity
    /// is invalid. Pure.
    pub fn ds4tp_schedule_slot(id: *const ds4tp_identity, seq: u64) -> i64;
}

// ---- slab layout --------------------------------------------------------

/// `ds4tp_slab_layout` (include/ds4tp/ds4tp.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ds4tp_slab_layout {
    /// sizeof(ds4tp_slab_layout), set by caller
    pub size: u32,
    /// n_layer * 2 row-gate slots
    pub slots: u32,
    /// n_layer * DS4TP_BATCH_GATES_PER_LAYER
    pub batch_gates: u32,
    /// DS4TP_BATCH_MAX_ROWS
    pub batch_rows: u32,
    /// `total_bytes` of `ds4tp_slab_layout`.
    pub total_bytes: u64,
    /// n_embd * 4
    pub vec_bytes: u64,
    /// distance between consecutive batch rows
    pub vec_stride: u64,
    /// distance between consecutive flag words
    pub flag_stride: u64,
    /// slot 0's vector; this rank's partials
    pub out_offset: u64,
    /// slot 0's vector; the peer's partials
    pub in_offset: u64,
    /// slots u64: seq of the landed in vector
    pub in_seq_offset: u64,
    /// {u64 seq, i32 token}, 64 bytes
    pub token_offset: u64,
    /// slots u64: engine "gate reached" words
    pub gpu_flags_offset: u64,
    /// batch_gates * batch_rows vectors
    pub batch_out_offset: u64,
    /// `batch_in_offset` of `ds4tp_slab_layout`.
    pub batch_in_offset: u64,
    /// batch_rows * vec_stride
    pub batch_gate_stride: u64,
    /// staging for big gates
    pub big_out_offset: u64,
    /// `big_in_offset` of `ds4tp_slab_layout`.
    pub big_in_offset: u64,
    /// `big_staging_bytes` of `ds4tp_slab_layout`.
    pub big_staging_bytes: u64,
    /// slots u64: gate service "gate done" words
    pub gpu_release_offset: u64,
    /// distance between row-gate vectors: vec_stride + 64
    pub slot_stride: u64,
}

extern "C" {
    /// Computes the layout for `id`. `out-&gt;size` must be set by the caller. Returns DS4TP_EINVAL
    /// for an invalid identity. Pure.
    pub fn ds4tp_slab_layout_compute(id: *const ds4tp_identity, out: *mut ds4tp_slab_layout) -> c_int;
}

// ---- the pair handle ----------------------------------------------------

/// Opaque ds4tp_pair.
#[repr(C)]
pub struct ds4tp_pair {
    _private: [u8; 0],
}

extern "C" {
    /// Validates options and identity and creates a handle. A leader binds and listens here, so
    /// ds4tp_listen_port works before ds4tp_connect. On failure *out is NULL and ds4tp_last_error()
    /// says why.
    pub fn ds4tp_new(out: *mut *mut ds4tp_pair, opt: *const ds4tp_options, id: *const ds4tp_identity) -> c_int;
    /// Blocking bring-up. Leader: accepts connections until a worker completes a valid hello (stray
    /// or silent connections are dropped); worker: dials with retry. Both compare identities and
    /// negotiate the transport. Fails with ETIMEDOUT (connect deadline), EIDENTITY, EVERSION,
    /// EPROTO, EIO, EUNSUPPORTED (requested transport impossible), EAUTH (worker: the pre-shared
    /// keys differ or only one rank has one; a leader instead drops such a worker, logs it and
    /// keeps waiting).
    pub fn ds4tp_connect(pair: *mut ds4tp_pair) -> c_int;
    /// Releases everything. Accepts NULL.
    pub fn ds4tp_free(pair: *mut ds4tp_pair);
    /// Leader: the bound port (after ds4tp_new); worker: the dialed port.
    pub fn ds4tp_listen_port(pair: *const ds4tp_pair) -> c_int;
    /// 0 for the leader, 1 for the worker; -1 for NULL.
    pub fn ds4tp_rank(pair: *const ds4tp_pair) -> c_int;
    /// Negotiated ds4tp_transport after ds4tp_connect, AUTO before.
    pub fn ds4tp_transport_active(pair: *const ds4tp_pair) -> c_int;
    /// The peer's ctx_size from its hello (0 before connect).
    pub fn ds4tp_peer_ctx_size(pair: *const ds4tp_pair) -> u32;
    /// 1 once a data- or control-plane failure latched, else 0.
    pub fn ds4tp_failed(pair: *const ds4tp_pair) -> c_int;
    /// Latches failure from the engine side (e.g. a GPU error at a gate), so every later call
    /// returns DS4TP_EFAILED at once.
    pub fn ds4tp_mark_failed(pair: *mut ds4tp_pair, reason: *const c_char);
    /// Message of the handle's last failed call, "" if none. The returned pointer is valid until
    /// this thread's next ds4tp call.
    pub fn ds4tp_errmsg(pair: *const ds4tp_pair) -> *const c_char;
}

// ---- slab ---------------------------------------------------------------

extern "C" {
    /// This pair's layout (identity-derived). Valid after ds4tp_new.
    pub fn ds4tp_slab_layout_get(pair: *const ds4tp_pair, out: *mut ds4tp_slab_layout) -> c_int;
    /// Total slab bytes. 0 for NULL.
    pub fn ds4tp_slab_bytes(pair: *const ds4tp_pair) -> u64;
    /// Offsets of one vector; UINT64_MAX when out of range.
    pub fn ds4tp_slab_out_offset(pair: *const ds4tp_pair, layer: u32, gate: u32) -> u64;
    /// `ds4tp_slab_in_offset` (include/ds4tp/ds4tp.h).
    pub fn ds4tp_slab_in_offset(pair: *const ds4tp_pair, layer: u32, gate: u32) -> u64;
    /// Row 0 of batch gate `index` (&lt; n_layer * 2); rows follow at vec_stride.
    pub fn ds4tp_slab_batch_out_offset(pair: *const ds4tp_pair, index: u32) -> u64;
    /// `ds4tp_slab_batch_in_offset` (include/ds4tp/ds4tp.h).
    pub fn ds4tp_slab_batch_in_offset(pair: *const ds4tp_pair, index: u32) -> u64;
    /// `ds4tp_slab_gpu_flags_offset` (include/ds4tp/ds4tp.h).
    pub fn ds4tp_slab_gpu_flags_offset(pair: *const ds4tp_pair) -> u64;
    /// Hands the slab to the transport. `base` must be 64-byte aligned and `bytes` &gt;=
    /// ds4tp_slab_bytes. With base NULL the library allocates a page-aligned, zeroed slab itself
    /// (ds4tp_slab_base returns it); under the shm transport that slab is shared memory the peer
    /// writes into directly, while an engine-owned slab costs one extra copy per gate. Call after
    /// ds4tp_connect, before the first gate.
    pub fn ds4tp_attach_slab(pair: *mut ds4tp_pair, base: *mut c_void, bytes: u64) -> c_int;
    /// The attached slab's base, NULL when none.
    pub fn ds4tp_slab_base(pair: *const ds4tp_pair) -> *mut c_void;
    /// Stops the data plane (and a running gate service) and forgets the slab; later gates fail
    /// with ESTATE. Call before freeing engine-owned slab memory.
    pub fn ds4tp_detach_slab(pair: *mut ds4tp_pair);
}

// ---- data plane ---------------------------------------------------------

extern "C" {
    /// Sends out\[layer\]\[gate\] to the peer's in\[layer\]\[gate\] and waits for the peer's
    /// partial of the same (layer, gate, seq). Row gate seqs start at 1, rise by one per gate and
    /// must hit the identity's schedule.
    pub fn ds4tp_gate_exchange(pair: *mut ds4tp_pair, layer: u32, gate: u32, seq: u64) -> c_int;
    /// Verify-block batch gate: swaps `rows` (1..DS4TP_BATCH_MAX_ROWS) rows of batch gate `index`
    /// (batch_out -&gt; peer's batch_in). `seq` is the caller's batch counter (nonzero); both ranks
    /// must pass the same values.
    pub fn ds4tp_batch_gate_exchange(pair: *mut ds4tp_pair, index: u32, rows: u32, seq: u64) -> c_int;
    /// Prefill gate of any size: sends `bytes` from `out` and receives the peer's `bytes` into `in`
    /// (distinct, non-overlapping buffers; any memory). The peer may arrive up to
    /// big_gate_timeout_ms late.
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

/// Gate machinery callback shapes. They return 1 when the exchange succeeded and 0 when it failed
/// (the convention GPU gate machinery uses: "mark failed if the callback returns 0").
pub type ds4tp_gate_fn = Option<unsafe extern "C" fn(user_data: *mut c_void, layer: u32, gate: u32, seq: u64) -> c_int>;
/// `ds4tp_batch_gate_fn` (include/ds4tp/ds4tp.h).
pub type ds4tp_batch_gate_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, index: u32, rows: u32, seq: u64) -> c_int>;
/// `ds4tp_big_gate_fn` (include/ds4tp/ds4tp.h).
pub type ds4tp_big_gate_fn = Option<
    unsafe extern "C" fn(user_data: *mut c_void, layer: u32, seq: u64, out: *const c_void, into: *mut c_void, bytes: u64) -> c_int,
>;

/// `DS4TP_STAGE_ROW` (include/ds4tp/ds4tp.h).
pub const DS4TP_STAGE_ROW: c_int = 1;
/// `DS4TP_STAGE_BATCH` (include/ds4tp/ds4tp.h).
pub const DS4TP_STAGE_BATCH: c_int = 2;

/// `ds4tp_stage_before_fn` (include/ds4tp/ds4tp.h).
pub type ds4tp_stage_before_fn = Option<
    unsafe extern "C" fn(user_data: *mut c_void, kind: c_int, a: u32, b: u32, seq: u64, slab_out: *mut c_void, bytes: u64) -> c_int,
>;
/// `ds4tp_stage_after_fn` (include/ds4tp/ds4tp.h).
pub type ds4tp_stage_after_fn = Option<
    unsafe extern "C" fn(user_data: *mut c_void, kind: c_int, a: u32, b: u32, seq: u64, slab_in: *const c_void, bytes: u64) -> c_int,
>;

/// `ds4tp_staging_hooks` (include/ds4tp/ds4tp.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds4tp_staging_hooks {
    /// sizeof(ds4tp_staging_hooks) as compiled by the caller
    pub size: u32,
    /// `user_data` of `ds4tp_staging_hooks`.
    pub user_data: *mut c_void,
    /// `before_exchange` of `ds4tp_staging_hooks`.
    pub before_exchange: ds4tp_stage_before_fn,
    /// `after_exchange` of `ds4tp_staging_hooks`.
    pub after_exchange: ds4tp_stage_after_fn,
}

/// Gate service: a library thread that runs the row gates for kernels. Words (u64, 8-byte aligned,
/// each on its own 64-byte line; slab offsets from ds4tp_slab_layout: gpu_flags_offset /
/// gpu_release_offset + slot * flag_stride, slot = layer * 2 + gate): ready\[slot\]    written by
/// the ENGINE only: store `seq` (release order) once out\[slot\] holds this rank's partial for gate
/// seq. release\[slot\]  written by the SERVICE only: `seq` (release order) once in\[slot\] holds
/// the peer's partial for gate seq; DS4TP_GATE_POISON in every word when the pair failed. A kernel
/// waits while release\[slot\] &lt; seq, then gives up if the word is DS4TP_GATE_POISON, else reads
/// in\[slot\] (acquire order). The poison overwrites every word, so a kernel that had not yet read
/// its release gives up too: once the pair failed, the eval must stop either way. Kernels fire
/// gates in the identity's schedule order (ds4tp_schedule_slot), one outstanding gate at a time per
/// pair; seqs continue the pair's row gate count (the first gate after ds4tp_attach_slab is seq 1).
/// ds4tp_attach_slab zeroes both regions. The engine touches no other library word (an engine
/// running its own machinery, callback style, may use the release words itself while the service is
/// stopped). While the service runs it is the only gate caller: the engine's own ds4tp_*_exchange
/// calls fail with DS4TP_ESTATE (callbacks return 0). Batch and big gates: stop the service, call
/// them, start it again. Failure (exchange error, peer gone, ds4tp_mark_failed from any thread, a
/// ready word that contradicts the schedule): the service latches the pair failed, stores
/// DS4TP_GATE_POISON into every release word so every waiting or later kernel gives up, and its
/// thread ends; state FAILED.
pub const DS4TP_GATE_POISON: u64 = u64::MAX;

/// `DS4TP_SERVICE_STOPPED` (include/ds4tp/ds4tp.h).
pub const DS4TP_SERVICE_STOPPED: c_int = 0;
/// `DS4TP_SERVICE_RUNNING` (include/ds4tp/ds4tp.h).
pub const DS4TP_SERVICE_RUNNING: c_int = 1;
/// `DS4TP_SERVICE_FAILED` (include/ds4tp/ds4tp.h).
pub const DS4TP_SERVICE_FAILED: c_int = 2;

/// How the service thread waits for the next ready word: busy-poll for spin_us after the last gate,
/// then sched_yield() between polls until yield_us, then sleep sleep_us between polls (each sleep
/// adds up to sleep_us plus the kernel's timer slack to a gate that arrives then).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds4tp_gate_service_options {
    /// sizeof(ds4tp_gate_service_options)
    pub size: u32,
    /// default DS4TP_SPIN_ADAPTIVE (-1); or 0..10000000
    pub spin_us: i32,
    /// default 10000; 0..10000000
    pub yield_us: i32,
    /// default 20; 1..100000
    pub sleep_us: i32,
    /// ds4tp_gate_service_stop's wait; 0 (default) = the pair's gate_timeout_ms + 1000
    pub stop_timeout_ms: i32,
    /// pin the thread to this CPU; -1 = no (default)
    pub cpu: i32,
}

extern "C" {
    /// ds4tp_gate_exchange / ds4tp_batch_gate_exchange / ds4tp_big_gate_exchange with `pair` (a
    /// ds4tp_pair *) as user data, so they can be registered directly as ds4tp_*_fn. Unlike every
    /// other call they return 1 on success and 0 on failure, and ANY failure (including a bad
    /// argument or a wrong seq) latches the pair as failed: after a 0, ds4tp_failed(pair) is 1 and
    /// ds4tp_errmsg(pair) / ds4tp_last_error() say why. A NULL pair returns 0 (message in
    /// ds4tp_last_error).
    pub fn ds4tp_gate_callback(pair: *mut c_void, layer: u32, gate: u32, seq: u64) -> c_int;
    /// `ds4tp_batch_gate_callback` (include/ds4tp/ds4tp.h).
    pub fn ds4tp_batch_gate_callback(pair: *mut c_void, index: u32, rows: u32, seq: u64) -> c_int;
    /// `ds4tp_big_gate_callback` (include/ds4tp/ds4tp.h).
    pub fn ds4tp_big_gate_callback(
        pair: *mut c_void,
        layer: u32,
        seq: u64,
        out: *const c_void,
        into: *mut c_void,
        bytes: u64,
    ) -> c_int;
    /// Installs (copies) `hooks`; NULL removes them. Call after ds4tp_new and before the first row
    /// or batch gate, with no gate service running: later calls fail with DS4TP_ESTATE. Fails with
    /// DS4TP_EINVAL for a bad size field.
    pub fn ds4tp_set_staging_hooks(pair: *mut ds4tp_pair, hooks: *const ds4tp_staging_hooks) -> c_int;
    /// Fills `opt` with defaults and sets `size`.
    pub fn ds4tp_gate_service_options_init(opt: *mut ds4tp_gate_service_options);
    /// Starts the service thread (opt NULL = defaults). Needs an attached slab. Fails with
    /// DS4TP_ESTATE (no slab, already running), DS4TP_EINVAL (bad options, CPU cannot be pinned),
    /// DS4TP_EFAILED (pair failed).
    pub fn ds4tp_gate_service_start(pair: *mut ds4tp_pair, opt: *const ds4tp_gate_service_options) -> c_int;
    /// Stops the service and joins its thread. A gate whose ready word is already written is served
    /// first; call it when no kernel is heading for a gate (one that arrives later is never
    /// released). ds4tp_detach_slab and ds4tp_free also stop the service, and then poison the
    /// release words so any kernel still waiting gives up. Returns 0 once the thread has ended
    /// (also after a service failure, or when none ran); DS4TP_ETIMEDOUT if it is still inside an
    /// exchange at stop_timeout_ms (it ends by itself within gate_timeout_ms: call stop again).
    pub fn ds4tp_gate_service_stop(pair: *mut ds4tp_pair) -> c_int;
    /// ds4tp_service_state of the pair's service (STOPPED for NULL). Any thread.
    pub fn ds4tp_gate_service_state(pair: *const ds4tp_pair) -> c_int;
    /// The last row gate seq the pair completed (0 before the first); while the service runs, the
    /// last one it released. Any thread.
    pub fn ds4tp_gate_seq(pair: *const ds4tp_pair) -> u64;
}

// ---- observability --------------------------------------------------------

/// `ds4tp_stats.arrived_last` / `.lateness`: the ranks they have room for.
pub const DS4TP_STATS_RANKS: usize = 16;
/// `ds4tp_stats.collectives` / `.collective`: all-reduce's index.
pub const DS4TP_COLL_ALL_REDUCE: usize = 0;
/// All-gather's index.
pub const DS4TP_COLL_ALL_GATHER: usize = 1;
/// Broadcast's index.
pub const DS4TP_COLL_BROADCAST: usize = 2;
/// Barrier's index.
pub const DS4TP_COLL_BARRIER: usize = 3;
/// Reduce-scatter's index.
pub const DS4TP_COLL_REDUCE_SCATTER: usize = 4;
/// Reduce's index.
pub const DS4TP_COLL_REDUCE: usize = 5;
/// Gather's index.
pub const DS4TP_COLL_GATHER: usize = 6;
/// Scatter's index.
pub const DS4TP_COLL_SCATTER: usize = 7;
/// Uneven all-gather's index.
pub const DS4TP_COLL_ALL_GATHER_V: usize = 8;
/// Row all-gather's index.
pub const DS4TP_COLL_ALL_GATHER_ROWS: usize = 9;
/// All-to-all's index.
pub const DS4TP_COLL_ALL_TO_ALL_V: usize = 10;
/// Collective kinds.
pub const DS4TP_COLL_KINDS: usize = 11;

/// `DS4TP_STATS_BUCKETS`: histogram buckets (the last is +Inf).
pub const DS4TP_STATS_BUCKETS: usize = 26;

/// `ds4tp_stats_hist`: bucket i counts values <= 256 ns << i; per bucket, not cumulative.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ds4tp_stats_hist {
    /// Sum of the buckets.
    pub count: u64,
    /// Sum of the values (ns).
    pub sum_ns: u64,
    /// Counts per bucket.
    pub buckets: [u64; DS4TP_STATS_BUCKETS],
}

/// `ds4tp_stats` (include/ds4tp/ds4tp.h): a snapshot since creation or the last reset.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ds4tp_stats {
    /// sizeof(ds4tp_stats), set by the caller.
    pub size: u32,
    /// This rank.
    pub rank: i32,
    /// DS4TP_TRANSPORT_*.
    pub transport: i32,
    /// Padding.
    pub reserved0: u32,
    /// Row gates completed.
    pub row_gates: u64,
    /// Batch gates completed.
    pub batch_gates: u64,
    /// Big gates completed.
    pub big_gates: u64,
    /// Payload bytes sent (headers not counted).
    pub bytes_sent: u64,
    /// Payload bytes received.
    pub bytes_received: u64,
    /// Calls that failed the handle.
    pub errors: u64,
    /// Of those, DS4TP_ETIMEDOUT.
    pub timeouts: u64,
    /// Of those, DS4TP_EDESYNC.
    pub desyncs: u64,
    /// RDMA set-up attempts retried.
    pub rdma_retries: u64,
    /// RDMA queue pairs recreated.
    pub rdma_qp_recreated: u64,
    /// Heartbeats received from the peer.
    pub heartbeats_received: u64,
    /// Beat periods that brought no heartbeat.
    pub heartbeats_missed: u64,
    /// Gates whose peer wait and transfer the transport told apart.
    pub split_gates: u64,
    /// Of those, time waiting for the peer's first data (ns).
    pub peer_wait_ns: u64,
    /// Of those, time moving bytes after it (ns).
    pub transfer_ns: u64,
    /// Group all-reduces.
    pub all_reduces: u64,
    /// Group all-gathers.
    pub all_gathers: u64,
    /// Group broadcasts.
    pub broadcasts: u64,
    /// Group barriers.
    pub barriers: u64,
    /// Row gate latency.
    pub row_gate: ds4tp_stats_hist,
    /// Batch gate latency.
    pub batch_gate: ds4tp_stats_hist,
    /// Big gate latency.
    pub big_gate: ds4tp_stats_hist,
    /// Leader: command to first reply.
    pub control_round_trip: ds4tp_stats_hist,
    /// Group all-reduce latency.
    pub all_reduce: ds4tp_stats_hist,
    /// Row gates: the waiting part.
    pub row_peer_wait: ds4tp_stats_hist,
    /// Tiered groups: per collective, the time in its shm steps within the host.
    pub group_host_step: ds4tp_stats_hist,
    /// Tiered groups, on leaders: per collective, the time in the steps across hosts.
    pub group_across_step: ds4tp_stats_hist,
    /// Pairs: times the primary link failed and the pair went on over its standby tcp link,
    /// or an rdma pair went on without a lost rail.
    pub failovers: u64,
    /// Waits for the peer that did not end at once (pairs: gates; groups: collectives' steps).
    pub waits: u64,
    /// Of their time: busy-polling (ns).
    pub wait_spin_ns: u64,
    /// Yielding the CPU between polls (ns).
    pub wait_yield_ns: u64,
    /// Asleep in the kernel (ns).
    pub wait_sleep_ns: u64,
    /// Groups: calls completed per collective kind (index `DS4TP_COLL_*`).
    pub collectives: [u64; DS4TP_COLL_KINDS],
    /// Groups: each collective kind's latency (index `DS4TP_COLL_*`).
    pub collective: [ds4tp_stats_hist; DS4TP_COLL_KINDS],
    /// Groups, per rank (index = rank): completed calls it entered after every other rank.
    pub arrived_last: [u64; DS4TP_STATS_RANKS],
    /// Groups, per rank: how long after the first rank it entered each call.
    pub lateness: [ds4tp_stats_hist; DS4TP_STATS_RANKS],
}

/// `ds4tp_link_info.role`: the data connection.
pub const DS4TP_LINK_DATA: i32 = 0;
/// A rail (`ds4tp_options.rails`).
pub const DS4TP_LINK_RAIL: i32 = 1;
/// The standby link (`ds4tp_options.failover`).
pub const DS4TP_LINK_STANDBY: i32 = 2;

/// One of a pair's data links (`ds4tp_links`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ds4tp_link_info {
    /// DS4TP_TRANSPORT_* it carries.
    pub transport: i32,
    /// DS4TP_LINK_*.
    pub role: i32,
    /// 1 carries gates, 0 idle (a standby), -1 lost.
    pub state: i32,
    /// 1: row and batch gates run on it.
    pub row: i32,
    /// Rails: thousandths of each big gate it carries.
    pub share: u32,
    /// Rails: measured at bring-up, Mbit/s.
    pub rate_mbit: u32,
    /// Rails: measured round trip, us.
    pub rtt_us: u32,
    /// `reserved` of `ds4tp_link_info`.
    pub reserved: u32,
}

extern "C" {
    /// The pair's links into `links[0..cap)`: their number, or a negative status.
    pub fn ds4tp_links(pair: *const ds4tp_pair, links: *mut ds4tp_link_info, cap: c_int,
                       entry_size: usize) -> c_int;
    /// Fills `st` (st.size set by the caller); DS4TP_EINVAL for NULL or a size below 16.
    pub fn ds4tp_stats_read(pair: *const ds4tp_pair, st: *mut ds4tp_stats) -> c_int;
    /// Later snapshots count from now.
    pub fn ds4tp_stats_reset(pair: *mut ds4tp_pair) -> c_int;
    /// Upper bound of bucket i in ns (u64::MAX for the last).
    pub fn ds4tp_stats_bucket_le_ns(i: c_int) -> u64;
    /// Prometheus text into buf (NUL-terminated); DS4TP_ENOMEM when cap <= *needed.
    pub fn ds4tp_stats_prometheus(pair: *const ds4tp_pair, buf: *mut c_char, cap: usize,
                                  needed: *mut usize) -> c_int;
    /// Starts recording a Chrome/Perfetto trace to `path`.
    pub fn ds4tp_trace_start(pair: *mut ds4tp_pair, path: *const c_char) -> c_int;
    /// Writes the trace file now.
    pub fn ds4tp_trace_write(pair: *mut ds4tp_pair) -> c_int;
    /// The flight recorder (the last 256 gates) as text to `path` and a Chrome trace to
    /// `path`.json ("%r": the rank; NULL: DS4TP_PAIR_DUMP). Any thread.
    pub fn ds4tp_dump(pair: *const ds4tp_pair, path: *const c_char) -> c_int;
    /// Dumps as `ds4tp_dump(pair, path)` on each `signo` (0: stop). Any thread.
    pub fn ds4tp_dump_on_signal(pair: *mut ds4tp_pair, signo: c_int, path: *const c_char) -> c_int;
    /// Merges the leader's and worker's trace files `a` and `b` into `out`, the worker's clock
    /// shifted onto the leader's; `offset_us` and `uncertainty_us` (may be NULL) get the shift and
    /// its half-width.
    pub fn ds4tp_trace_merge(a: *const c_char, b: *const c_char, out: *const c_char,
                             offset_us: *mut f64, uncertainty_us: *mut f64) -> c_int;
}
