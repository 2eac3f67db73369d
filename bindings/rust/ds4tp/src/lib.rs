//! libds4tp for Rust: a safe wrapper over the C ABI (include/ds4tp/ds4tp.h).
//!
//! [`sys`] (the `ds4tp-sys` crate) holds the raw `extern "C"` declarations
//! and links the library; this crate wraps them: [`Pair`] owns a
//! `ds4tp_pair` and frees it on drop, every failing call returns [`Error`]
//! with the C status code and the library's message, and slab memory is
//! handed out as slices borrowed from the pair (so it cannot outlive the
//! slab, and a gate, which takes `&mut self`, cannot run while a slice of
//! the slab is held). [`Pair::monitor`] gives a [`Monitor`]: a `Send + Sync
//! + Clone` handle other threads use to watch the pair or fail it.
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
//! Linking: see `ds4tp-sys` (pkg-config, `DS4TP_LIB_DIR`, the `static`
//! feature). The loaded library must have this crate's major version
//! ([`check_version`]; [`Pair::new`] checks it). Builds with Rust 1.63
//! (Debian 12) and no crates from any registry.
#![deny(missing_docs)]

pub use ds4tp_sys as sys;

mod collectives;
mod control;
mod group;
mod half;
mod integration;
mod options;
mod pair;
mod worker;

pub use collectives::*;
pub use control::*;
pub use group::*;
pub use half::*;
pub use integration::*;
pub use options::*;
pub use pair::*;
pub use worker::*;

use std::ffi::CStr;
use std::fmt;
use std::os::raw::{c_char, c_int};

pub use sys::ds4tp_slab_layout as SlabLayout;
/// Counters and histograms of a pair (`Pair::stats`), `ds4tp_stats`.
pub use sys::ds4tp_stats as Stats;
/// One latency histogram of [`Stats`].
pub use sys::ds4tp_stats_hist as StatsHist;
pub use sys::{
    DS4TP_BATCH_GATES_PER_LAYER as BATCH_GATES_PER_LAYER, DS4TP_BATCH_MAX_ROWS as BATCH_MAX_ROWS,
    DS4TP_ENGINE_BLOB_MAX as ENGINE_BLOB_MAX, DS4TP_GATES_PER_LAYER as GATES_PER_LAYER,
    DS4TP_GATE_ATTN as GATE_ATTN, DS4TP_GATE_FFN as GATE_FFN, DS4TP_GATE_MASK_WORDS as GATE_MASK_WORDS,
    DS4TP_GATE_POISON as GATE_POISON,
};

// ---- status codes and errors -------------------------------------------

macro_rules! statuses {
    ($($name:ident = $value:expr, $what:expr;)*) => {
        /// DS4TP_* status codes; the numbers are pinned by the C header.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum Status { $(#[doc = $what] $name = $value),* }

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

// The header's DS4TP_STATUS_MAP: name, number, message.
statuses! {
    OK = 0, "Success.";
    EINVAL = -1, "Invalid argument.";
    ETIMEDOUT = -2, "Timed out.";
    EPEERCLOSED = -3, "Peer closed the connection.";
    EIDENTITY = -4, "Engine identity mismatch.";
    EDESYNC = -5, "Ranks out of lockstep.";
    EPROTO = -6, "Protocol error.";
    EAUTH = -7, "Authentication failed.";
    EIO = -8, "I/O error.";
    EUNSUPPORTED = -9, "Not supported.";
    ECANCELLED = -10, "Cancelled.";
    EFAILED = -11, "Handle failed earlier.";
    EVERSION = -12, "Protocol (or library major) version mismatch.";
    ESTATE = -13, "Call not valid in this state.";
    ENOMEM = -14, "Out of memory.";
    EDIVERGED = -15, "Lockstep state diverged.";
    EREMOTE = -16, "Peer reported a failure.";
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
    pub(crate) fn last(code: i32) -> Error {
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

/// What every fallible call returns.
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn check(rc: c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::last(rc))
    }
}

pub(crate) fn static_str(p: *const c_char) -> &'static str {
    if p.is_null() {
        return "";
    }
    // Static strings of the library (names, versions).
    unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("?")
}

pub(crate) fn owned_str(p: *const c_char) -> String {
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
/// Checks that the loaded library has the major version this crate was
/// written for (same major version = same ABI; ds4tp.h). [`Pair::new`]
/// calls it; call it yourself to fail early. The error (EVERSION) names
/// both versions.
pub fn check_version() -> Result<()> {
    let loaded = version();
    if loaded >> 16 == sys::DS4TP_VERSION_MAJOR {
        return Ok(());
    }
    Err(Error::new(
        Status::EVERSION as i32,
        format!(
            "the loaded libds4tp is {} (major {}) but this crate needs major {} ({}.{}.{}): \
             install a matching libds4tp or point DS4TP_LIB_DIR / PKG_CONFIG_PATH at one",
            version_string(),
            loaded >> 16,
            sys::DS4TP_VERSION_MAJOR,
            sys::DS4TP_VERSION_MAJOR,
            sys::DS4TP_VERSION_MINOR,
            sys::DS4TP_VERSION_PATCH
        ),
    ))
}
/// Message of the last failed call made by this thread ("" if none).
pub fn last_error() -> String {
    owned_str(unsafe { sys::ds4tp_last_error() })
}

/// ds4tp_role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Role {
    /// Not set: ds4tp_new refuses it.
    None = 0,
    /// Rank 0: listens, drives the lockstep.
    Leader = 1,
    /// Rank 1: dials the leader, mirrors it.
    Worker = 2,
}

/// ds4tp_transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Transport {
    /// The best both ranks offer (shm on one host, else rdma, else tcp).
    Auto = 0,
    /// TCP over the data connection.
    Tcp = 1,
    /// Shared memory (both ranks on one host).
    Shm = 2,
    /// RDMA verbs (libibverbs loaded at run time).
    Rdma = 3,
}

impl Transport {
    pub(crate) fn from_code(code: i32) -> Transport {
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
    /// The transport `Auto` would negotiate with a peer that offers what
    /// this host offers, on this host (`same_host`) or another: the
    /// library's own rule. After connecting, `Pair::transport` says what
    /// was chosen. No network I/O.
    pub fn auto_choice(same_host: bool) -> Transport {
        Transport::from_code(unsafe { sys::ds4tp_transport_auto(same_host as c_int) })
    }
}

/// ds4tp_log_level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(i32)]
pub enum LogLevel {
    /// Failures.
    Error = 0,
    /// Something an operator should look at (e.g. listening beyond loopback without a key).
    Warn = 1,
    /// Bring-up progress (the default threshold).
    Info = 2,
    /// Details of every step.
    Debug = 3,
}
