//! Groups of N ranks: [`Group`] owns a `ds4tp_group` and frees it on drop;
//! [`Group::local`] gives one handle per thread of this process (shared
//! memory, no sockets), [`Group::new`] + [`Group::connect`] one rank per
//! process. Reductions combine in rank order on every rank, so every rank
//! gets identical bits; f16 and bf16 data travel as their `u16` bits
//! ([`F16`], [`BF16`]). The collectives beside all-reduce, all-gather,
//! broadcast and barrier are in collectives.rs.

use crate::{owned_str, sys, Error, Identity, Plain, Result, Stats, Status, Transport, BF16, F16};
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr;

/// Element types the reductions take (`ds4tp_dtype`): `f32`, `f64`, `i32`,
/// `i64`, `u8`, [`F16`], [`BF16`]. The calls that only move data
/// ([`Group::gather`] and the like) take any [`Plain`] type. Sealed (through
/// [`Plain`]): the library has no others.
pub trait Element: Plain {
    /// The DS4TP_DTYPE_* code.
    const DTYPE: c_int;
}

macro_rules! elements {
    ($($t:ty => $dtype:ident),*) => {$(
        impl Element for $t {
            const DTYPE: c_int = sys::$dtype;
        }
    )*};
}
elements!(f32 => DS4TP_DTYPE_F32, F16 => DS4TP_DTYPE_F16, BF16 => DS4TP_DTYPE_BF16,
          f64 => DS4TP_DTYPE_F64, i32 => DS4TP_DTYPE_I32, i64 => DS4TP_DTYPE_I64,
          u8 => DS4TP_DTYPE_U8);

/// ds4tp_group_options as Rust values; `None` = the C default (the
/// launcher's environment for rank, size and rendezvous).
#[derive(Clone, Debug, Default)]
pub struct GroupOptions {
    /// This rank.
    pub rank: Option<i32>,
    /// Ranks in the group (2..16).
    pub size: Option<i32>,
    /// Rank 0's rendezvous host.
    pub host: Option<String>,
    /// Rank 0's rendezvous port (0 on rank 0 picks a free one).
    pub port: Option<i32>,
    /// Auto (shm when all ranks share a host), Tcp or Shm.
    pub transport: Option<Transport>,
    /// Whole bring-up, ms.
    pub connect_timeout_ms: Option<i32>,
    /// One collective waiting on a peer, ms.
    pub op_timeout_ms: Option<i32>,
    /// Largest bytes a rank contributes per step.
    pub chunk_bytes: Option<u32>,
    /// Pre-shared key (>= 16 bytes).
    pub psk: Option<Vec<u8>>,
    /// Busy-poll before yielding, us: `SPIN_ADAPTIVE` (-1, the default) learns it, 0 never
    /// spins, `SPIN_ALWAYS` spins without limit, `SPIN_NEVER` neither spins nor yields (as in
    /// `Options`); DS4TP_GROUP_SPIN_US overrides.
    pub spin_us: Option<i32>,
    /// tcp: a rank not heard this long fails the group, ms (200..600000).
    pub peer_silence_ms: Option<i32>,
    /// Yield phase after the spin, us (-1 default: 200; 0 none).
    pub yield_us: Option<i32>,
}

impl GroupOptions {
    // The C struct, pointing into `self` and `host` (keep both alive).
    fn raw(&self, host: &Option<CString>) -> sys::ds4tp_group_options {
        let mut o = unsafe {
            let mut o = std::mem::zeroed::<sys::ds4tp_group_options>();
            sys::ds4tp_group_options_init(&mut o);
            o
        };
        if let Some(v) = self.rank {
            o.rank = v;
        }
        if let Some(v) = self.size {
            o.group_size = v;
        }
        if let Some(h) = host {
            o.rendezvous_host = h.as_ptr();
        }
        if let Some(v) = self.port {
            o.rendezvous_port = v;
        }
        if let Some(t) = self.transport {
            o.transport = t as i32;
        }
        if let Some(v) = self.connect_timeout_ms {
            o.connect_timeout_ms = v;
        }
        if let Some(v) = self.op_timeout_ms {
            o.op_timeout_ms = v;
        }
        if let Some(v) = self.chunk_bytes {
            o.chunk_bytes = v;
        }
        if let Some(k) = &self.psk {
            o.psk = k.as_ptr() as *const c_void;
            o.psk_bytes = k.len() as u32;
        }
        if let Some(v) = self.spin_us {
            o.spin_us = v;
        }
        if let Some(v) = self.peer_silence_ms {
            o.peer_silence_ms = v;
        }
        if let Some(v) = self.yield_us {
            o.yield_us = v;
        }
        o
    }

    fn host_cstring(&self) -> Result<Option<CString>> {
        match &self.host {
            None => Ok(None),
            Some(h) => CString::new(h.as_str())
                .map(Some)
                .map_err(|_| Error::new(Status::EINVAL as i32, "rendezvous host contains a NUL byte")),
        }
    }
}

/// One rank's ds4tp_group, freed on drop (peers still in a call see this
/// rank leave). `Send`, not `Sync`: one thread uses a handle at a time.
pub struct Group {
    pub(crate) g: *mut sys::ds4tp_group,
}

unsafe impl Send for Group {}

impl Drop for Group {
    fn drop(&mut self) {
        unsafe { sys::ds4tp_group_free(self.g) }
    }
}

impl Group {
    /// ds4tp_group_new: this rank's handle (rank 0 binds its listener now).
    /// `options` fields left `None` take the C defaults: rank, size and
    /// rendezvous from the launcher's `RANK`, `WORLD_SIZE`, `MASTER_ADDR`
    /// and `MASTER_PORT` (or Open MPI's and Slurm's variables); `identity`
    /// may be `None` (no model check). One process per rank, e.g.
    /// `RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29600 ./rank`
    /// beside the same with `RANK=1`:
    ///
    /// ```no_run
    /// use ds4tp::{Group, GroupOptions, F16};
    /// let mut g = Group::new(&GroupOptions::default(), None)?;
    /// g.connect()?; // rendezvous at rank 0, then the data links
    /// let mut hidden = vec![F16::from_f32(g.rank() as f32 + 1.0); 2560];
    /// g.all_reduce(&mut hidden)?; // in place, identical bits on every rank
    /// println!("rank {} of {} over {:?}: {}", g.rank(), g.size(), g.transport(), hidden[0]);
    /// # Ok::<(), ds4tp::Error>(())
    /// ```
    pub fn new(options: &GroupOptions, identity: Option<&Identity>) -> Result<Group> {
        crate::check_version()?;
        let host = options.host_cstring()?;
        let raw = options.raw(&host);
        let id = identity.map(|i| i.to_raw());
        let mut g = ptr::null_mut();
        let rc = unsafe {
            sys::ds4tp_group_new(&mut g, &raw, id.as_ref().map_or(ptr::null(), |i| i as *const _))
        };
        crate::check(rc)?;
        Ok(Group { g })
    }

    /// ds4tp_group_new_local: `n` (2..16) connected handles, one per thread
    /// of this process (shared memory, no sockets), in rank order.
    /// `options`: `None` for the defaults, or a [`GroupOptions`] whose rank,
    /// size and rendezvous fields are ignored (timeouts, `chunk_bytes`,
    /// `spin_us` apply); `identity`: `None`, or an [`Identity`] every
    /// handle gets. Each handle is `Send`: move it into its thread.
    ///
    /// ```
    /// use ds4tp::{Group, BF16};
    /// let groups = Group::local(3, None, None)?;
    /// let ranks: Vec<_> = groups
    ///     .into_iter()
    ///     .map(|mut g| {
    ///         std::thread::spawn(move || {
    ///             let mut v = vec![BF16::from_f32(g.rank() as f32); 4];
    ///             g.all_reduce(&mut v).map(|_| v)
    ///         })
    ///     })
    ///     .collect();
    /// for r in ranks {
    ///     let v = r.join().unwrap()?;
    ///     assert_eq!(v[0].to_f32(), 0.0 + 1.0 + 2.0);
    /// }
    /// # Ok::<(), ds4tp::Error>(())
    /// ```
    pub fn local(n: usize, options: Option<&GroupOptions>, identity: Option<&Identity>) -> Result<Vec<Group>> {
        crate::check_version()?;
        let defaults = GroupOptions::default();
        let o = options.unwrap_or(&defaults);
        let host = o.host_cstring()?;
        let raw = o.raw(&host);
        let id = identity.map(|i| i.to_raw());
        let mut hs = vec![ptr::null_mut(); n];
        let rc = unsafe {
            sys::ds4tp_group_new_local(
                hs.as_mut_ptr(),
                n as c_int,
                &raw,
                id.as_ref().map_or(ptr::null(), |i| i as *const _),
            )
        };
        crate::check(rc)?;
        Ok(hs.into_iter().map(|g| Group { g }).collect())
    }

    pub(crate) fn check(&self, rc: c_int) -> Result<()> {
        if rc == 0 {
            Ok(())
        } else {
            // The handle's own message: another thread cannot overwrite it.
            Err(Error::new(rc, self.errmsg()))
        }
    }

    /// Blocking bring-up: rendezvous at rank 0, roster, data links.
    pub fn connect(&mut self) -> Result<()> {
        self.check(unsafe { sys::ds4tp_group_connect(self.g) })
    }

    /// Sums `v` over the ranks, in place ([`Group::all_reduce_op`] for max,
    /// min and product).
    pub fn all_reduce<T: Element>(&mut self, v: &mut [T]) -> Result<()> {
        let rc = unsafe {
            sys::ds4tp_group_all_reduce(self.g, v.as_mut_ptr() as *mut c_void, v.len() as u64, T::DTYPE, sys::DS4TP_OP_SUM)
        };
        self.check(rc)
    }

    /// The group buffer (`chunk_bytes`, 64-byte aligned) as elements of
    /// `T`. Over shm, once connected, it lies in the shared segment, and
    /// [`Group::all_reduce_buffer`] sums a vector at its start with no copy
    /// in; take it after [`Group::connect`] (before, it is a heap buffer).
    pub fn buffer<T: Element>(&mut self) -> Result<&mut [T]> {
        let (p, bytes) = self.raw_buffer()?;
        // SAFETY: the library's buffer of `bytes`, 64-byte aligned, lives
        // until ds4tp_group_free (drop), and the borrow of self keeps the
        // handle from every other call meanwhile. T is plain data (Plain).
        Ok(unsafe { std::slice::from_raw_parts_mut(p as *mut T, bytes / std::mem::size_of::<T>()) })
    }

    /// Sums the first `count` elements of the group buffer over the ranks,
    /// in place (the no-copy form of [`Group::all_reduce`]).
    pub fn all_reduce_buffer<T: Element>(&mut self, count: usize) -> Result<()> {
        let (p, bytes) = self.raw_buffer()?;
        if count > bytes / std::mem::size_of::<T>() {
            return Err(Error::new(
                Status::EINVAL as i32,
                format!("{} elements do not fit the {}-byte group buffer", count, bytes),
            ));
        }
        self.check(unsafe { sys::ds4tp_group_all_reduce(self.g, p, count as u64, T::DTYPE, sys::DS4TP_OP_SUM) })
    }

    fn raw_buffer(&mut self) -> Result<(*mut c_void, usize)> {
        let mut p: *mut c_void = ptr::null_mut();
        let mut bytes: u64 = 0;
        self.check(unsafe { sys::ds4tp_group_buffer(self.g, &mut p, &mut bytes) })?;
        Ok((p, bytes as usize))
    }

    /// `out` (size() * input.len() bytes) gets every rank's `input`, in rank order.
    pub fn all_gather(&mut self, input: &[u8], out: &mut [u8]) -> Result<()> {
        if out.len() != input.len() * self.size() {
            return Err(Error::new(
                Status::EINVAL as i32,
                format!("all_gather: out has {} bytes, {} x {} needed", out.len(), self.size(), input.len()),
            ));
        }
        let rc = unsafe {
            sys::ds4tp_group_all_gather(self.g, input.as_ptr() as *const c_void, out.as_mut_ptr() as *mut c_void, input.len() as u64)
        };
        self.check(rc)
    }

    /// Every rank's `buf` gets root's bytes.
    pub fn broadcast(&mut self, buf: &mut [u8], root: usize) -> Result<()> {
        let rc = unsafe { sys::ds4tp_group_broadcast(self.g, buf.as_mut_ptr() as *mut c_void, buf.len() as u64, root as c_int) };
        self.check(rc)
    }

    /// Returns once every rank arrived.
    pub fn barrier(&mut self) -> Result<()> {
        self.check(unsafe { sys::ds4tp_group_barrier(self.g) })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        unsafe { sys::ds4tp_group_rank(self.g) as usize }
    }
    /// Ranks in the group.
    pub fn size(&self) -> usize {
        unsafe { sys::ds4tp_group_size(self.g) as usize }
    }
    /// Active transport after connect (Auto before).
    pub fn transport(&self) -> Transport {
        Transport::from_code(unsafe { sys::ds4tp_group_transport(self.g) })
    }
    /// Rank 0's rendezvous port.
    pub fn rendezvous_port(&self) -> i32 {
        unsafe { sys::ds4tp_group_rendezvous_port(self.g) }
    }
    /// The failure status once failed, else None.
    pub fn failed(&self) -> Option<Status> {
        let rc = unsafe { sys::ds4tp_group_failed(self.g) };
        if rc == 0 {
            None
        } else {
            Some(Status::from_code(rc).unwrap_or(Status::EFAILED))
        }
    }
    /// Message of the failure (or last error).
    pub fn errmsg(&self) -> String {
        owned_str(unsafe { sys::ds4tp_group_errmsg(self.g) })
    }
    /// The group's counters and histograms since creation or
    /// [`Group::stats_reset`] (all-reduce calls, bytes, latency).
    pub fn stats(&self) -> Result<Stats> {
        let mut st = Stats { size: std::mem::size_of::<Stats>() as u32, ..Default::default() };
        self.check(unsafe { sys::ds4tp_group_stats_read(self.g, &mut st) })?;
        Ok(st)
    }
    /// Writes the flight recorder (the last 256 calls, each rank's arrival) as text to
    /// `path` and a Chrome trace to `path`.json ("%r": the rank). Any thread.
    pub fn dump(&self, path: &str) -> Result<()> {
        let p = CString::new(path)
            .map_err(|_| Error::new(Status::EINVAL as i32, "dump path contains a NUL byte"))?;
        crate::check(unsafe { sys::ds4tp_group_dump(self.g, p.as_ptr()) })
    }
    /// Later [`Group::stats`] count from now.
    pub fn stats_reset(&mut self) -> Result<()> {
        self.check(unsafe { sys::ds4tp_group_stats_reset(self.g) })
    }
    /// The plan the group runs, in one line ("plan: 1 host x 4 ranks; shm within the host;
    /// all-reduce ..."), the same on every rank; after connect. Its words may change.
    pub fn plan(&self) -> Result<String> {
        self.text(|g, buf, cap, need| unsafe { sys::ds4tp_group_plan(g, buf, cap, need) })
    }
    /// Where `rank` sits after connect: (host index, place among the host's ranks, 0 being
    /// its leader, whether the group runs tiered: shm within a host, tcp between leaders).
    pub fn topology(&self, rank: usize) -> Result<(usize, usize, bool)> {
        let (mut host, mut local, mut tiered) = (0, 0, 0);
        self.check(unsafe {
            sys::ds4tp_group_topology(self.g, rank as c_int, &mut host, &mut local, &mut tiered)
        })?;
        Ok((host as usize, local as usize, tiered != 0))
    }
    /// The Prometheus text exposition of [`Group::stats`].
    pub fn prometheus(&self) -> Result<String> {
        self.text(|g, buf, cap, need| unsafe { sys::ds4tp_group_stats_prometheus(g, buf, cap, need) })
    }
    // A call that hands out text (buf, cap, *needed): asked once for the
    // length, then into a buffer of that size.
    fn text(
        &self,
        call: impl Fn(*const sys::ds4tp_group, *mut c_char, usize, *mut usize) -> c_int,
    ) -> Result<String> {
        let mut need = 0usize;
        call(self.g, ptr::null_mut(), 0, &mut need);
        let mut buf = vec![0u8; need + 1];
        self.check(call(self.g, buf.as_mut_ptr().cast(), buf.len(), &mut need))?;
        buf.truncate(need);
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }
    /// Fails the group here and on every rank.
    pub fn mark_failed(&mut self) {
        unsafe { sys::ds4tp_group_mark_failed(self.g) }
    }
}
