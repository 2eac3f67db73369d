//! Options and identity: the C structs as Rust values, and their C views.
//!
//! `ds4tp_options` is mirrored field for field (`Options` and `to_raw`
//! below, `sys::ds4tp_options`): a new header field is one line in each.

use crate::{check, owned_str, sys, Error, Result, SlabLayout, Status, Transport, GATE_MASK_WORDS};
use crate::{LogLevel, Role};
use std::ffi::CString;
use std::fmt;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;


/// A log sink: (level, message). Called on the thread making the ds4tp
/// call, never inside a gate.
pub type LogFn = dyn Fn(i32, &str) + Send + Sync;

/// ds4tp_options as Rust values. `Options::default()` takes the library's
/// defaults (ds4tp_options_init); set the fields you need.
#[derive(Clone)]
pub struct Options {
    /// Leader or worker; required.
    pub role: Role,
    /// Requested transport (default Auto: the best both ranks offer).
    pub transport: Transport,
    /// Leader: address to listen on (default "127.0.0.1").
    pub listen_host: String,
    /// Leader: port to listen on; 0 picks a free one (see `Handle::listen_port`).
    pub listen_port: i32,
    /// Worker: the leader's address (default "127.0.0.1").
    pub leader_host: String,
    /// Worker: the leader's port.
    pub leader_port: i32,
    /// Whole bring-up deadline (default 60000).
    pub connect_timeout_ms: i32,
    /// One connection's hello (default 2000).
    pub hello_timeout_ms: i32,
    /// A gate without progress fails after this (default 750).
    pub gate_timeout_ms: i32,
    /// Waiting for the peer to reach a big gate (default 10000).
    pub big_gate_timeout_ms: i32,
    /// Control replies (default 30000).
    pub frame_timeout_ms: i32,
    /// Busy-poll this long before blocking in the kernel; 0 or `SPIN_NEVER` always blocks;
    /// `SPIN_ALWAYS` spins without limit while the peer is alive; `SPIN_ADAPTIVE` (-1, the
    /// default) learns the spin per pair from how late the peer comes, at most 1000.
    pub spin_us: i32,
    /// None: the library's default sink (stderr).
    pub log: Option<Arc<LogFn>>,
    /// Least severe level passed to the sink (default Info).
    pub log_level: LogLevel,
    /// Largest control frame payload a peer may send (default 64 MiB).
    pub max_frame_bytes: u32,
    /// RDMA device name (None: the first with an active port).
    pub rdma_device: Option<String>,
    /// RDMA port number (default 1).
    pub rdma_port: i32,
    /// RDMA GID index (-1: pick, preferring RoCE v2).
    pub rdma_gid_index: i32,
    /// Pre-shared key (None: DS4TP_PSK / DS4TP_PSK_FILE or no auth).
    pub psk: Option<Vec<u8>>,
    /// Pre-shared key file (mode 0600 or less, this user's or root's).
    pub psk_file: Option<String>,
    /// A peer whose heartbeats stop this long fails every wait with a
    /// timeout naming the silence (default 1000, 200..600000).
    pub peer_silence_ms: i32,
    /// A live peer may reach a gate or answer a control call this late
    /// (default 300000; `ARRIVAL_UNLIMITED`: as long as it stays alive).
    pub peer_arrival_timeout_ms: i32,
    /// A standby tcp link beside an rdma or shm transport or tcp rails,
    /// taken when they fail mid-gate (default true); an rdma pair that
    /// loses only a rail goes on over rdma without it.
    pub failover: bool,
    /// The leader's IPv4 addresses of more tcp links a tcp pair stripes
    /// its big gates over, the same list on both ranks (None: none).
    pub rails: Option<String>,
    /// This rank's ports (`device[:port[:gid_index]]`) of more rdma links
    /// an rdma pair stripes its big gates over; both ranks list as many,
    /// rail k of each joined by one cable (None: none).
    pub rdma_rails: Option<String>,
}

/// `peer_arrival_timeout_ms`: no limit while the peer is alive.
pub const ARRIVAL_UNLIMITED: i32 = -1;
/// `spin_us` of `Options` and `GateServiceOptions`: the adaptive wait policy (the default).
pub const SPIN_ADAPTIVE: i32 = -1;
/// `spin_us` of `Options` and `GroupOptions`: spin without limit while the peer is alive.
pub const SPIN_ALWAYS: i32 = -2;
/// `spin_us` of `Options` and `GroupOptions`: never spin or yield, sleep at once.
pub const SPIN_NEVER: i32 = -3;

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
            peer_silence_ms: c.peer_silence_ms,
            peer_arrival_timeout_ms: c.peer_arrival_timeout_ms,
            failover: c.failover != 0,
            rails: None,
            rdma_rails: None,
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
pub(crate) struct RawOptions {
    pub(crate) raw: sys::ds4tp_options,
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
    pub(crate) fn to_raw(&self) -> Result<RawOptions> {
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
        c.peer_silence_ms = self.peer_silence_ms;
        c.peer_arrival_timeout_ms = self.peer_arrival_timeout_ms;
        c.failover = i32::from(self.failover);
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
        if let Some(list) = &self.rails {
            c.rails = keep(list, "rails")?;
        }
        if let Some(list) = &self.rdma_rails {
            c.rdma_rails = keep(list, "rdma_rails")?;
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
    /// Model file size or another content measure.
    pub model_bytes: u64,
    /// The engine's model variant.
    pub model_id: u32,
    /// Layers (two gates each: attention and FFN).
    pub n_layer: u32,
    /// Embedding width: gate vectors are n_embd f32.
    pub n_embd: u32,
    /// Vocabulary size.
    pub n_vocab: u32,
    /// Weight quantisation bits.
    pub quant_bits: u32,
    /// Context size; not compared (the peer's is `Handle::peer_ctx_size`).
    pub ctx_size: u32,
    /// Decode gate schedule: first slot (with gates_per_token > 0).
    pub gate_slot_start: u32,
    /// Decode gate schedule: slot step (with gates_per_token > 0).
    pub gate_slot_step: u32,
    /// Decode gate schedule: gates per token (0: every slot in order).
    pub gates_per_token: u32,
    /// Decode gate schedule: the slots in firing order, when nonempty.
    pub gate_slot_mask: [u64; GATE_MASK_WORDS],
    /// Engine feature bits both ranks must share (arithmetic, layouts).
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

pub(crate) fn empty_layout() -> SlabLayout {
    SlabLayout { size: std::mem::size_of::<SlabLayout>() as u32, ..SlabLayout::default() }
}
