"""Groups of N ranks (ds4tp_group_*): all-reduce and friends for tensor
parallelism. Buffers are anything with the buffer protocol (numpy arrays,
array('f'), memoryview, bytearray); all_reduce works in place, so its
buffer must be writable and C-contiguous.

Element types of the reductions come from the buffer: float32 ('f') is
F32, float16 ('e') F16, float64 ('d') F64, int32 I32, int64 I64, uint8
U8. A typed buffer is never reinterpreted: other formats (int16, uint32,
...) are refused (convert the values first, e.g. ``a.astype(np.float32)``),
and so is a ``dtype=`` that disagrees with the buffer's format. Two kinds
of buffer take an explicit ``dtype``: raw bytes (format 'B', 'b' or 'c':
bytearray, a uint8 array, ``a.view(np.uint8)``), read as that dtype's
elements, and uint16 ('H') arrays, the usual carrier of bfloat16, whose
elements are taken as the raw bits of ``dtype=Dtype.BF16`` or
``Dtype.F16``. Reductions take ``op=`` (:class:`ReduceOp`: SUM, the
default, MAX, MIN, PROD). The calls that move data (gather, scatter,
all_gather_v, all_gather_rows, all_to_all_v) count in elements of their
buffers, which must hold the same type; raw bytes count bytes.

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
import os
from ctypes import byref, c_int, c_void_p
from typing import Any, Dict, List, Optional, Tuple, Union

from ._buffers import _release_views, _tracked_view
from ._collectives import Collectives
from ._constants import Status, Transport
from ._dtypes import (Dtype, ReduceOp, bf16_to_f32, f16_to_f32,  # noqa: F401 (re-exported)
                      f32_to_bf16, f32_to_f16)
from ._loader import _Handle, Error, _lib, _text, last_error
from ._requests import SplitPhase
from ._structs import GroupOptions, Identity, Stats


class Group(_Handle, Collectives, SplitPhase):
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

    def dump(self, path: Optional[str] = None) -> None:
        """Writes the flight recorder (the last 256 calls, each rank's
        arrival) as text to ``path`` and as a Chrome trace to
        ``path + ".json"`` ("%r": the rank; None: DS4TP_GROUP_DUMP)."""
        self._check(_lib().ds4tp_group_dump(
            self._live(), None if path is None else os.fsencode(path)))

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

    # -- the group buffer (the collectives: _collectives.py) -------------------

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
