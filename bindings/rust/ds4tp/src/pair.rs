//! The pair: [`Pair`] (owning), [`Handle`] (every call, borrowed by
//! worker callbacks), [`Monitor`] (the thread-safe queries), and the slab,
//! data-plane and gate-service calls.

use crate::integration::{raw_service_options, stage_after, stage_before};
use crate::options::{empty_layout, RawOptions};
use crate::{check, owned_str, sys, Error, Result, Status};
use crate::{GateServiceOptions, Identity, Options, Plain, ServiceState, SlabLayout, StagingHooks, Stats, Transport};
use std::ffi::CString;
use std::fmt;
use std::os::raw::c_void;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One ds4tp_pair (rank 0 = leader, rank 1 = worker), freed on drop.
///
/// Every call of the C API lives on [`Handle`], which a `Pair` derefs to;
/// the pair itself adds creation, freeing, the staging hooks (whose Rust
/// object it owns) and [`Pair::monitor`]. Gates take `&mut self`: at most
/// one gate runs at a time (the C rule), and no slice of the slab is held
/// across one. A `Pair` is `Send` (the library has no thread affinity) but
/// not `Sync`; other threads watch it through a [`Monitor`].
pub struct Pair {
    h: Handle,
    owner: Arc<Owner>,
}

/// A ds4tp_pair that this value does not own: what a [`Pair`] derefs to,
/// and what worker callbacks get for their symmetric calls and gates.
pub struct Handle {
    pub(crate) p: *mut sys::ds4tp_pair,
}

/// The C pair and what it points into (the options' strings and log sink,
/// the staging hooks), freed together when the [`Pair`] and its last
/// [`Monitor`] are gone: ds4tp_free first, so no hook or log call can
/// follow.
struct Owner {
    p: *mut sys::ds4tp_pair,
    _options: RawOptions,
    hooks: Mutex<*mut Box<dyn StagingHooks>>,
}

// Shared by the Pair and its Monitors. Through a Monitor only the calls
// the header makes safe from any thread (ds4tp_failed, ds4tp_errmsg,
// ds4tp_mark_failed) are made; everything else needs the Pair, which is
// not Sync. The log sink in the options is Send + Sync.
unsafe impl Send for Owner {}
unsafe impl Sync for Owner {}
unsafe impl Send for Pair {}

impl Drop for Owner {
    fn drop(&mut self) {
        unsafe {
            sys::ds4tp_free(self.p);
            let hooks = *self.hooks.get_mut().unwrap_or_else(|e| e.into_inner());
            if !hooks.is_null() {
                drop(Box::from_raw(hooks));
            }
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        // Monitors keep the C pair alive; tell them it is finished.
        if Arc::strong_count(&self.owner) > 1 {
            let reason = CString::new("the Pair was dropped").unwrap_or_default();
            unsafe { sys::ds4tp_mark_failed(self.h.p, reason.as_ptr()) }
        }
    }
}

/// The thread-safe view of a pair: `Send + Sync + Clone`, for a watchdog,
/// a health endpoint or an engine thread that must fail the pair (a GPU
/// error) while the gate thread owns the [`Pair`]. It keeps the C pair
/// alive: the pair is freed when the `Pair` and every `Monitor` are gone
/// (dropping the `Pair` first marks it failed, "the Pair was dropped").
#[derive(Clone)]
pub struct Monitor {
    owner: Arc<Owner>,
}

impl Monitor {
    /// True once a failure latched: every later call on the pair fails
    /// with EFAILED.
    pub fn failed(&self) -> bool {
        unsafe { sys::ds4tp_failed(self.owner.p) != 0 }
    }
    /// Latches failure from the engine side, from any thread; a gate
    /// waiting on the gate thread returns EFAILED.
    pub fn mark_failed(&self, reason: &str) {
        let reason = CString::new(reason.replace('\0', " ")).unwrap_or_default();
        unsafe { sys::ds4tp_mark_failed(self.owner.p, reason.as_ptr()) }
    }
    /// Message of the pair's last failed call ("" if none).
    pub fn errmsg(&self) -> String {
        owned_str(unsafe { sys::ds4tp_errmsg(self.owner.p) })
    }
}

impl fmt::Debug for Monitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Monitor").field("failed", &self.failed()).finish()
    }
}

impl std::ops::Deref for Pair {
    type Target = Handle;
    fn deref(&self) -> &Handle {
        &self.h
    }
}

impl std::ops::DerefMut for Pair {
    fn deref_mut(&mut self) -> &mut Handle {
        &mut self.h
    }
}

impl fmt::Debug for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pair(rank {}, transport {})", self.rank(), self.transport().name())
    }
}

const NO_OFFSET: u64 = u64::MAX;

impl Pair {
    /// ds4tp_new: validates the options and identity; a leader binds its
    /// listener here (listen_port() is valid at once).
    ///
    /// Fails with EVERSION when the loaded library's major version is not
    /// this crate's ([`crate::check_version`]).
    pub fn new(options: &Options, identity: &Identity) -> Result<Pair> {
        crate::check_version()?;
        let raw = options.to_raw()?;
        let id = identity.to_raw();
        let mut p = ptr::null_mut();
        check(unsafe { sys::ds4tp_new(&mut p, &raw.raw, &id) })?;
        let owner = Owner { p, _options: raw, hooks: Mutex::new(ptr::null_mut()) };
        Ok(Pair { h: Handle { p }, owner: Arc::new(owner) })
    }

    /// A [`Monitor`] of this pair, for other threads.
    pub fn monitor(&self) -> Monitor {
        Monitor { owner: self.owner.clone() }
    }

    /// The C callbacks an engine's gate machinery can hold, with
    /// `as_ptr()` as their user data.
    pub fn callbacks() -> (sys::ds4tp_gate_fn, sys::ds4tp_batch_gate_fn, sys::ds4tp_big_gate_fn) {
        (Some(sys::ds4tp_gate_callback), Some(sys::ds4tp_batch_gate_callback), Some(sys::ds4tp_big_gate_callback))
    }

    /// Installs staging hooks (None removes them). Before the first row or
    /// batch gate, with no gate service running.
    pub fn set_staging_hooks(&mut self, hooks: Option<Box<dyn StagingHooks>>) -> Result<()> {
        let new = hooks.map(|h| Box::into_raw(Box::new(h)));
        let rc = match new {
            Some(h) => {
                let c = sys::ds4tp_staging_hooks {
                    size: std::mem::size_of::<sys::ds4tp_staging_hooks>() as u32,
                    user_data: h as *mut c_void,
                    before_exchange: Some(stage_before),
                    after_exchange: Some(stage_after),
                };
                unsafe { sys::ds4tp_set_staging_hooks(self.h.p, &c) }
            }
            None => unsafe { sys::ds4tp_set_staging_hooks(self.h.p, ptr::null()) },
        };
        if rc != 0 {
            if let Some(h) = new {
                drop(unsafe { Box::from_raw(h) });
            }
            return Err(Error::last(rc));
        }
        let mut slot = self.owner.hooks.lock().unwrap_or_else(|e| e.into_inner());
        let old = std::mem::replace(&mut *slot, new.unwrap_or(ptr::null_mut()));
        if !old.is_null() {
            drop(unsafe { Box::from_raw(old) });
        }
        Ok(())
    }
}

impl Handle {
    /// The raw handle, e.g. as user data for the C gate callbacks.
    pub fn as_ptr(&self) -> *mut sys::ds4tp_pair {
        self.p
    }

    // -- bring-up and state --

    /// Blocking bring-up: hello, identity check, transport negotiation.
    pub fn connect(&mut self) -> Result<()> {
        check(unsafe { sys::ds4tp_connect(self.p) })
    }
    /// Leader: the bound port; worker: the dialed port.
    pub fn listen_port(&self) -> u16 {
        unsafe { sys::ds4tp_listen_port(self.p) }.clamp(0, 65535) as u16
    }
    /// 0 for the leader, 1 for the worker.
    pub fn rank(&self) -> u32 {
        unsafe { sys::ds4tp_rank(self.p) }.max(0) as u32
    }
    /// The negotiated transport (Auto before connect).
    pub fn transport(&self) -> Transport {
        Transport::from_code(unsafe { sys::ds4tp_transport_active(self.p) })
    }
    /// The peer's ctx_size from its hello (0 before connect).
    pub fn peer_ctx_size(&self) -> u32 {
        unsafe { sys::ds4tp_peer_ctx_size(self.p) }
    }
    /// True once a failure latched: every later call fails with EFAILED.
    pub fn failed(&self) -> bool {
        unsafe { sys::ds4tp_failed(self.p) != 0 }
    }
    /// Latches failure from the engine side.
    pub fn mark_failed(&self, reason: &str) {
        let reason = CString::new(reason.replace('\0', " ")).unwrap_or_default();
        unsafe { sys::ds4tp_mark_failed(self.p, reason.as_ptr()) }
    }
    /// Message of the handle's last failed call ("" if none).
    pub fn errmsg(&self) -> String {
        owned_str(unsafe { sys::ds4tp_errmsg(self.p) })
    }

    // -- observability --

    /// Counters and histograms since creation or [`Self::stats_reset`].
    pub fn stats(&self) -> Result<Stats> {
        let mut st = Stats { size: std::mem::size_of::<Stats>() as u32, ..Default::default() };
        check(unsafe { sys::ds4tp_stats_read(self.p, &mut st) })?;
        Ok(st)
    }
    /// Later [`Self::stats`] count from now.
    pub fn stats_reset(&self) -> Result<()> {
        check(unsafe { sys::ds4tp_stats_reset(self.p) })
    }
    /// The Prometheus text exposition of the stats, for an engine's /metrics.
    pub fn prometheus(&self) -> Result<String> {
        let mut need = 0usize;
        unsafe { sys::ds4tp_stats_prometheus(self.p, std::ptr::null_mut(), 0, &mut need) };
        let mut buf = vec![0u8; need + 1];
        check(unsafe {
            sys::ds4tp_stats_prometheus(self.p, buf.as_mut_ptr().cast(), buf.len(), &mut need)
        })?;
        buf.truncate(need);
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }
    /// Starts recording a Chrome/Perfetto trace to `path` (written by
    /// [`Self::trace_write`] and when the pair is dropped).
    pub fn trace_start(&self, path: &str) -> Result<()> {
        let path = CString::new(path)
            .map_err(|_| Error::new(Status::EINVAL as i32, "trace path contains a NUL byte"))?;
        check(unsafe { sys::ds4tp_trace_start(self.p, path.as_ptr()) })
    }
    /// Writes the trace file now (recording goes on).
    pub fn trace_write(&self) -> Result<()> {
        check(unsafe { sys::ds4tp_trace_write(self.p) })
    }
    /// Writes the flight recorder (the last 256 gates, each with how long this rank waited for
    /// the peer) as text to `path` and a Chrome trace to `path`.json ("%r": the rank).
    pub fn dump(&self, path: &str) -> Result<()> {
        let path = CString::new(path)
            .map_err(|_| Error::new(Status::EINVAL as i32, "dump path contains a NUL byte"))?;
        check(unsafe { sys::ds4tp_dump(self.p, path.as_ptr()) })
    }

    // -- slab --

    /// This pair's slab layout.
    pub fn layout(&self) -> SlabLayout {
        let mut l = empty_layout();
        // Cannot fail for a live handle and a sized struct.
        unsafe { sys::ds4tp_slab_layout_get(self.p, &mut l) };
        l
    }
    /// Total slab bytes.
    pub fn slab_bytes(&self) -> u64 {
        unsafe { sys::ds4tp_slab_bytes(self.p) }
    }
    /// Offset of `out[layer][gate]` (None when out of range).
    pub fn out_offset(&self, layer: u32, gate: u32) -> Option<u64> {
        some(unsafe { sys::ds4tp_slab_out_offset(self.p, layer, gate) })
    }
    /// Offset of `in[layer][gate]`.
    pub fn in_offset(&self, layer: u32, gate: u32) -> Option<u64> {
        some(unsafe { sys::ds4tp_slab_in_offset(self.p, layer, gate) })
    }
    /// Offset of row 0 of batch gate `index`'s out rows.
    pub fn batch_out_offset(&self, index: u32) -> Option<u64> {
        some(unsafe { sys::ds4tp_slab_batch_out_offset(self.p, index) })
    }
    /// Offset of row 0 of batch gate `index`'s in rows.
    pub fn batch_in_offset(&self, index: u32) -> Option<u64> {
        some(unsafe { sys::ds4tp_slab_batch_in_offset(self.p, index) })
    }
    /// Offset of the engine's per-slot "gate reached" words.
    pub fn gpu_flags_offset(&self) -> u64 {
        unsafe { sys::ds4tp_slab_gpu_flags_offset(self.p) }
    }

    /// The library allocates a zeroed, page-aligned slab.
    pub fn attach_slab(&mut self) -> Result<()> {
        check(unsafe { sys::ds4tp_attach_slab(self.p, ptr::null_mut(), 0) })
    }
    /// Hands engine memory to the transport.
    ///
    /// # Safety
    /// `base` must be 64-byte aligned, valid for `bytes` (>= slab_bytes())
    /// and outlive the attachment (detach_slab or drop).
    pub unsafe fn attach_slab_at(&mut self, base: *mut u8, bytes: u64) -> Result<()> {
        check(sys::ds4tp_attach_slab(self.p, base as *mut c_void, bytes))
    }
    /// Stops the data plane and forgets the slab.
    pub fn detach_slab(&mut self) {
        unsafe { sys::ds4tp_detach_slab(self.p) }
    }
    /// Base address of the attached slab (null when none), for engine
    /// code (GPU mappings, kernels) that addresses it directly.
    pub fn slab_ptr(&self) -> *mut u8 {
        unsafe { sys::ds4tp_slab_base(self.p) as *mut u8 }
    }
    /// The attached slab.
    pub fn slab(&self) -> Result<&[u8]> {
        let base = self.base()?;
        Ok(unsafe { std::slice::from_raw_parts(base, self.slab_bytes() as usize) })
    }
    /// The attached slab, writable.
    pub fn slab_mut(&mut self) -> Result<&mut [u8]> {
        let base = self.base()?;
        Ok(unsafe { std::slice::from_raw_parts_mut(base, self.slab_bytes() as usize) })
    }
    /// This rank's partial for (layer, gate): n_embd floats to fill.
    pub fn out_vector(&mut self, layer: u32, gate: u32) -> Result<&mut [f32]> {
        let off = self.vector_offset(self.out_offset(layer, gate), "out", layer, gate)?;
        self.floats_mut(off)
    }
    /// The peer's partial for (layer, gate), valid after the exchange.
    pub fn in_vector(&self, layer: u32, gate: u32) -> Result<&[f32]> {
        let off = self.vector_offset(self.in_offset(layer, gate), "in", layer, gate)?;
        let n = (self.layout().vec_bytes / 4) as usize;
        Ok(unsafe { std::slice::from_raw_parts(self.base()?.add(off as usize) as *const f32, n) })
    }
    /// Row `row` of batch gate `index`'s out rows.
    pub fn batch_out_row(&mut self, index: u32, row: u32) -> Result<&mut [f32]> {
        let off = self.row_offset(self.batch_out_offset(index), index, row)?;
        self.floats_mut(off)
    }
    /// Row `row` of batch gate `index`'s in rows.
    pub fn batch_in_row(&self, index: u32, row: u32) -> Result<&[f32]> {
        let off = self.row_offset(self.batch_in_offset(index), index, row)?;
        let n = (self.layout().vec_bytes / 4) as usize;
        Ok(unsafe { std::slice::from_raw_parts(self.base()?.add(off as usize) as *const f32, n) })
    }

    fn base(&self) -> Result<*mut u8> {
        let base = self.slab_ptr();
        if base.is_null() {
            Err(Error::new(Status::ESTATE as i32, "no slab attached: call attach_slab first"))
        } else {
            Ok(base)
        }
    }
    fn floats_mut(&mut self, off: u64) -> Result<&mut [f32]> {
        let n = (self.layout().vec_bytes / 4) as usize;
        let base = self.base()?;
        Ok(unsafe { std::slice::from_raw_parts_mut(base.add(off as usize) as *mut f32, n) })
    }
    fn vector_offset(&self, off: Option<u64>, what: &str, layer: u32, gate: u32) -> Result<u64> {
        off.ok_or_else(|| {
            Error::new(
                Status::EINVAL as i32,
                format!("{} vector (layer {}, gate {}) is outside this pair's {} layers", what, layer, gate, self.layout().slots / 2),
            )
        })
    }
    fn row_offset(&self, base: Option<u64>, index: u32, row: u32) -> Result<u64> {
        let l = self.layout();
        match base {
            Some(b) if row < l.batch_rows => Ok(b + u64::from(row) * l.vec_stride),
            _ => Err(Error::new(
                Status::EINVAL as i32,
                format!("batch row (index {}, row {}) outside {} batch gates of {} rows", index, row, l.batch_gates, l.batch_rows),
            )),
        }
    }

    // -- data plane --

    /// Sends `out[layer][gate]`, waits for the peer's partial in `in[layer][gate]`.
    pub fn gate_exchange(&mut self, layer: u32, gate: u32, seq: u64) -> Result<()> {
        check(unsafe { sys::ds4tp_gate_exchange(self.p, layer, gate, seq) })
    }
    /// Swaps `rows` rows of batch gate `index`.
    pub fn batch_gate_exchange(&mut self, index: u32, rows: u32, seq: u64) -> Result<()> {
        check(unsafe { sys::ds4tp_batch_gate_exchange(self.p, index, rows, seq) })
    }
    /// Sends `out` and receives the peer's payload of the same size into `into`.
    pub fn big_gate_exchange<T: Plain>(&mut self, layer: u32, seq: u64, out: &[T], into: &mut [T]) -> Result<()> {
        let bytes = same_size(out, into)?;
        check(unsafe {
            sys::ds4tp_big_gate_exchange(self.p, layer, seq, out.as_ptr() as *const c_void, into.as_mut_ptr() as *mut c_void, bytes)
        })
    }

    // -- engine integration --

    /// ds4tp_gate_callback: the gate in callback shape; true on success,
    /// false on failure (which latches the pair failed; see errmsg()).
    pub fn gate_callback(&mut self, layer: u32, gate: u32, seq: u64) -> bool {
        unsafe { sys::ds4tp_gate_callback(self.p as *mut c_void, layer, gate, seq) != 0 }
    }
    /// ds4tp_batch_gate_callback; true on success.
    pub fn batch_gate_callback(&mut self, index: u32, rows: u32, seq: u64) -> bool {
        unsafe { sys::ds4tp_batch_gate_callback(self.p as *mut c_void, index, rows, seq) != 0 }
    }
    /// ds4tp_big_gate_callback; true on success (false also for unequal sizes).
    pub fn big_gate_callback<T: Plain>(&mut self, layer: u32, seq: u64, out: &[T], into: &mut [T]) -> bool {
        match same_size(out, into) {
            Ok(bytes) => unsafe {
                sys::ds4tp_big_gate_callback(
                    self.p as *mut c_void,
                    layer,
                    seq,
                    out.as_ptr() as *const c_void,
                    into.as_mut_ptr() as *mut c_void,
                    bytes,
                ) != 0
            },
            Err(_) => false,
        }
    }

    /// Starts the library's gate service thread.
    pub fn gate_service_start(&mut self, options: &GateServiceOptions) -> Result<()> {
        let mut c = raw_service_options();
        c.spin_us = options.spin_us;
        c.yield_us = options.yield_us;
        c.sleep_us = options.sleep_us;
        c.stop_timeout_ms = options.stop_timeout_ms;
        c.cpu = options.cpu;
        check(unsafe { sys::ds4tp_gate_service_start(self.p, &c) })
    }
    /// Stops the service and joins its thread (ETIMEDOUT: call again).
    pub fn gate_service_stop(&mut self) -> Result<()> {
        check(unsafe { sys::ds4tp_gate_service_stop(self.p) })
    }
    /// The gate service's state.
    pub fn gate_service_state(&self) -> ServiceState {
        match unsafe { sys::ds4tp_gate_service_state(self.p) } {
            sys::DS4TP_SERVICE_RUNNING => ServiceState::Running,
            sys::DS4TP_SERVICE_FAILED => ServiceState::Failed,
            _ => ServiceState::Stopped,
        }
    }
    /// The last row gate seq completed (or released by the service).
    pub fn gate_seq(&self) -> u64 {
        unsafe { sys::ds4tp_gate_seq(self.p) }
    }
    /// The engine's ready word of `slot` (store seq with Release order).
    pub fn ready_word(&self, slot: u32) -> Result<&AtomicU64> {
        let l = self.layout();
        self.word(l.gpu_flags_offset, slot, &l)
    }
    /// The service's release word of `slot` (load with Acquire order;
    /// GATE_POISON after a failure).
    pub fn release_word(&self, slot: u32) -> Result<&AtomicU64> {
        let l = self.layout();
        self.word(l.gpu_release_offset, slot, &l)
    }
    fn word(&self, region: u64, slot: u32, l: &SlabLayout) -> Result<&AtomicU64> {
        if slot >= l.slots {
            return Err(Error::new(Status::EINVAL as i32, format!("slot {} outside 0..{}", slot, l.slots)));
        }
        let base = self.base()?;
        let off = region + u64::from(slot) * l.flag_stride;
        // The words are 8-byte aligned u64s shared with the service thread.
        Ok(unsafe { &*(base.add(off as usize) as *const AtomicU64) })
    }
    /// Convenience: store `seq` into `ready[slot]` (Release).
    pub fn gate_ready(&self, slot: u32, seq: u64) -> Result<()> {
        self.ready_word(slot)?.store(seq, Ordering::Release);
        Ok(())
    }
    /// Convenience: load `release[slot]` (Acquire).
    pub fn gate_released(&self, slot: u32) -> Result<u64> {
        Ok(self.release_word(slot)?.load(Ordering::Acquire))
    }
}

fn some(off: u64) -> Option<u64> {
    if off == NO_OFFSET {
        None
    } else {
        Some(off)
    }
}

fn same_size<T>(out: &[T], into: &[T]) -> Result<u64> {
    if out.len() != into.len() {
        return Err(Error::new(
            Status::EINVAL as i32,
            format!("big gate: out has {} elements but into has {}; both ranks swap equal sizes", out.len(), into.len()),
        ));
    }
    Ok(std::mem::size_of_val(out) as u64)
}
