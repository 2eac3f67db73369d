//! libds4tp for Rust: a safe wrapper over the C ABI (include/ds4tp/ds4tp.h).
//!
//! [`sys`] holds the raw `extern "C"` declarations, one block per header
//! section; this module wraps them: [`Pair`] owns a `ds4tp_pair` and frees
//! it on drop, every failing call returns [`Error`] with the C status code
//! and the library's message, and slab memory is handed out as slices
//! borrowed from the pair (so it cannot outlive the slab, and a gate, which
//! takes `&mut self`, cannot run while a slice of the slab is held).
//!
//! ```no_run
//! use ds4tp::{Identity, Options, Pair, GATE_ATTN};
//! let id = Identity { n_layer: 2, n_embd: 64, n_vocab: 1000, model_bytes: 1, ..Identity::default() };
//! let mut tp = Pair::new(&Options::leader(7070), &id)?;
//! tp.connect()?;
//! tp.attach_slab()?;
//! tp.out_vector(0, GATE_ATTN)?.fill(1.0);
//! tp.gate_exchange(0, GATE_ATTN, 1)?;
//! println!("peer sent {}", tp.in_vector(0, GATE_ATTN)?[0]);
//! # Ok::<(), ds4tp::Error>(())
//! ```
//!
//! Builds with Rust 1.63 (Debian 12) and no crates from any registry.

pub mod sys;
mod control;

pub use control::*;

use std::ffi::{CStr, CString};
use std::fmt;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use sys::ds4tp_slab_layout as SlabLayout;
pub use sys::{
    DS4TP_BATCH_GATES_PER_LAYER as BATCH_GATES_PER_LAYER, DS4TP_BATCH_MAX_ROWS as BATCH_MAX_ROWS,
    DS4TP_ENGINE_BLOB_MAX as ENGINE_BLOB_MAX, DS4TP_GATES_PER_LAYER as GATES_PER_LAYER,
    DS4TP_GATE_ATTN as GATE_ATTN, DS4TP_GATE_FFN as GATE_FFN, DS4TP_GATE_MASK_WORDS as GATE_MASK_WORDS,
    DS4TP_GATE_POISON as GATE_POISON,
};

// ---- status codes and errors -------------------------------------------

macro_rules! statuses {
    ($($name:ident = $value:expr),* $(,)?) => {
        /// DS4TP_* status codes; the numbers are pinned by the C header.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum Status { $($name = $value),* }

        impl Status {
            /// Every status, in header order.
            pub const ALL: &'static [Status] = &[$(Status::$name),*];
            /// The status with this number, if it is one.
            pub fn from_code(code: i32) -> Option<Status> {
                match code { $($value => Some(Status::$name),)* _ => None }
            }
        }
    };
}

statuses! {
    OK = 0, EINVAL = -1, ETIMEDOUT = -2, EPEERCLOSED = -3, EIDENTITY = -4, EDESYNC = -5,
    EPROTO = -6, EAUTH = -7, EIO = -8, EUNSUPPORTED = -9, ECANCELLED = -10, EFAILED = -11,
    EVERSION = -12, ESTATE = -13, ENOMEM = -14, EDIVERGED = -15, EREMOTE = -16,
}

impl Status {
    /// The numeric code.
    pub fn code(self) -> i32 {
        self as i32
    }
    /// Symbolic name from the library ("DS4TP_ETIMEDOUT").
    pub fn name(self) -> &'static str {
        err_name(self as i32)
    }
}

/// A failed ds4tp call: the C status code and the library's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    code: i32,
    message: String,
}

impl Error {
    /// An error with an explicit message.
    pub fn new(code: i32, message: impl Into<String>) -> Error {
        Error { code, message: message.into() }
    }
    /// The raw DS4TP_E* code.
    pub fn code(&self) -> i32 {
        self.code
    }
    /// The code as a [`Status`] (None for a code this crate does not know).
    pub fn status(&self) -> Option<Status> {
        Status::from_code(self.code)
    }
    /// "DS4TP_EINVAL", ...
    pub fn name(&self) -> &'static str {
        err_name(self.code)
    }
    /// The library's explanation.
    pub fn message(&self) -> &str {
        &self.message
    }
    // The calling thread's last message (the C library records it per thread).
    fn last(code: i32) -> Error {
        let msg = last_error();
        Error { code, message: if msg.is_empty() { strerror(code).to_string() } else { msg } }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name(), self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

fn check(rc: c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::last(rc))
    }
}

fn static_str(p: *const c_char) -> &'static str {
    if p.is_null() {
        return "";
    }
    // Static strings of the library (names, versions).
    unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("?")
}

fn owned_str(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

// ---- versions and names ---------------------------------------------------

/// DS4TP_VERSION_HEX of the linked library.
pub fn version() -> u32 {
    unsafe { sys::ds4tp_version() }
}
/// "MAJOR.MINOR.PATCH" of the linked library.
pub fn version_string() -> &'static str {
    static_str(unsafe { sys::ds4tp_version_string() })
}
/// Wire protocol version the linked library speaks.
pub fn protocol_version() -> u32 {
    unsafe { sys::ds4tp_protocol_version() }
}
/// Short description of a status code.
pub fn strerror(code: i32) -> &'static str {
    static_str(unsafe { sys::ds4tp_strerror(code) })
}
/// Symbolic name of a status code.
pub fn err_name(code: i32) -> &'static str {
    static_str(unsafe { sys::ds4tp_err_name(code) })
}
/// Message of the last failed call made by this thread ("" if none).
pub fn last_error() -> String {
    owned_str(unsafe { sys::ds4tp_last_error() })
}

/// ds4tp_role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Role {
    None = 0,
    Leader = 1,
    Worker = 2,
}

/// ds4tp_transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Transport {
    Auto = 0,
    Tcp = 1,
    Shm = 2,
    Rdma = 3,
}

impl Transport {
    fn from_code(code: i32) -> Transport {
        match code {
            1 => Transport::Tcp,
            2 => Transport::Shm,
            3 => Transport::Rdma,
            _ => Transport::Auto,
        }
    }
    /// Lower-case name ("tcp").
    pub fn name(self) -> &'static str {
        static_str(unsafe { sys::ds4tp_transport_name(self as c_int) })
    }
    /// Whether this transport can run on this host, and what was found or
    /// what is missing. No network I/O.
    pub fn available(self) -> (bool, String) {
        let mut why = [0 as c_char; 512];
        let ok = unsafe { sys::ds4tp_transport_available(self as c_int, why.as_mut_ptr(), why.len()) };
        (ok != 0, owned_str(why.as_ptr()))
    }
}

/// ds4tp_log_level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(i32)]
pub enum LogLevel {
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
}

// ---- options and identity ---------------------------------------------------

/// A log sink: (level, message). Called on the thread making the ds4tp
/// call, never inside a gate.
pub type LogFn = dyn Fn(i32, &str) + Send + Sync;

/// ds4tp_options as Rust values. `Options::default()` takes the library's
/// defaults (ds4tp_options_init); set the fields you need.
#[derive(Clone)]
pub struct Options {
    pub role: Role,
    pub transport: Transport,
    pub listen_host: String,
    pub listen_port: i32,
    pub leader_host: String,
    pub leader_port: i32,
    pub connect_timeout_ms: i32,
    pub hello_timeout_ms: i32,
    pub gate_timeout_ms: i32,
    pub big_gate_timeout_ms: i32,
    pub frame_timeout_ms: i32,
    pub spin_us: i32,
    /// None: the library's default sink (stderr).
    pub log: Option<Arc<LogFn>>,
    pub log_level: LogLevel,
    pub max_frame_bytes: u32,
    pub rdma_device: Option<String>,
    pub rdma_port: i32,
    pub rdma_gid_index: i32,
    /// Pre-shared key (None: DS4TP_PSK / DS4TP_PSK_FILE or no auth).
    pub psk: Option<Vec<u8>>,
    pub psk_file: Option<String>,
}

impl Default for Options {
    fn default() -> Options {
        let c = raw_options();
        Options {
            role: Role::None,
            transport: Transport::from_code(c.transport),
            listen_host: owned_str(c.listen_host),
            listen_port: c.listen_port,
            leader_host: owned_str(c.leader_host),
            leader_port: c.leader_port,
            connect_timeout_ms: c.connect_timeout_ms,
            hello_timeout_ms: c.hello_timeout_ms,
            gate_timeout_ms: c.gate_timeout_ms,
            big_gate_timeout_ms: c.big_gate_timeout_ms,
            frame_timeout_ms: c.frame_timeout_ms,
            spin_us: c.spin_us,
            log: None,
            log_level: match c.log_level {
                0 => LogLevel::Error,
                1 => LogLevel::Warn,
                3 => LogLevel::Debug,
                _ => LogLevel::Info,
            },
            max_frame_bytes: c.max_frame_bytes,
            rdma_device: None,
            rdma_port: c.rdma_port,
            rdma_gid_index: c.rdma_gid_index,
            psk: None,
            psk_file: None,
        }
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("role", &self.role)
            .field("transport", &self.transport)
            .field("listen", &format_args!("{}:{}", self.listen_host, self.listen_port))
            .field("leader", &format_args!("{}:{}", self.leader_host, self.leader_port))
            .field("gate_timeout_ms", &self.gate_timeout_ms)
            .field("log_level", &self.log_level)
            .finish_non_exhaustive()
    }
}

fn raw_options() -> sys::ds4tp_options {
    let mut c = std::mem::MaybeUninit::<sys::ds4tp_options>::zeroed();
    unsafe {
        sys::ds4tp_options_init(c.as_mut_ptr());
        c.assume_init()
    }
}

impl Options {
    /// A leader listening on 127.0.0.1:port (0 picks a free port).
    pub fn leader(port: u16) -> Options {
        Options { role: Role::Leader, listen_port: i32::from(port), ..Options::default() }
    }
    /// A worker dialing the leader at host:port.
    pub fn worker(host: &str, port: u16) -> Options {
        Options { role: Role::Worker, leader_host: host.to_string(), leader_port: i32::from(port), ..Options::default() }
    }
    /// Installs a log sink.
    pub fn with_log(mut self, f: impl Fn(i32, &str) + Send + Sync + 'static) -> Options {
        self.log = Some(Arc::new(f));
        self
    }
}

/// The C view of an [`Options`]: the strings and log sink it points to.
struct RawOptions {
    raw: sys::ds4tp_options,
    _strings: Vec<CString>,
    _psk: Option<Vec<u8>>,
    _log: Option<Box<Arc<LogFn>>>,
}

fn cstring(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(Status::EINVAL as i32, format!("{} contains a NUL byte", what)))
}

unsafe extern "C" fn log_trampoline(user_data: *mut c_void, level: c_int, msg: *const c_char) {
    let sink = &*(user_data as *const Arc<LogFn>);
    let text = owned_str(msg);
    // A panic must not unwind into C.
    let _ = catch_unwind(AssertUnwindSafe(|| (**sink)(level, &text)));
}

impl Options {
    fn to_raw(&self) -> Result<RawOptions> {
        let mut c = raw_options();
        let mut strings = Vec::new();
        let mut keep = |s: &str, what: &str| -> Result<*const c_char> {
            let cs = cstring(s, what)?;
            let p = cs.as_ptr();
            strings.push(cs);
            Ok(p)
        };
        c.role = self.role as i32;
        c.transport = self.transport as i32;
        c.listen_host = keep(&self.listen_host, "listen_host")?;
        c.listen_port = self.listen_port;
        c.leader_host = keep(&self.leader_host, "leader_host")?;
        c.leader_port = self.leader_port;
        c.connect_timeout_ms = self.connect_timeout_ms;
        c.hello_timeout_ms = self.hello_timeout_ms;
        c.gate_timeout_ms = self.gate_timeout_ms;
        c.big_gate_timeout_ms = self.big_gate_timeout_ms;
        c.frame_timeout_ms = self.frame_timeout_ms;
        c.spin_us = self.spin_us;
        c.log_level = self.log_level as i32;
        c.max_frame_bytes = self.max_frame_bytes;
        if let Some(dev) = &self.rdma_device {
            c.rdma_device = keep(dev, "rdma_device")?;
        }
        c.rdma_port = self.rdma_port;
        c.rdma_gid_index = self.rdma_gid_index;
        if let Some(file) = &self.psk_file {
            c.psk_file = keep(file, "psk_file")?;
        }
        let psk = self.psk.clone();
        if let Some(key) = &psk {
            c.psk = key.as_ptr() as *const c_void;
            c.psk_bytes = key.len() as u32;
        }
        let log = self.log.clone().map(Box::new);
        if let Some(sink) = &log {
            c.log_fn = Some(log_trampoline);
            c.log_user_data = &**sink as *const Arc<LogFn> as *mut c_void;
        }
        Ok(RawOptions { raw: c, _strings: strings, _psk: psk, _log: log })
    }
}

/// ds4tp_identity as Rust values: both ranks must present the same one
/// (ctx_size excepted). See the header for the gate schedule fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
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
    pub gate_slot_mask: [u64; GATE_MASK_WORDS],
    pub features: u64,
    /// Opaque engine bytes compared byte for byte (e.g. a model hash).
    pub engine_blob: Vec<u8>,
}

impl Identity {
    /// The C struct; it points into `self.engine_blob`, so it must not
    /// outlive `self`.
    pub fn to_raw(&self) -> sys::ds4tp_identity {
        let mut c = std::mem::MaybeUninit::<sys::ds4tp_identity>::zeroed();
        let mut c = unsafe {
            sys::ds4tp_identity_init(c.as_mut_ptr());
            c.assume_init()
        };
        c.model_bytes = self.model_bytes;
        c.model_id = self.model_id;
        c.n_layer = self.n_layer;
        c.n_embd = self.n_embd;
        c.n_vocab = self.n_vocab;
        c.quant_bits = self.quant_bits;
        c.ctx_size = self.ctx_size;
        c.gate_slot_start = self.gate_slot_start;
        c.gate_slot_step = self.gate_slot_step;
        c.gates_per_token = self.gates_per_token;
        c.gate_slot_mask = self.gate_slot_mask;
        c.features = self.features;
        if !self.engine_blob.is_empty() {
            c.engine_blob = self.engine_blob.as_ptr() as *const c_void;
            c.engine_blob_bytes = self.engine_blob.len().min(u32::MAX as usize) as u32;
        }
        c
    }

    /// The slot row gate `seq` must hit under this schedule (None when seq
    /// is 0 or the identity is invalid).
    pub fn schedule_slot(&self, seq: u64) -> Option<u32> {
        let raw = self.to_raw();
        let slot = unsafe { sys::ds4tp_schedule_slot(&raw, seq) };
        if slot < 0 {
            None
        } else {
            Some(slot as u32)
        }
    }

    /// The slab layout for this identity (pure).
    pub fn slab_layout(&self) -> Result<SlabLayout> {
        let raw = self.to_raw();
        let mut l = empty_layout();
        check(unsafe { sys::ds4tp_slab_layout_compute(&raw, &mut l) })?;
        Ok(l)
    }
}

fn empty_layout() -> SlabLayout {
    SlabLayout { size: std::mem::size_of::<SlabLayout>() as u32, ..SlabLayout::default() }
}

// ---- engine integration types ---------------------------------------------

/// Which gate a staging hook runs for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// A row gate: (layer, gate).
    Row { layer: u32, gate: u32 },
    /// A batch gate: `rows` rows of batch gate `index`, vec_stride apart.
    Batch { index: u32, rows: u32 },
}

/// Staging hooks for engines whose partials live in device memory. They
/// run on the gate thread around every row and batch gate; return 0 on
/// success, anything else fails the gate with EIO. Must not call back into
/// the library.
pub trait StagingHooks: Send {
    /// Copy this rank's partial into `slab_out` before the exchange.
    fn before_exchange(&mut self, stage: Stage, seq: u64, slab_out: &mut [u8]) -> i32 {
        let _ = (stage, seq, slab_out);
        0
    }
    /// Copy the peer's partial out of `slab_in` after a successful exchange.
    fn after_exchange(&mut self, stage: Stage, seq: u64, slab_in: &[u8]) -> i32 {
        let _ = (stage, seq, slab_in);
        0
    }
}

fn stage(kind: c_int, a: u32, b: u32) -> Stage {
    if kind == sys::DS4TP_STAGE_BATCH {
        Stage::Batch { index: a, rows: b }
    } else {
        Stage::Row { layer: a, gate: b }
    }
}

// Hook panics become a failed gate (EIO), never an unwind into C.
const HOOK_PANICKED: c_int = -99;

unsafe extern "C" fn stage_before(
    user_data: *mut c_void,
    kind: c_int,
    a: u32,
    b: u32,
    seq: u64,
    slab_out: *mut c_void,
    bytes: u64,
) -> c_int {
    let hooks = &mut *(user_data as *mut Box<dyn StagingHooks>);
    let buf = std::slice::from_raw_parts_mut(slab_out as *mut u8, bytes as usize);
    catch_unwind(AssertUnwindSafe(|| hooks.before_exchange(stage(kind, a, b), seq, buf))).unwrap_or(HOOK_PANICKED)
}

unsafe extern "C" fn stage_after(
    user_data: *mut c_void,
    kind: c_int,
    a: u32,
    b: u32,
    seq: u64,
    slab_in: *const c_void,
    bytes: u64,
) -> c_int {
    let hooks = &mut *(user_data as *mut Box<dyn StagingHooks>);
    let buf = std::slice::from_raw_parts(slab_in as *const u8, bytes as usize);
    catch_unwind(AssertUnwindSafe(|| hooks.after_exchange(stage(kind, a, b), seq, buf))).unwrap_or(HOOK_PANICKED)
}

/// ds4tp_service_state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceState {
    Stopped,
    Running,
    Failed,
}

/// ds4tp_gate_service_options; `default()` takes the library's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateServiceOptions {
    pub spin_us: i32,
    pub yield_us: i32,
    pub sleep_us: i32,
    pub stop_timeout_ms: i32,
    /// Pin the service thread to this CPU (-1: no).
    pub cpu: i32,
}

impl Default for GateServiceOptions {
    fn default() -> GateServiceOptions {
        let c = raw_service_options();
        GateServiceOptions {
            spin_us: c.spin_us,
            yield_us: c.yield_us,
            sleep_us: c.sleep_us,
            stop_timeout_ms: c.stop_timeout_ms,
            cpu: c.cpu,
        }
    }
}

fn raw_service_options() -> sys::ds4tp_gate_service_options {
    let mut c = std::mem::MaybeUninit::<sys::ds4tp_gate_service_options>::zeroed();
    unsafe {
        sys::ds4tp_gate_service_options_init(c.as_mut_ptr());
        c.assume_init()
    }
}

/// Element types that any bit pattern makes valid, so slab and big-gate
/// bytes can be viewed as them.
pub trait Plain: Copy + sealed::Sealed {}
mod sealed {
    pub trait Sealed {}
}
macro_rules! plain {
    ($($t:ty),*) => { $(impl sealed::Sealed for $t {} impl Plain for $t {})* };
}
plain!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

// ---- the pair -------------------------------------------------------------

/// One ds4tp_pair (rank 0 = leader, rank 1 = worker), freed on drop.
///
/// Every call of the C API lives on [`Handle`], which a `Pair` derefs to;
/// the pair itself adds creation, freeing and the staging hooks (whose
/// Rust object it owns). Gates take `&mut self`: at most one gate runs at
/// a time (the C rule), and no slice of the slab is held across one.
pub struct Pair {
    h: Handle,
    _options: RawOptions,
    hooks: *mut Box<dyn StagingHooks>,
}

/// A ds4tp_pair that this value does not own: what a [`Pair`] derefs to,
/// and what worker callbacks get for their symmetric calls and gates.
pub struct Handle {
    p: *mut sys::ds4tp_pair,
}

// The handle may move between threads; the C library has no thread
// affinity. (Not Sync: gates must not overlap.)
unsafe impl Send for Pair {}

impl Drop for Pair {
    fn drop(&mut self) {
        unsafe {
            sys::ds4tp_free(self.h.p);
            if !self.hooks.is_null() {
                drop(Box::from_raw(self.hooks));
            }
        }
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
    pub fn new(options: &Options, identity: &Identity) -> Result<Pair> {
        let raw = options.to_raw()?;
        let id = identity.to_raw();
        let mut p = ptr::null_mut();
        check(unsafe { sys::ds4tp_new(&mut p, &raw.raw, &id) })?;
        Ok(Pair { h: Handle { p }, _options: raw, hooks: ptr::null_mut() })
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
        let old = std::mem::replace(&mut self.hooks, new.unwrap_or(ptr::null_mut()));
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
    /// Offset of out[layer][gate] (None when out of range).
    pub fn out_offset(&self, layer: u32, gate: u32) -> Option<u64> {
        some(unsafe { sys::ds4tp_slab_out_offset(self.p, layer, gate) })
    }
    /// Offset of in[layer][gate].
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

    /// Sends out[layer][gate], waits for the peer's partial in in[layer][gate].
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
    /// Convenience: store `seq` into ready[slot] (Release).
    pub fn gate_ready(&self, slot: u32, seq: u64) -> Result<()> {
        self.ready_word(slot)?.store(seq, Ordering::Release);
        Ok(())
    }
    /// Convenience: load release[slot] (Acquire).
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(tp.out_offset(1, GATE_FFN), Some(l.out_offset + 3 * l.vec_stride));
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
}
