"""Groups of N ranks (ds4tp_group_*): all-reduce and friends for tensor
parallelism. Buffers are anything with the buffer protocol (numpy arrays,
array('f'), memoryview, bytearray); all_reduce works in place, so its
buffer must be writable and C-contiguous.

Element types come from the buffer: float32 ('f') is F32, float16 ('e')
is F16. A typed buffer is never reinterpreted: float64, int32 and other
formats are refused (convert the values first, e.g. ``a.astype(np.float32)``),
and so is a ``dtype=`` that disagrees with the buffer's format. Two kinds
of buffer take an explicit ``dtype``: raw bytes (format 'B', 'b' or 'c':
bytearray, a uint8 array, ``a.view(np.uint8)``), read as that dtype's
elements, and uint16 ('H') arrays, the usual carrier of bfloat16, whose
elements are taken as the raw bits of ``dtype=Dtype.BF16`` or
``Dtype.F16``.

One process per rank, started by a launcher (torchrun, ``mpirun``,
``srun``, or by hand: ``RANK=r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1
MASTER_PORT=29600 python3 rank.py`` for r in 0, 1, 2). Options left unset
come from RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (or Open MPI's and
Slurm's variables)::

    import numpy as np
    import ds4tp

    with ds4tp.Group() as g:             # rank, size, rendezvous from the env
        g.connect()                      # rendezvous at rank 0, data links
        hidden = np.full(2560, g.rank + 1, dtype=np.float16)
        g.all_reduce(hidden)             # in place, F16 from the dtype
        assert hidden[0] == g.size * (g.size + 1) / 2
        print(g.rank, g.transport.name, hidden[:4])

N threads of one process (the ncclCommInitAll shape)::

    groups = ds4tp.Group.local(4)     # one handle per thread

ctypes releases the GIL during every call, so N Python threads can each
sit in a collective of their own handle.
"""

import ctypes
import enum
from ctypes import byref, c_int, c_void_p
from typing import Any, Dict, List, Optional, Tuple, Union

from ._buffers import (UNTYPED_FORMATS, _buffer_address, _native, _release_views, _tracked_view,
                       _view, describe_format)
from ._constants import Status, Transport
from ._loader import _Handle, Error, _lib, _text, last_error
from ._structs import GroupOptions, Identity, Stats


class Dtype(enum.IntEnum):
    """ds4tp_dtype: element types of all_reduce."""
    F32 = 0
    F16 = 1
    BF16 = 2


_ITEM = {Dtype.F32: 4, Dtype.F16: 2, Dtype.BF16: 2}
# Buffer formats whose element type is known without asking.
_BY_FORMAT = {"f": Dtype.F32, "e": Dtype.F16}
# uint16 elements: the raw bits of a 16-bit float, which one only dtype= says.
_RAW16 = "H"


def f32_to_f16(value: float) -> int:
    """The F16 bits of ``value`` by the library's own rounding (nearest,
    ties to even; what an F16 all_reduce rounds with): ds4tp_f32_to_f16."""
    return _lib().ds4tp_f32_to_f16(value)


def f16_to_f32(bits: int) -> float:
    """The float an F16 bit pattern holds (exact): ds4tp_f16_to_f32."""
    return _lib().ds4tp_f16_to_f32(bits)


def f32_to_bf16(value: float) -> int:
    """The BF16 bits of ``value`` (nearest, ties to even): ds4tp_f32_to_bf16."""
    return _lib().ds4tp_f32_to_bf16(value)


def bf16_to_f32(bits: int) -> float:
    """The float a BF16 bit pattern holds (exact): ds4tp_bf16_to_f32."""
    return _lib().ds4tp_bf16_to_f32(bits)


def _as_dtype(dtype: Any) -> Dtype:
    try:
        return Dtype(dtype)
    except ValueError:
        raise ValueError(f"dtype={dtype!r} is not a ds4tp.Dtype (F32, F16 or BF16)") from None


def _infer_dtype(buf: Any, dtype: Optional[Union[Dtype, int]]) -> Dtype:
    """The element type of ``buf`` given ``dtype``, or TypeError naming the
    buffer's format and the dtype when they disagree (never a reinterpretation
    of a typed buffer's bytes)."""
    raw_fmt = _view(buf).format
    fmt = _native(raw_fmt)
    held = describe_format(raw_fmt)
    if dtype is not None:
        t = _as_dtype(dtype)
        if fmt is not None and fmt in UNTYPED_FORMATS:
            return t
        if _BY_FORMAT.get(fmt or "") == t or (fmt == _RAW16 and t != Dtype.F32):
            return t
        hint = "convert the values (e.g. a.astype(np.float32)), or drop dtype= and let the " \
               "buffer's format decide"
        if fmt == _RAW16:
            hint = "uint16 elements are the raw bits of F16 or BF16 only"
        raise TypeError(f"buffer holds {held} but dtype={t.name} was given: a typed buffer is "
                        f"not reinterpreted; {hint}. Only raw bytes ('B', 'b', 'c', e.g. "
                        f"a.view(np.uint8)) take any dtype")
    if fmt in _BY_FORMAT:
        return _BY_FORMAT[fmt]
    if fmt == _RAW16:
        raise TypeError(f"cannot tell the element type of a buffer of {held}: its elements "
                        f"are 16-bit float bits; pass dtype=Dtype.BF16 or dtype=Dtype.F16")
    if fmt is not None and fmt in UNTYPED_FORMATS:
        raise TypeError(f"cannot tell the element type of a buffer of raw bytes ({held}): "
                        f"pass dtype=Dtype.F32, F16 or BF16")
    raise TypeError(f"cannot tell the element type of a buffer of {held}: all_reduce takes "
                    f"float32, float16, or uint16 bits with dtype=Dtype.BF16; convert the "
                    f"values first (e.g. a.astype(np.float32))")


class Group(_Handle):
    """One rank's ds4tp_group handle. A context manager; :meth:`close`
    frees it (peers still in a call see this rank leave).

    ``Group(options=None, identity=None)``: ``options`` is a
    :class:`GroupOptions` (None: every field from its C default, i.e. rank,
    size and rendezvous from RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT);
    ``identity`` (None allowed) is an :class:`Identity` every rank must
    match. Rank 0 binds its rendezvous listener here; :meth:`connect`
    brings the group up. See the module's docstring for a whole rank."""

    def __init__(self, options: Optional[GroupOptions] = None,
                 identity: Optional[Identity] = None, _handle: Optional[int] = None) -> None:
        self._h = _handle
        self._views = []
        if _handle is not None:
            return
        self._options = options if options is not None else GroupOptions()
        handle = c_void_p()
        rc = _lib().ds4tp_group_new(ctypes.byref(handle), ctypes.byref(self._options),
                                    ctypes.byref(identity) if identity is not None else None)
        if rc != Status.OK:
            raise Error(rc, last_error())
        self._h = handle.value

    @classmethod
    def local(cls, n: int, options: Optional[GroupOptions] = None,
              identity: Optional[Identity] = None) -> List["Group"]:
        """ds4tp_group_new_local: ``n`` (2..16) connected handles, one per
        thread of this process (shared memory, no sockets; rank and size
        options are ignored). Each handle is then used by one thread::

            import threading, numpy as np, ds4tp
            groups = ds4tp.Group.local(3)
            bufs = [np.full(8, r, dtype=np.float32) for r in range(3)]
            ts = [threading.Thread(target=g.all_reduce, args=(b,))
                  for g, b in zip(groups, bufs)]
            for t in ts: t.start()
            for t in ts: t.join()
            assert (bufs[0] == 3.0).all()
            for g in groups: g.close()
        """
        handles = (c_void_p * n)()
        rc = _lib().ds4tp_group_new_local(handles, n,
                                          ctypes.byref(options) if options is not None else None,
                                          ctypes.byref(identity) if identity is not None else None)
        if rc != Status.OK:
            raise Error(rc, last_error())
        return [cls(_handle=h) for h in handles]

    # -- lifetime ----------------------------------------------------------

    def close(self) -> None:
        """ds4tp_group_free (idempotent)."""
        if self._h is not None:
            _release_views(self._views)
            _lib().ds4tp_group_free(self._h)
            self._h = None

    def _live(self) -> int:
        if self._h is None:
            raise Error(Status.EINVAL, "the group is closed")
        return self._h

    def _check(self, rc: int) -> int:
        if rc != Status.OK:
            raise Error(rc, self.errmsg)
        return rc

    # -- bring-up and state -------------------------------------------------

    def connect(self) -> None:
        """Blocking bring-up: rendezvous at rank 0, roster, data links."""
        self._check(_lib().ds4tp_group_connect(self._live()))

    @property
    def rank(self) -> int:
        """This rank (0..size-1)."""
        return _lib().ds4tp_group_rank(self._live())

    @property
    def size(self) -> int:
        """Ranks in the group."""
        return _lib().ds4tp_group_size(self._live())

    @property
    def transport(self) -> Transport:
        """The active :class:`Transport` after connect (AUTO before)."""
        return Transport(_lib().ds4tp_group_transport(self._live()))

    @property
    def rendezvous_port(self) -> int:
        """Rank 0's rendezvous port (the bound one on rank 0)."""
        return _lib().ds4tp_group_rendezvous_port(self._live())

    @property
    def failed(self) -> Union[Status, int]:
        """The failure :class:`Status` once failed, else 0 (Status.OK)."""
        rc = _lib().ds4tp_group_failed(self._live())
        try:
            return Status(rc)
        except ValueError:
            return rc

    @property
    def errmsg(self) -> str:
        """Message of the failure or the last failed call ("" if none)."""
        return _text(_lib().ds4tp_group_errmsg(self._live()))

    def stats(self) -> Dict[str, Any]:
        """The group's counters and histograms (ds4tp_stats fields, as
        :meth:`Pair.stats`), e.g. ``stats()["all_reduce"]["count"]``."""
        st = Stats()
        st.size = ctypes.sizeof(st)
        self._check(_lib().ds4tp_group_stats_read(self._live(), ctypes.byref(st)))
        return st.as_dict()

    def stats_reset(self) -> None:
        """Later :meth:`stats` count from now."""
        self._check(_lib().ds4tp_group_stats_reset(self._live()))

    def plan(self) -> str:
        """The plan the group runs, in one line ("plan: 1 host x 4 ranks; shm
        within the host; all-reduce ..."), the same on every rank; after
        :meth:`connect`. For people and logs: its words may change."""
        return self._text(_lib().ds4tp_group_plan)

    def topology(self, rank: int) -> Tuple[int, int, bool]:
        """Where `rank` sits, after :meth:`connect`: (host index, place among
        the host's ranks (0: its leader), whether the group runs tiered:
        shm within a host, tcp between leaders, host-major sums)."""
        host, local, tiered = c_int(), c_int(), c_int()
        self._check(_lib().ds4tp_group_topology(self._live(), rank, byref(host), byref(local),
                                                 byref(tiered)))
        return host.value, local.value, bool(tiered.value)

    def prometheus(self) -> str:
        """The Prometheus text exposition of :meth:`stats`."""
        return self._text(_lib().ds4tp_group_stats_prometheus)

    def _text(self, call: Any) -> str:
        """A call that hands out text (buf, cap, needed): asked once for the
        length, then into a buffer of that size."""
        need = ctypes.c_size_t(0)
        call(self._live(), None, 0, ctypes.byref(need))
        buf = ctypes.create_string_buffer(need.value + 1)
        self._check(call(self._live(), buf, len(buf), ctypes.byref(need)))
        return buf.value.decode()

    def mark_failed(self) -> None:
        """Fails the group on every rank; from any thread."""
        _lib().ds4tp_group_mark_failed(self._live())

    # -- collectives ----------------------------------------------------------

    def buffer(self, fmt: str = "B") -> memoryview:
        """The group buffer (``chunk_bytes``) as a writable memoryview cast
        to ``fmt`` (e.g. "f", "e", "H"). Over shm, once connected, it lies
        in the shared segment: an all_reduce of a vector at its start (this
        view, or a numpy array over it) needs no copy in. Take it after
        :meth:`connect`; :meth:`close` releases it (drop numpy arrays over
        it first)."""
        addr, nbytes = c_void_p(), ctypes.c_uint64()
        self._check(_lib().ds4tp_group_buffer(self._live(), ctypes.byref(addr),
                                              ctypes.byref(nbytes)))
        return _tracked_view(self._views, addr.value, nbytes.value, fmt)

    def all_reduce(self, buf: Any, dtype: Optional[Union[Dtype, int]] = None) -> Any:
        """Sums ``buf`` over the ranks, in place (identical bits on every
        rank). The element type comes from the buffer's format: float32 ->
        F32, float16 -> F16. ``dtype`` is for buffers without one: raw
        bytes (bytearray, uint8, format 'B'/'b'/'c') take any dtype, and
        uint16 ('H') arrays hold the raw bits of ``Dtype.BF16`` or
        ``Dtype.F16``. A typed buffer whose format disagrees with ``dtype``
        (float64 with F16, int32 with F32, ...) raises TypeError naming
        both; a read-only one TypeError, a non-contiguous one ValueError,
        each saying what to pass instead. Returns ``buf``."""
        t = _infer_dtype(buf, dtype)
        addr, nbytes, _keep = _buffer_address(buf, writable=True, what="all_reduce buffer")
        if nbytes % _ITEM[t]:
            raise ValueError(f"buffer of {nbytes} bytes is not whole {t.name} elements")
        self._check(_lib().ds4tp_group_all_reduce(self._live(), addr, nbytes // _ITEM[t],
                                                  int(t), 0))
        return buf

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
