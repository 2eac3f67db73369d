"""Groups of N ranks (ds4tp_group_*): all-reduce and friends for tensor
parallelism. Buffers are anything with the buffer protocol (numpy arrays,
array('f'), memoryview, bytearray); all_reduce works in place, so its
buffer must be writable and C-contiguous.

One process per rank::

    g = ds4tp.Group(ds4tp.GroupOptions(rank=r, group_size=4), identity)
    g.connect()
    g.all_reduce(hidden)          # numpy float32/float16 array, in place

N threads of one process (the ncclCommInitAll shape)::

    groups = ds4tp.Group.local(4)     # one handle per thread

ctypes releases the GIL during every call, so N Python threads can each
sit in a collective of their own handle.
"""

import ctypes
import enum
from ctypes import c_void_p

from ._buffers import _buffer_address, _native, _release_views, _tracked_view
from ._constants import Status
from ._loader import _Handle, Error, _lib, _text, last_error
from ._structs import GroupOptions


class Dtype(enum.IntEnum):
    """ds4tp_dtype: element types of all_reduce."""
    F32 = 0
    F16 = 1
    BF16 = 2


_ITEM = {Dtype.F32: 4, Dtype.F16: 2, Dtype.BF16: 2}
# Buffer formats whose element type is known without asking ('H' is the
# natural carrier of bf16 and needs dtype=Dtype.BF16).
_BY_FORMAT = {"f": Dtype.F32, "e": Dtype.F16}


def _infer_dtype(buf, dtype):
    if dtype is not None:
        return Dtype(dtype)
    fmt = _native(memoryview(buf).format)
    if fmt in _BY_FORMAT:
        return _BY_FORMAT[fmt]
    raise TypeError(f"cannot tell the element type of a buffer of format "
                    f"{memoryview(buf).format!r}: pass dtype=Dtype.F32, F16 or BF16")


class Group(_Handle):
    """One rank's ds4tp_group handle. A context manager; :meth:`close`
    frees it (peers still in a call see this rank leave)."""

    def __init__(self, options=None, identity=None, _handle=None):
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
    def local(cls, n, options=None, identity=None):
        """ds4tp_group_new_local: ``n`` connected handles, one per thread of
        this process (shared memory, no sockets)."""
        handles = (c_void_p * n)()
        rc = _lib().ds4tp_group_new_local(handles, n,
                                          ctypes.byref(options) if options is not None else None,
                                          ctypes.byref(identity) if identity is not None else None)
        if rc != Status.OK:
            raise Error(rc, last_error())
        return [cls(_handle=h) for h in handles]

    # -- lifetime ----------------------------------------------------------

    def close(self):
        """ds4tp_group_free (idempotent)."""
        if self._h is not None:
            _release_views(self._views)
            _lib().ds4tp_group_free(self._h)
            self._h = None

    def _live(self):
        if self._h is None:
            raise Error(Status.EINVAL, "the group is closed")
        return self._h

    def _check(self, rc):
        if rc != Status.OK:
            raise Error(rc, self.errmsg)
        return rc

    # -- bring-up and state -------------------------------------------------

    def connect(self):
        """Blocking bring-up: rendezvous at rank 0, roster, data links."""
        self._check(_lib().ds4tp_group_connect(self._live()))

    @property
    def rank(self):
        return _lib().ds4tp_group_rank(self._live())

    @property
    def size(self):
        return _lib().ds4tp_group_size(self._live())

    @property
    def transport(self):
        return _lib().ds4tp_group_transport(self._live())

    @property
    def rendezvous_port(self):
        return _lib().ds4tp_group_rendezvous_port(self._live())

    @property
    def failed(self):
        """The failure status once failed, else 0."""
        return _lib().ds4tp_group_failed(self._live())

    @property
    def errmsg(self):
        return _text(_lib().ds4tp_group_errmsg(self._live()))

    def mark_failed(self):
        """Fails the group on every rank; from any thread."""
        _lib().ds4tp_group_mark_failed(self._live())

    # -- collectives ----------------------------------------------------------

    def buffer(self, fmt="B"):
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

    def all_reduce(self, buf, dtype=None):
        """Sums ``buf`` over the ranks, in place (identical bits on every
        rank). ``dtype`` defaults from the buffer's format: float32 -> F32,
        float16 -> F16; bf16 data (e.g. a uint16 array) needs
        ``dtype=Dtype.BF16``. Returns ``buf``."""
        t = _infer_dtype(buf, dtype)
        addr, nbytes, _keep = _buffer_address(buf, writable=True)
        if nbytes % _ITEM[t]:
            raise ValueError(f"buffer of {nbytes} bytes is not whole {t.name} elements")
        self._check(_lib().ds4tp_group_all_reduce(self._live(), addr, nbytes // _ITEM[t],
                                                  int(t), 0))
        return buf

    def all_gather(self, src, out):
        """out (size * len(src) bytes, writable) gets every rank's src in
        rank order."""
        a, n, _k1 = _buffer_address(src, writable=False)
        b, m, _k2 = _buffer_address(out, writable=True)
        if m != n * self.size:
            raise ValueError(f"out has {m} bytes; {self.size} ranks x {n} bytes needed")
        self._check(_lib().ds4tp_group_all_gather(self._live(), a, b, n))
        return out

    def broadcast(self, buf, root=0):
        """Every rank's ``buf`` (writable) gets root's bytes, in place."""
        addr, nbytes, _keep = _buffer_address(buf, writable=True)
        self._check(_lib().ds4tp_group_broadcast(self._live(), addr, nbytes, root))
        return buf

    def barrier(self):
        self._check(_lib().ds4tp_group_barrier(self._live()))
