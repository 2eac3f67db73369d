//! The group collectives beside all-reduce, all-gather, broadcast and
//! barrier, and [`ReduceOp`]. Counts are elements of the slices' type;
//! every size is checked against the slices before the C call (which
//! trusts them), and a mismatch returns `EINVAL` naming the argument
//! before any rank waits.

use crate::{sys, Element, Error, Group, Plain, Result, Status};
use std::mem::size_of;
use std::os::raw::{c_int, c_void};
use std::ptr;

/// How a reduction combines the ranks' elements (`ds4tp_reduce_op`), in
/// rank order: f16 and bf16 sums and products accumulate in f32 and round
/// once, integers wrap, `Max` and `Min` return one of the operands (a NaN
/// operand wins).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ReduceOp {
    /// The sum (the default).
    #[default]
    Sum = sys::DS4TP_OP_SUM,
    /// The largest.
    Max = sys::DS4TP_OP_MAX,
    /// The smallest.
    Min = sys::DS4TP_OP_MIN,
    /// The product.
    Prod = sys::DS4TP_OP_PROD,
}

fn invalid(message: String) -> Error {
    Error::new(Status::EINVAL as i32, message)
}

// `got` must be `want`, else EINVAL "<what> <got> <how>, <want> needed".
fn need(got: usize, want: usize, what: &str, how: &str) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(invalid(format!("{} {} elements; {} = {} needed", what, got, how, want)))
    }
}

fn bytes<T>(counts: &[usize]) -> Vec<u64> {
    counts.iter().map(|&c| (c * size_of::<T>()) as u64).collect()
}

impl Group {
    fn root(&self, call: &str, root: usize) -> Result<c_int> {
        if root < self.size() {
            Ok(root as c_int)
        } else {
            Err(invalid(format!("{}: root {} is outside the group's ranks 0..{}", call, root, self.size() - 1)))
        }
    }

    fn per_rank(&self, what: &str, values: &[usize]) -> Result<()> {
        if values.len() == self.size() {
            Ok(())
        } else {
            Err(invalid(format!("{} has {} entries; one per rank: {} needed", what, values.len(), self.size())))
        }
    }

    /// Combines `v` over the ranks by `op`, in place; identical bits on
    /// every rank. Every rank passes the same length and op (else
    /// `EDESYNC` naming both calls).
    pub fn all_reduce_op<T: Element>(&mut self, v: &mut [T], op: ReduceOp) -> Result<()> {
        let rc = unsafe {
            sys::ds4tp_group_all_reduce(self.g, v.as_mut_ptr() as *mut c_void, v.len() as u64, T::DTYPE, op as c_int)
        };
        self.check(rc)
    }

    /// `out` (count elements) gets this rank's segment of the reduction of
    /// every rank's `input` (size() x count elements): `out` = op over ranks
    /// r of `input_r[rank() * count..][..count]`.
    pub fn reduce_scatter<T: Element>(&mut self, input: &[T], out: &mut [T], op: ReduceOp) -> Result<()> {
        need(input.len(), out.len() * self.size(), "reduce_scatter: input has", "size() x out.len()")?;
        let rc = unsafe {
            sys::ds4tp_group_reduce_scatter(
                self.g,
                input.as_ptr() as *const c_void,
                out.as_mut_ptr() as *mut c_void,
                out.len() as u64,
                T::DTYPE,
                op as c_int,
            )
        };
        self.check(rc)
    }

    /// In place: `buf` holds size() segments, and this rank's becomes its
    /// segment of the reduction; returned (the others are left as they were).
    pub fn reduce_scatter_in_place<'a, T: Element>(&mut self, buf: &'a mut [T], op: ReduceOp) -> Result<&'a mut [T]> {
        let n = self.size();
        if buf.len() % n != 0 {
            return Err(invalid(format!(
                "reduce_scatter_in_place: buf has {} elements, not size() = {} equal segments",
                buf.len(),
                n
            )));
        }
        let count = buf.len() / n;
        let at = self.rank() * count;
        let base = buf.as_mut_ptr();
        // SAFETY: `at + count <= buf.len()`; the C call reads all of buf and
        // writes the segment, which the header allows to overlap its input.
        let rc = unsafe {
            sys::ds4tp_group_reduce_scatter(
                self.g,
                base as *const c_void,
                base.add(at) as *mut c_void,
                count as u64,
                T::DTYPE,
                op as c_int,
            )
        };
        self.check(rc)?;
        Ok(&mut buf[at..at + count])
    }

    /// The root's `buf` becomes the reduction by `op` of every rank's, in
    /// place; the other ranks' are left as they were.
    pub fn reduce<T: Element>(&mut self, buf: &mut [T], root: usize, op: ReduceOp) -> Result<()> {
        let root = self.root("reduce", root)?;
        let rc = unsafe {
            sys::ds4tp_group_reduce(self.g, buf.as_mut_ptr() as *mut c_void, buf.len() as u64, T::DTYPE, op as c_int, root)
        };
        self.check(rc)
    }

    /// At `root`, `out` (size() x input.len() elements) gets every rank's
    /// `input` in rank order; the other ranks pass `None` (an `out` there
    /// is not used). Every rank gives the same number of elements.
    pub fn gather<T: Plain>(&mut self, input: &[T], out: Option<&mut [T]>, root: usize) -> Result<()> {
        let r = self.root("gather", root)?;
        let mut dst: *mut c_void = ptr::null_mut();
        if root == self.rank() {
            let out = out.ok_or_else(|| {
                invalid(format!("gather: out is None at the root (rank {}); it takes size() x {} elements", root, input.len()))
            })?;
            need(out.len(), input.len() * self.size(), "gather: out has", "size() x input.len()")?;
            dst = out.as_mut_ptr() as *mut c_void;
        }
        let rc = unsafe {
            sys::ds4tp_group_gather(self.g, input.as_ptr() as *const c_void, dst, std::mem::size_of_val(input) as u64, r)
        };
        self.check(rc)
    }

    /// Every rank's `out` gets its part of the root's `input` (size() x
    /// out.len() elements): rank k's is `input[k * out.len()..][..out.len()]`.
    /// The other ranks pass `None` (an `input` there is not used).
    pub fn scatter<T: Plain>(&mut self, input: Option<&[T]>, out: &mut [T], root: usize) -> Result<()> {
        let r = self.root("scatter", root)?;
        let mut src: *const c_void = ptr::null();
        if root == self.rank() {
            let input = input.ok_or_else(|| {
                invalid(format!("scatter: input is None at the root (rank {}); it holds size() x {} elements", root, out.len()))
            })?;
            need(input.len(), out.len() * self.size(), "scatter: input has", "size() x out.len()")?;
            src = input.as_ptr() as *const c_void;
        }
        let rc = unsafe {
            sys::ds4tp_group_scatter(self.g, src, out.as_mut_ptr() as *mut c_void, std::mem::size_of_val(out) as u64, r)
        };
        self.check(rc)
    }

    /// All-gather of uneven parts: rank r gives `counts[r]` elements (0
    /// allowed; the same `counts` on every rank, `input.len()` this rank's);
    /// `out` (their sum) gets the parts packed in rank order.
    pub fn all_gather_v<T: Plain>(&mut self, input: &[T], out: &mut [T], counts: &[usize]) -> Result<()> {
        self.per_rank("all_gather_v: counts", counts)?;
        need(input.len(), counts[self.rank()], "all_gather_v: input has", "counts[rank()]")?;
        let total = counts.iter().fold(0usize, |a, &c| a.saturating_add(c));
        need(out.len(), total, "all_gather_v: out has", "the sum of counts")?;
        let b = bytes::<T>(counts);
        let rc = unsafe {
            sys::ds4tp_group_all_gather_v(self.g, input.as_ptr() as *const c_void, out.as_mut_ptr() as *mut c_void, b.as_ptr())
        };
        self.check(rc)
    }

    /// All-gather of rows (a batch of prompt rows in one call): `input`
    /// holds `rows` rows of this rank's slice (input.len() / rows elements
    /// each); `out` (size() x input.len()) holds `rows` full rows, rank r's
    /// slice of row i at `i * size() * slice + r * slice`.
    pub fn all_gather_rows<T: Plain>(&mut self, input: &[T], out: &mut [T], rows: usize) -> Result<()> {
        if (rows == 0 && !input.is_empty()) || (rows != 0 && input.len() % rows != 0) {
            return Err(invalid(format!("all_gather_rows: input has {} elements, not {} rows of one length", input.len(), rows)));
        }
        need(out.len(), input.len() * self.size(), "all_gather_rows: out has", "size() x input.len()")?;
        let row_bytes = input.len().checked_div(rows).map_or(0, |k| k * size_of::<T>());
        let rc = unsafe {
            sys::ds4tp_group_all_gather_rows(
                self.g,
                input.as_ptr() as *const c_void,
                out.as_mut_ptr() as *mut c_void,
                rows as u64,
                row_bytes as u64,
            )
        };
        self.check(rc)
    }

    /// All-to-all with per-peer counts (MoE dispatch and combine), one entry
    /// per rank each: `send_counts[r]` elements of `input` from
    /// `send_offsets[r]` go to rank r, and rank r's land in `out` from
    /// `recv_offsets[r]`, `recv_counts[r]` of them (what rank r sends, else
    /// `EDESYNC` naming both). `None` offsets: packed (the counts' running
    /// sums). Flat groups only (`EUNSUPPORTED` on a tiered one).
    pub fn all_to_all_v<T: Plain>(
        &mut self,
        input: &[T],
        send_counts: &[usize],
        send_offsets: Option<&[usize]>,
        out: &mut [T],
        recv_counts: &[usize],
        recv_offsets: Option<&[usize]>,
    ) -> Result<()> {
        let so = self.offsets("send", send_counts, send_offsets, input.len(), size_of::<T>())?;
        let ro = self.offsets("recv", recv_counts, recv_offsets, out.len(), size_of::<T>())?;
        let (sb, rb) = (bytes::<T>(send_counts), bytes::<T>(recv_counts));
        let rc = unsafe {
            sys::ds4tp_group_all_to_all_v(
                self.g,
                input.as_ptr() as *const c_void,
                sb.as_ptr(),
                so.as_ptr(),
                out.as_mut_ptr() as *mut c_void,
                rb.as_ptr(),
                ro.as_ptr(),
            )
        };
        self.check(rc)
    }

    // all_to_all_v's `side` offsets in bytes (packed when not given), every
    // part inside the slice of `have` elements of `esize` bytes.
    fn offsets(&self, side: &str, counts: &[usize], given: Option<&[usize]>, have: usize, esize: usize) -> Result<Vec<u64>> {
        self.per_rank(&format!("all_to_all_v: {}_counts", side), counts)?;
        if let Some(g) = given {
            self.per_rank(&format!("all_to_all_v: {}_offsets", side), g)?;
        }
        let mut out = Vec::with_capacity(counts.len());
        let mut at = 0usize;
        for (r, &count) in counts.iter().enumerate() {
            let off = given.map_or(at, |g| g[r]);
            at = off.saturating_add(count);
            if count != 0 && at > have {
                return Err(invalid(format!(
                    "all_to_all_v: {s}_offsets[{r}] + {s}_counts[{r}] = {} is past the slice's {} elements",
                    at,
                    have,
                    s = side,
                    r = r
                )));
            }
            out.push(off.saturating_mul(esize) as u64); // a 0-count part's offset is not used
        }
        Ok(out)
    }
}
