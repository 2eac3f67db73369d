"""The collectives of a :class:`Group`, as a mixin: argument checks that
name what is wrong (TypeError for a wrong kind of argument, ValueError for
a wrong size or rank) before the C call, which may assume the sizes fit.

Reductions (all_reduce, reduce_scatter, reduce) take their element type
from the buffers (see :func:`infer_dtype`). The calls that move data
without combining it (gather, scatter, all_gather_v, all_gather_rows,
all_to_all_v) count in elements of their buffers: both buffers must hold
the same element type (raw bytes on both sides count bytes)."""

import operator
from ctypes import c_uint64
from typing import Any, List, Optional, Sequence, Union

from ._buffers import _buffer_address, _native, _view, describe_format
from ._dtypes import ITEM, Dtype, ReduceOp, as_op, infer_dtype
from ._loader import _lib


class _Arg:
    """A buffer as a C call takes it: address, bytes, and its element."""

    def __init__(self, obj: Any, writable: bool, call: str, what: str) -> None:
        view = _view(obj, f"{call} {what}")
        self.what = what
        self.fmt = _native(view.format) or view.format
        self.held = describe_format(view.format)
        self.itemsize = view.itemsize
        self.addr, self.nbytes, self._keep = _buffer_address(obj, writable, f"{call} {what}")

    @property
    def items(self) -> int:
        return self.nbytes // self.itemsize

    def overlaps(self, other: "_Arg") -> bool:
        return self.nbytes > 0 and other.nbytes > 0 and \
            self.addr < other.addr + other.nbytes and other.addr < self.addr + self.nbytes


def _same_element(a: _Arg, b: _Arg, call: str) -> None:
    if a.fmt != b.fmt or a.itemsize != b.itemsize:
        raise TypeError(f"{call}: {a.what} holds {a.held} but {b.what} holds {b.held}: counts "
                        f"are elements and a typed buffer is not reinterpreted; give both the "
                        f"same type (e.g. a.view(np.uint8) on both for bytes)")


def _index(value: Any, what: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, not {type(value).__name__}") from None


def _counts(values: Any, n: int, what: str) -> List[int]:
    """``values`` as n non-negative ints, or TypeError/ValueError naming them."""
    try:
        items = list(values)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of {n} ints, not "
                        f"{type(values).__name__}") from None
    out = [_index(v, f"{what}[{i}]") for i, v in enumerate(items)]
    if len(out) != n:
        raise ValueError(f"{what} has {len(out)} entries; the group has {n} ranks")
    bad = [i for i, v in enumerate(out) if v < 0]
    if bad:
        raise ValueError(f"{what}[{bad[0]}] is {out[bad[0]]}: counts and offsets are >= 0")
    return out


def _u64s(values: Sequence[int], scale: int) -> Any:
    return (c_uint64 * max(len(values), 1))(*[v * scale for v in values])


class Collectives:
    """Mixin of the collectives; the handle class (:class:`Group`) gives
    ``_live()`` (the C handle), ``_check(rc)`` (raises its message),
    ``size`` and ``rank``."""

    def _root(self, root: Any, call: str) -> int:
        r = _index(root, f"{call}: root")
        if not 0 <= r < self.size:
            raise ValueError(f"{call}: root={r} is outside the group's ranks 0..{self.size - 1}")
        return r

    def _reduced(self, a: Any, b: Any, dtype: Any, call: str) -> Dtype:
        """The element type of src ``a`` and out ``b``, which must agree."""
        ta = infer_dtype(a, dtype, "src")
        tb = infer_dtype(b, dtype, "out")
        if ta != tb:
            raise TypeError(f"{call}: src holds {describe_format(_view(a).format)} ({ta.name}) "
                            f"but out holds {describe_format(_view(b).format)} ({tb.name})")
        return ta

    def all_reduce(self, buf: Any, dtype: Optional[Union[Dtype, int]] = None,
                   op: Union[ReduceOp, int] = ReduceOp.SUM) -> Any:
        """Combines ``buf`` over the ranks by ``op`` (a :class:`ReduceOp`:
        SUM, MAX, MIN, PROD), in place; identical bits on every rank. The
        element type comes from the buffer's format: float32 -> F32, float16
        -> F16, float64 -> F64, int32 -> I32, int64 -> I64, uint8 -> U8.
        ``dtype`` is for buffers without one: raw bytes (bytearray, uint8,
        format 'B'/'b'/'c') take any dtype, and uint16 ('H') arrays hold the
        raw bits of ``Dtype.BF16`` or ``Dtype.F16``. A typed buffer whose
        format disagrees with ``dtype`` (float64 with F16, int32 with F32,
        ...) raises TypeError naming both; a read-only one TypeError, a
        non-contiguous one ValueError, each saying what to pass instead.
        Every rank must pass the same count, dtype and op (else
        :class:`Error` EDESYNC naming both calls). Returns ``buf``."""
        t, o = infer_dtype(buf, dtype), as_op(op)
        addr, nbytes, _keep = _buffer_address(buf, writable=True, what="all_reduce buffer")
        if nbytes % ITEM[t]:
            raise ValueError(f"buffer of {nbytes} bytes is not whole {t.name} elements")
        self._check(_lib().ds4tp_group_all_reduce(self._live(), addr, nbytes // ITEM[t],
                                                  int(t), int(o)))
        return buf

    def reduce_scatter(self, src: Any, out: Any, op: Union[ReduceOp, int] = ReduceOp.SUM,
                       dtype: Optional[Union[Dtype, int]] = None) -> Any:
        """``out`` (count elements, writable) gets this rank's segment of
        the reduction of every rank's ``src`` (size x count elements): out =
        op over ranks r of src_r[rank*count : (rank+1)*count]. Element types
        as :meth:`all_reduce` (src and out must hold the same one). In
        place: ``out`` may be exactly this rank's segment of ``src`` (e.g.
        ``src[rank*count:(rank+1)*count]``); any other overlap raises
        ValueError. Returns ``out``."""
        t, o = self._reduced(src, out, dtype, "reduce_scatter"), as_op(op)
        s = _Arg(src, False, "reduce_scatter", "src")
        d = _Arg(out, True, "reduce_scatter", "out")
        if d.nbytes % ITEM[t]:
            raise ValueError(f"reduce_scatter: out of {d.nbytes} bytes is not whole {t.name} "
                             f"elements")
        count = d.nbytes // ITEM[t]
        if s.nbytes != self.size * d.nbytes:
            raise ValueError(f"reduce_scatter: src has {s.nbytes // ITEM[t]} {t.name} elements; "
                             f"{self.size} ranks x {count} (out's count) needed")
        if d.overlaps(s) and d.addr != s.addr + self.rank * d.nbytes:
            raise ValueError(f"reduce_scatter: out overlaps src other than as this rank's "
                             f"segment (src[{self.rank * count}:{(self.rank + 1) * count}])")
        self._check(_lib().ds4tp_group_reduce_scatter(self._live(), s.addr, d.addr, count,
                                                      int(t), int(o)))
        return out

    def reduce(self, buf: Any, root: int, op: Union[ReduceOp, int] = ReduceOp.SUM,
               dtype: Optional[Union[Dtype, int]] = None) -> Any:
        """The root's ``buf`` becomes the reduction by ``op`` of every
        rank's ``buf``, in place; the other ranks' are left as they were.
        Element types as :meth:`all_reduce`. Returns ``buf``."""
        t, o = infer_dtype(buf, dtype), as_op(op)
        r = self._root(root, "reduce")
        addr, nbytes, _keep = _buffer_address(buf, writable=True, what="reduce buffer")
        if nbytes % ITEM[t]:
            raise ValueError(f"reduce: buffer of {nbytes} bytes is not whole {t.name} elements")
        self._check(_lib().ds4tp_group_reduce(self._live(), addr, nbytes // ITEM[t], int(t),
                                              int(o), r))
        return buf

    def gather(self, src: Any, out: Any, root: int) -> Any:
        """At ``root``, ``out`` (size x len(src) elements of src's type,
        writable) gets every rank's ``src`` in rank order; elsewhere ``out``
        is not used (pass None). Every rank gives the same number of
        elements. Returns ``out``."""
        r = self._root(root, "gather")
        s = _Arg(src, False, "gather", "src")
        addr = None
        if r == self.rank:
            if out is None:
                raise TypeError(f"gather: out is None at the root (rank {r}); it takes "
                                f"{self.size} x {s.items} elements")
            d = _Arg(out, True, "gather", "out")
            _same_element(s, d, "gather")
            if d.nbytes != self.size * s.nbytes:
                raise ValueError(f"gather: out has {d.items} elements; {self.size} ranks x "
                                 f"{s.items} (src's) needed")
            if d.overlaps(s):
                raise ValueError("gather: src and out overlap")
            addr = d.addr
        self._check(_lib().ds4tp_group_gather(self._live(), s.addr, addr, s.nbytes, r))
        return out

    def scatter(self, src: Any, out: Any, root: int) -> Any:
        """Every rank's ``out`` (writable) gets its part of the root's
        ``src`` (size x len(out) elements of out's type): rank k's is
        src[k*len(out) : (k+1)*len(out)]. Elsewhere ``src`` is not used
        (pass None). Returns ``out``."""
        r = self._root(root, "scatter")
        d = _Arg(out, True, "scatter", "out")
        addr = None
        if r == self.rank:
            if src is None:
                raise TypeError(f"scatter: src is None at the root (rank {r}); it holds "
                                f"{self.size} x {d.items} elements")
            s = _Arg(src, False, "scatter", "src")
            _same_element(s, d, "scatter")
            if s.nbytes != self.size * d.nbytes:
                raise ValueError(f"scatter: src has {s.items} elements; {self.size} ranks x "
                                 f"{d.items} (out's) needed")
            if d.overlaps(s):
                raise ValueError("scatter: src and out overlap")
            addr = s.addr
        self._check(_lib().ds4tp_group_scatter(self._live(), addr, d.addr, d.nbytes, r))
        return out

    def all_gather_v(self, src: Any, out: Any, counts: Sequence[int]) -> Any:
        """All-gather of uneven parts: rank r gives ``counts[r]`` elements
        (0 allowed; the same ``counts`` on every rank, and ``src`` holds
        counts[rank]); every rank's ``out`` (writable, sum(counts) elements
        of src's type) gets the parts packed in rank order. Returns ``out``."""
        n = self.size
        c = _counts(counts, n, "all_gather_v: counts")
        s = _Arg(src, False, "all_gather_v", "src")
        d = _Arg(out, True, "all_gather_v", "out")
        _same_element(s, d, "all_gather_v")
        if s.items != c[self.rank]:
            raise ValueError(f"all_gather_v: src has {s.items} elements but counts[{self.rank}] "
                             f"(this rank's) is {c[self.rank]}")
        if d.items != sum(c):
            raise ValueError(f"all_gather_v: out has {d.items} elements; sum(counts) = "
                             f"{sum(c)} needed")
        if d.overlaps(s):
            raise ValueError("all_gather_v: src and out overlap")
        self._check(_lib().ds4tp_group_all_gather_v(self._live(), s.addr, d.addr,
                                                    _u64s(c, s.itemsize)))
        return out

    def all_gather_rows(self, src: Any, out: Any, rows: int) -> Any:
        """All-gather of rows (a batch of prompt rows in one call): ``src``
        holds ``rows`` rows of this rank's slice (len(src) / rows elements
        each, back to back); ``out`` (writable, size x len(src) elements of
        src's type) holds ``rows`` full rows, rank r's slice of row i at
        element i*size*slice + r*slice. Returns ``out``."""
        nrows = _index(rows, "all_gather_rows: rows")
        s = _Arg(src, False, "all_gather_rows", "src")
        d = _Arg(out, True, "all_gather_rows", "out")
        _same_element(s, d, "all_gather_rows")
        if nrows < 0 or (nrows == 0 and s.items) or (nrows and s.items % nrows):
            raise ValueError(f"all_gather_rows: src's {s.items} elements are not {nrows} rows "
                             f"of equal length")
        if d.nbytes != self.size * s.nbytes:
            raise ValueError(f"all_gather_rows: out has {d.items} elements; {self.size} ranks x "
                             f"{s.items} (src's) needed")
        if d.overlaps(s):
            raise ValueError("all_gather_rows: src and out overlap")
        row_bytes = s.nbytes // nrows if nrows else 0
        self._check(_lib().ds4tp_group_all_gather_rows(self._live(), s.addr, d.addr, nrows,
                                                       row_bytes))
        return out

    def all_to_all_v(self, src: Any, send_counts: Sequence[int], out: Any,
                     recv_counts: Sequence[int], send_offsets: Optional[Sequence[int]] = None,
                     recv_offsets: Optional[Sequence[int]] = None) -> Any:
        """All-to-all with per-peer counts (MoE dispatch and combine), in
        elements of the buffers' type: ``send_counts[r]`` elements of
        ``src`` from ``send_offsets[r]`` go to rank r, and rank r's to this
        rank land in ``out`` (writable) from ``recv_offsets[r]``,
        ``recv_counts[r]`` of them, which must be what rank r sends (else
        :class:`Error` EDESYNC naming both). Offsets default to packed (the
        counts' running sums). Each list has one entry per rank. Flat groups
        only (EUNSUPPORTED on a tiered one). Returns ``out``."""
        n = self.size
        sc = _counts(send_counts, n, "all_to_all_v: send_counts")
        rc = _counts(recv_counts, n, "all_to_all_v: recv_counts")
        so = _counts(send_offsets, n, "all_to_all_v: send_offsets") if send_offsets is not None \
            else [sum(sc[:r]) for r in range(n)]
        ro = _counts(recv_offsets, n, "all_to_all_v: recv_offsets") if recv_offsets is not None \
            else [sum(rc[:r]) for r in range(n)]
        s = _Arg(src, False, "all_to_all_v", "src")
        d = _Arg(out, True, "all_to_all_v", "out")
        _same_element(s, d, "all_to_all_v")
        for name, counts, offsets, arg in (("send", sc, so, s), ("recv", rc, ro, d)):
            for r in range(n):
                if counts[r] and offsets[r] + counts[r] > arg.items:
                    raise ValueError(f"all_to_all_v: {name}_offsets[{r}] + {name}_counts[{r}] = "
                                     f"{offsets[r] + counts[r]} is past {arg.what}'s "
                                     f"{arg.items} elements")
        if d.overlaps(s):
            raise ValueError("all_to_all_v: src and out overlap")
        k = s.itemsize
        self._check(_lib().ds4tp_group_all_to_all_v(self._live(), s.addr, _u64s(sc, k),
                                                    _u64s(so, k), d.addr, _u64s(rc, k),
                                                    _u64s(ro, k)))
        return out

    def all_gather(self, src: Any, out: Any) -> Any:
        """out (size * len(src) bytes, writable) gets every rank's src in
        rank order."""
        a, n, _k1 = _buffer_address(src, writable=False)
        b, m, _k2 = _buffer_address(out, writable=True, what="all_gather out")
        if m != n * self.size:
            raise ValueError(f"out has {m} bytes; {self.size} ranks x {n} bytes needed")
        self._check(_lib().ds4tp_group_all_gather(self._live(), a, b, n))
        return out

    def broadcast(self, buf: Any, root: int = 0) -> Any:
        """Every rank's ``buf`` (writable) gets root's bytes, in place."""
        addr, nbytes, _keep = _buffer_address(buf, writable=True, what="broadcast buffer")
        self._check(_lib().ds4tp_group_broadcast(self._live(), addr, nbytes, root))
        return buf

    def barrier(self) -> None:
        """Returns once every rank arrived."""
        self._check(_lib().ds4tp_group_barrier(self._live()))
