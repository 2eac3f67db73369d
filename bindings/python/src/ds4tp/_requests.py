"""Split-phase group calls (ds4tp_group_requests.h): a ``*_start`` method
hands the collective to the group's progress thread and returns a
:class:`Request` at once; the caller computes meanwhile and collects the
result with :meth:`Request.wait`. Several requests may be in flight; they
run in the order they were started, and a blocking call waits for them.
A buffer belongs to its request until the request completes: the Request
keeps a reference to it, and the caller must not touch it before then."""

import ctypes
from ctypes import c_int, c_void_p
from typing import Any, Optional, Union

from ._buffers import _buffer_address
from ._constants import Status
from ._dtypes import ITEM, Dtype, ReduceOp, as_op, infer_dtype
from ._loader import Error, _lib, _text


class Request:
    """One started collective. :meth:`wait` blocks until it completed and
    raises :class:`Error` with the library's message when it failed;
    :meth:`test` polls. Freed on :meth:`wait`'s return, or at
    garbage collection (which waits for it first)."""

    def __init__(self, handle: int, keep: Any, result: Any) -> None:
        self._h = handle
        self._keep = keep      # the buffers, alive until the call completed
        self._result = result  # what wait() returns

    def test(self) -> bool:
        """True once completed (then :meth:`wait` returns at once); never blocks."""
        if self._h is None:
            return True
        done = c_int(0)
        _lib().ds4tp_group_test(self._h, ctypes.byref(done))
        return bool(done.value)

    def wait(self) -> Any:
        """Blocks until completed; returns the call's result (the buffer it
        wrote), or raises :class:`Error` naming the cause."""
        if self._h is None:
            return self._result
        rc = _lib().ds4tp_group_wait(self._h)
        msg = _text(_lib().ds4tp_group_request_errmsg(self._h))
        self._free()
        if rc != Status.OK:
            raise Error(rc, msg)
        return self._result

    def _free(self) -> None:
        if self._h is not None:
            _lib().ds4tp_group_request_free(self._h)
            self._h = None
            self._keep = None

    def __del__(self) -> None:
        try:
            self._free()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class SplitPhase:
    """The ``*_start`` methods of :class:`Group` (needs ``_live()`` and
    ``_check(rc)``, as :class:`Collectives`)."""

    def _started(self, rc: int, req: c_void_p, keep: Any, result: Any) -> Request:
        self._check(rc)
        return Request(req.value, keep, result)

    def all_reduce_start(self, buf: Any, dtype: Optional[Union[Dtype, int]] = None,
                         op: Union[ReduceOp, int] = ReduceOp.SUM) -> Request:
        """:meth:`Collectives.all_reduce`, started: ``wait()`` returns ``buf``."""
        t, o = infer_dtype(buf, dtype), as_op(op)
        addr, nbytes, keep = _buffer_address(buf, writable=True, what="all_reduce buffer")
        if nbytes % ITEM[t]:
            raise ValueError(f"buffer of {nbytes} bytes is not whole {t.name} elements")
        req = c_void_p()
        rc = _lib().ds4tp_group_all_reduce_start(self._live(), addr, nbytes // ITEM[t], int(t),
                                                 int(o), ctypes.byref(req))
        return self._started(rc, req, (buf, keep), buf)

    def all_gather_start(self, src: Any, out: Any) -> Request:
        """:meth:`Collectives.all_gather`, started: ``wait()`` returns ``out``."""
        a, n, k1 = _buffer_address(src, writable=False)
        b, m, k2 = _buffer_address(out, writable=True, what="all_gather out")
        if m != n * self.size:
            raise ValueError(f"out has {m} bytes; {self.size} ranks x {n} bytes needed")
        req = c_void_p()
        rc = _lib().ds4tp_group_all_gather_start(self._live(), a, b, n, ctypes.byref(req))
        return self._started(rc, req, (src, out, k1, k2), out)

    def broadcast_start(self, buf: Any, root: int = 0) -> Request:
        """:meth:`Collectives.broadcast`, started: ``wait()`` returns ``buf``."""
        addr, nbytes, keep = _buffer_address(buf, writable=True, what="broadcast buffer")
        req = c_void_p()
        rc = _lib().ds4tp_group_broadcast_start(self._live(), addr, nbytes, root,
                                                ctypes.byref(req))
        return self._started(rc, req, (buf, keep), buf)

    def barrier_start(self) -> Request:
        """:meth:`Collectives.barrier`, started."""
        req = c_void_p()
        return self._started(_lib().ds4tp_group_barrier_start(self._live(), ctypes.byref(req)),
                             req, None, None)
