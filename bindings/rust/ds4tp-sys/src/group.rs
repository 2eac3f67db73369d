//! Groups of include/ds4tp/ds4tp.h (N ranks and all-reduce), re-exported
//! at the crate root.

use super::*;
use std::os::raw::{c_char, c_int, c_void};

// ---- groups: N ranks and all-reduce -----------------------------------

/// `ds4tp_group` (opaque).
#[repr(C)]
pub struct ds4tp_group {
    _private: [u8; 0],
}

/// `ds4tp_group_request` (opaque): a started split-phase call.
#[repr(C)]
pub struct ds4tp_group_request {
    _private: [u8; 0],
}

/// `DS4TP_DTYPE_F32` (ds4tp_dtype).
pub const DS4TP_DTYPE_F32: c_int = 0;
/// `DS4TP_DTYPE_F16` (ds4tp_dtype).
pub const DS4TP_DTYPE_F16: c_int = 1;
/// `DS4TP_DTYPE_BF16` (ds4tp_dtype).
pub const DS4TP_DTYPE_BF16: c_int = 2;
/// `DS4TP_DTYPE_F64` (ds4tp_dtype).
pub const DS4TP_DTYPE_F64: c_int = 3;
/// `DS4TP_DTYPE_I32` (ds4tp_dtype).
pub const DS4TP_DTYPE_I32: c_int = 4;
/// `DS4TP_DTYPE_I64` (ds4tp_dtype).
pub const DS4TP_DTYPE_I64: c_int = 5;
/// `DS4TP_DTYPE_U8` (ds4tp_dtype).
pub const DS4TP_DTYPE_U8: c_int = 6;
/// `DS4TP_OP_SUM` (ds4tp_reduce_op).
pub const DS4TP_OP_SUM: c_int = 0;
/// `DS4TP_OP_MAX` (ds4tp_reduce_op).
pub const DS4TP_OP_MAX: c_int = 1;
/// `DS4TP_OP_MIN` (ds4tp_reduce_op).
pub const DS4TP_OP_MIN: c_int = 2;
/// `DS4TP_OP_PROD` (ds4tp_reduce_op).
pub const DS4TP_OP_PROD: c_int = 3;

/// `ds4tp_group_options` (include/ds4tp/ds4tp.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds4tp_group_options {
    /// sizeof(ds4tp_group_options) as compiled by the caller
    pub size: u32,
    /// This rank; -1 = RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID.
    pub rank: i32,
    /// Ranks in the group (2..16); -1 = WORLD_SIZE, OMPI_COMM_WORLD_SIZE or SLURM_NTASKS.
    pub group_size: i32,
    /// Rank 0's rendezvous host; NULL = MASTER_ADDR, else "127.0.0.1".
    pub rendezvous_host: *const c_char,
    /// Rank 0's rendezvous port; -1 = MASTER_PORT, else 29600.
    pub rendezvous_port: i32,
    /// AUTO (shm when all ranks share a host; across hosts rdma where every rank has a
    /// usable port, else tcp), TCP, SHM or RDMA (docs/GROUPS.md).
    pub transport: i32,
    /// Whole bring-up (ms, default 60000).
    pub connect_timeout_ms: i32,
    /// One collective waiting on a peer (ms, default 10000).
    pub op_timeout_ms: i32,
    /// Largest bytes a rank contributes per step (default 1 MiB).
    pub chunk_bytes: u32,
    /// Pre-shared key (>= 16 bytes); NULL/0 = DS4TP_PSK, else none.
    pub psk: *const c_void,
    /// `psk_bytes` of `ds4tp_group_options`.
    pub psk_bytes: u32,
    /// Busy-poll before yielding (us), as in `ds4tp_options`: DS4TP_SPIN_ADAPTIVE (-1, default)
    /// learns it, 0 never spins; DS4TP_GROUP_SPIN_US overrides.
    pub spin_us: i32,
    /// tcp: a rank not heard this long (ms) fails the group (default 1000, 200..600000).
    pub peer_silence_ms: i32,
    /// Yield phase after the spin (us): -1 default (DS4TP_GROUP_YIELD_US, else 200), 0 none.
    pub yield_us: i32,
    /// A rank not yet in a collective is waited for this long (ms) while alive (default 300000;
    /// DS4TP_ARRIVAL_UNLIMITED: while alive).
    pub peer_arrival_timeout_ms: i32,
    /// The job this rank belongs to (same text on every rank); NULL = DS4TP_JOB_ID, else the
    /// launcher's job id (TORCHELASTIC_RUN_ID, SLURM_JOB_ID, OMPI_MCA_orte_ess_jobid,
    /// PMIX_NAMESPACE), else none. Rank 0 refuses joins of another job.
    pub job_id: *const c_char,
}

extern "C" {
    /// Fills `opt` with defaults (rank and size from the environment).
    pub fn ds4tp_group_options_init(opt: *mut ds4tp_group_options);
    /// Creates this rank's handle; rank 0 binds its rendezvous listener.
    pub fn ds4tp_group_new(
        out: *mut *mut ds4tp_group,
        opt: *const ds4tp_group_options,
        identity: *const ds4tp_identity,
    ) -> c_int;
    /// Bring-up: rendezvous at rank 0, roster, data links.
    pub fn ds4tp_group_connect(g: *mut ds4tp_group) -> c_int;
    /// `n` connected handles for `n` threads of this process.
    pub fn ds4tp_group_new_local(
        groups: *mut *mut ds4tp_group,
        n: c_int,
        opt: *const ds4tp_group_options,
        identity: *const ds4tp_identity,
    ) -> c_int;
    /// Accepts NULL. Peers still in a call see this rank leave.
    pub fn ds4tp_group_free(g: *mut ds4tp_group);
    /// In-place all-reduce of `count` elements (rank-order f32 sum).
    pub fn ds4tp_group_all_reduce(g: *mut ds4tp_group, buf: *mut c_void, count: u64, dtype: c_int, op: c_int)
        -> c_int;
    /// out holds size * bytes: rank r's `in` at r * bytes.
    pub fn ds4tp_group_all_gather(g: *mut ds4tp_group, input: *const c_void, out: *mut c_void, bytes: u64)
        -> c_int;
    /// Every rank's buf gets root's bytes.
    pub fn ds4tp_group_broadcast(g: *mut ds4tp_group, buf: *mut c_void, bytes: u64, root: c_int) -> c_int;
    /// Waits until every rank arrived.
    pub fn ds4tp_group_barrier(g: *mut ds4tp_group) -> c_int;
    /// out (count elements) = this rank's segment of the op over every rank's in (size x count).
    pub fn ds4tp_group_reduce_scatter(
        g: *mut ds4tp_group, input: *const c_void, out: *mut c_void, count: u64, dtype: c_int, op: c_int,
    ) -> c_int;
    /// The root's buf becomes the op over every rank's buf.
    pub fn ds4tp_group_reduce(g: *mut ds4tp_group, buf: *mut c_void, count: u64, dtype: c_int, op: c_int,
        root: c_int) -> c_int;
    /// The root's out (size * bytes) gets every rank's in.
    pub fn ds4tp_group_gather(g: *mut ds4tp_group, input: *const c_void, out: *mut c_void, bytes: u64,
        root: c_int) -> c_int;
    /// Every rank's out (bytes) gets its piece of the root's in (size * bytes).
    pub fn ds4tp_group_scatter(g: *mut ds4tp_group, input: *const c_void, out: *mut c_void, bytes: u64,
        root: c_int) -> c_int;
    /// Rank r gives `bytes[r]`; out holds the parts packed in rank order.
    pub fn ds4tp_group_all_gather_v(g: *mut ds4tp_group, input: *const c_void, out: *mut c_void,
        bytes: *const u64) -> c_int;
    /// Rank r's slice of each of `rows` rows at r * row_bytes in out's rows.
    pub fn ds4tp_group_all_gather_rows(g: *mut ds4tp_group, input: *const c_void, out: *mut c_void,
        rows: u64, row_bytes: u64) -> c_int;
    /// Per-peer counts and offsets (size entries each).
    pub fn ds4tp_group_all_to_all_v(
        g: *mut ds4tp_group,
        input: *const c_void,
        send_bytes: *const u64,
        send_offsets: *const u64,
        out: *mut c_void,
        recv_bytes: *const u64,
        recv_offsets: *const u64,
    ) -> c_int;
    /// Starts `ds4tp_group_all_reduce` on the group's request thread; `req` gets the request.
    pub fn ds4tp_group_all_reduce_start(g: *mut ds4tp_group, buf: *mut c_void, count: u64, dtype: c_int,
        op: c_int, req: *mut *mut ds4tp_group_request) -> c_int;
    /// Starts `ds4tp_group_all_gather`.
    pub fn ds4tp_group_all_gather_start(g: *mut ds4tp_group, input: *const c_void, out: *mut c_void,
        bytes: u64, req: *mut *mut ds4tp_group_request) -> c_int;
    /// Starts `ds4tp_group_broadcast`.
    pub fn ds4tp_group_broadcast_start(g: *mut ds4tp_group, buf: *mut c_void, bytes: u64, root: c_int,
        req: *mut *mut ds4tp_group_request) -> c_int;
    /// Starts `ds4tp_group_barrier`.
    pub fn ds4tp_group_barrier_start(g: *mut ds4tp_group, req: *mut *mut ds4tp_group_request) -> c_int;
    /// Starts `ds4tp_group_reduce_scatter`.
    pub fn ds4tp_group_reduce_scatter_start(g: *mut ds4tp_group, input: *const c_void, out: *mut c_void,
        count: u64, dtype: c_int, op: c_int, req: *mut *mut ds4tp_group_request) -> c_int;
    /// Starts `ds4tp_group_reduce`.
    pub fn ds4tp_group_reduce_start(g: *mut ds4tp_group, buf: *mut c_void, count: u64, dtype: c_int,
        op: c_int, root: c_int, req: *mut *mut ds4tp_group_request) -> c_int;
    /// Starts `ds4tp_group_gather`.
    pub fn ds4tp_group_gather_start(g: *mut ds4tp_group, input: *const c_void, out: *mut c_void,
        bytes: u64, root: c_int, req: *mut *mut ds4tp_group_request) -> c_int;
    /// Starts `ds4tp_group_scatter`.
    pub fn ds4tp_group_scatter_start(g: *mut ds4tp_group, input: *const c_void, out: *mut c_void,
        bytes: u64, root: c_int, req: *mut *mut ds4tp_group_request) -> c_int;
    /// Starts `ds4tp_group_all_gather_v` (the counts are copied).
    pub fn ds4tp_group_all_gather_v_start(g: *mut ds4tp_group, input: *const c_void, out: *mut c_void,
        bytes: *const u64, req: *mut *mut ds4tp_group_request) -> c_int;
    /// Starts `ds4tp_group_all_gather_rows`.
    pub fn ds4tp_group_all_gather_rows_start(g: *mut ds4tp_group, input: *const c_void,
        out: *mut c_void, rows: u64, row_bytes: u64, req: *mut *mut ds4tp_group_request) -> c_int;
    /// Starts `ds4tp_group_all_to_all_v` (the counts and offsets are copied).
    pub fn ds4tp_group_all_to_all_v_start(
        g: *mut ds4tp_group,
        input: *const c_void,
        send_bytes: *const u64,
        send_offsets: *const u64,
        out: *mut c_void,
        recv_bytes: *const u64,
        recv_offsets: *const u64,
        req: *mut *mut ds4tp_group_request,
    ) -> c_int;
    /// `*done` = 1 once the request completed (its status returned); never blocks.
    pub fn ds4tp_group_test(req: *mut ds4tp_group_request, done: *mut c_int) -> c_int;
    /// Blocks until the request completed; its status.
    pub fn ds4tp_group_wait(req: *mut ds4tp_group_request) -> c_int;
    /// The completed request's message; never NULL.
    pub fn ds4tp_group_request_errmsg(req: *const ds4tp_group_request) -> *const c_char;
    /// Waits for the request if it runs, then frees it. Accepts NULL.
    pub fn ds4tp_group_request_free(req: *mut ds4tp_group_request);
    /// Library-allocated buffer of chunk_bytes.
    pub fn ds4tp_group_buffer(g: *mut ds4tp_group, ptr: *mut *mut c_void, bytes: *mut u64) -> c_int;
    /// This rank.
    pub fn ds4tp_group_rank(g: *const ds4tp_group) -> c_int;
    /// Ranks in the group.
    pub fn ds4tp_group_size(g: *const ds4tp_group) -> c_int;
    /// Active transport (TCP, SHM or RDMA) after connect, AUTO before.
    pub fn ds4tp_group_transport(g: *const ds4tp_group) -> c_int;
    /// Rank 0's rendezvous port (after ds4tp_group_new on rank 0).
    pub fn ds4tp_group_rendezvous_port(g: *const ds4tp_group) -> c_int;
    /// The failure status once failed, else 0.
    pub fn ds4tp_group_failed(g: *const ds4tp_group) -> c_int;
    /// Message of the failure (or last error); never NULL.
    pub fn ds4tp_group_errmsg(g: *const ds4tp_group) -> *const c_char;
    /// Fails the group here and on every rank; any thread.
    pub fn ds4tp_group_mark_failed(g: *mut ds4tp_group);
    /// The group's counters and histograms (st.size set by the caller).
    pub fn ds4tp_group_stats_read(g: *const ds4tp_group, st: *mut ds4tp_stats) -> c_int;
    /// Later snapshots count from now.
    pub fn ds4tp_group_stats_reset(g: *mut ds4tp_group) -> c_int;
    /// The group's Prometheus text into buf (NUL-terminated); DS4TP_ENOMEM when cap <= *needed.
    pub fn ds4tp_group_stats_prometheus(g: *const ds4tp_group, buf: *mut c_char, cap: usize,
                                        needed: *mut usize) -> c_int;
    /// The flight recorder (the last 256 calls, each rank's arrival) as text to `path` and a
    /// Chrome trace to `path`.json ("%r": the rank; NULL: DS4TP_GROUP_DUMP). Any thread.
    pub fn ds4tp_group_dump(g: *const ds4tp_group, path: *const c_char) -> c_int;
    /// Dumps as `ds4tp_group_dump(g, path)` on each `signo` (0: stop). Any thread.
    pub fn ds4tp_group_dump_on_signal(g: *mut ds4tp_group, signo: c_int, path: *const c_char)
        -> c_int;
    /// Where `rank` sits after connect: host index, place on the host (0: its leader),
    /// tiered (1) or not; any pointer may be null.
    pub fn ds4tp_group_topology(g: *const ds4tp_group, rank: c_int, host: *mut c_int,
                                local_index: *mut c_int, tiered: *mut c_int) -> c_int;
    /// The plan the group runs, in one line, into buf (NUL-terminated); DS4TP_ENOMEM when
    /// cap <= *needed, DS4TP_ESTATE before connect.
    pub fn ds4tp_group_plan(g: *const ds4tp_group, buf: *mut c_char, cap: usize,
                            needed: *mut usize) -> c_int;
    /// f32 to F16 bits: nearest, ties to even; past F16's range an infinity; NaN stays NaN.
    pub fn ds4tp_f32_to_f16(value: f32) -> u16;
    /// F16 bits to f32 (exact).
    pub fn ds4tp_f16_to_f32(bits: u16) -> f32;
    /// f32 to BF16 bits: nearest, ties to even; NaN stays NaN.
    pub fn ds4tp_f32_to_bf16(value: f32) -> u16;
    /// BF16 bits to f32 (exact).
    pub fn ds4tp_bf16_to_f32(bits: u16) -> f32;
    /// `count` elements of `src` (src_dtype) into `dst` (dst_dtype), F32, F16 or BF16 each;
    /// DS4TP_EINVAL for an unknown dtype or a null buffer with count > 0.
    pub fn ds4tp_dtype_convert(dst: *mut c_void, dst_dtype: c_int, src: *const c_void,
                               src_dtype: c_int, count: u64) -> c_int;
}
