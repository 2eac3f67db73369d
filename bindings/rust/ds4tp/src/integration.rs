//! Engine integration types: staging hooks, the gate service's options and
//! state, and the element types slab bytes may be viewed as.

use crate::sys;
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};


/// Which gate a staging hook runs for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// A row gate: (layer, gate).
    Row {
        /// The layer.
        layer: u32,
        /// GATE_ATTN or GATE_FFN.
        gate: u32,
    },
    /// A batch gate: `rows` rows of batch gate `index`, vec_stride apart.
    Batch {
        /// The batch gate index (layer * 2 + gate).
        index: u32,
        /// Rows exchanged (1..BATCH_MAX_ROWS).
        rows: u32,
    },
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

pub(crate) unsafe extern "C" fn stage_before(
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

pub(crate) unsafe extern "C" fn stage_after(
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
    /// Not started, or stopped.
    Stopped,
    /// Running gates.
    Running,
    /// Stopped by a failure (the pair is failed).
    Failed,
}

/// ds4tp_gate_service_options; `default()` takes the library's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateServiceOptions {
    /// Busy-poll this long for a ready word (default `SPIN_ADAPTIVE`: learned, at most 1000).
    pub spin_us: i32,
    /// Then yield the CPU between polls this long (default 10000).
    pub yield_us: i32,
    /// Then sleep this long between polls (default 20).
    pub sleep_us: i32,
    /// How long `gate_service_stop` waits (0: the pair's gate_timeout_ms + 1000).
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

pub(crate) fn raw_service_options() -> sys::ds4tp_gate_service_options {
    let mut c = std::mem::MaybeUninit::<sys::ds4tp_gate_service_options>::zeroed();
    unsafe {
        sys::ds4tp_gate_service_options_init(c.as_mut_ptr());
        c.assume_init()
    }
}

/// Element types that any bit pattern makes valid, so slab and big-gate
/// bytes, and what another rank sends, can be viewed as them.
pub trait Plain: Copy + sealed::Sealed {}
mod sealed {
    pub trait Sealed {}
}
macro_rules! plain {
    ($($t:ty),*) => { $(impl sealed::Sealed for $t {} impl Plain for $t {})* };
}
plain!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, crate::F16, crate::BF16);
