"""The pair: lifetime, bring-up and state, the slab, the data plane and
engine integration (the control plane is the :class:`ControlPlane` mixin)."""

import ctypes
import os
from ctypes import c_uint64, c_void_p
from typing import Any, Callable, Dict, List, Optional, Union

from ._buffers import _NO_OFFSET, _buffer_address, _memory_view, _release_views, _tracked_view
from ._constants import ServiceState, Status, Transport
from ._control import ControlPlane
from ._loader import _Handle, Error, _check, _lib, _text, last_error, transport_name
from ._structs import (STAGE_AFTER_FN, STAGE_BEFORE_FN, GateServiceOptions, Identity, LinkInfo,
                       Options, SlabLayout, StagingHooks, Stats)

# ---------------------------------------------------------------------------
# The pair.

class Pair(ControlPlane, _Handle):
    """One ds4tp_pair (rank 0 = leader, rank 1 = worker).

    ``Pair(options, identity)`` validates both and, for a leader, binds the
    listener (``listen_port`` is valid at once). Use it as a context manager
    or call :meth:`close`. Views returned by :attr:`slab`, :meth:`out_vector`
    and friends point into the slab and are released by :meth:`detach_slab`
    and :meth:`close`; do not keep slices of them beyond that.
    """

    def __init__(self, options: Options, identity: Identity) -> None:
        self._h = None
        self._views = []
        self._slab_keep = None
        self._hooks = None
        self._hook_error = None
        self._options = options  # keeps the log callback alive
        handle = c_void_p()
        _check(_lib().ds4tp_new(ctypes.byref(handle), ctypes.byref(options),
                                ctypes.byref(identity)))
        self._h = handle.value

    # -- lifetime --------------------------------------------------------

    def close(self) -> None:
        """ds4tp_free: stops everything and releases the handle (idempotent)."""
        if self._h is not None:
            self._release_views()
            _lib().ds4tp_free(self._h)
            self._h = None
            self._slab_keep = None
            self._hooks = None

    @property
    def handle(self) -> int:
        """The raw ds4tp_pair * (an int), e.g. as user data for the
        gate callbacks an engine's C code calls."""
        return self._live()

    def _live(self) -> int:
        if self._h is None:
            raise Error(Status.EINVAL, "the pair is closed")
        return self._h

    # -- bring-up and state ---------------------------------------------

    def connect(self) -> None:
        """Blocking bring-up (hello, identity check, transport negotiation)."""
        _check(_lib().ds4tp_connect(self._live()))

    @property
    def listen_port(self) -> int:
        """Leader: the bound port (after construction); worker: the dialed one."""
        return _lib().ds4tp_listen_port(self._live())

    @property
    def rank(self) -> int:
        """0 for the leader, 1 for the worker."""
        return _lib().ds4tp_rank(self._live())

    @property
    def transport(self) -> Transport:
        """Negotiated :class:`Transport` after connect (AUTO before)."""
        return Transport(_lib().ds4tp_transport_active(self._live()))

    @property
    def peer_ctx_size(self) -> int:
        """The peer's ctx_size from its hello (0 before connect)."""
        return _lib().ds4tp_peer_ctx_size(self._live())

    @property
    def failed(self) -> bool:
        """True once a failure latched; every later call raises EFAILED."""
        return bool(_lib().ds4tp_failed(self._live()))

    def mark_failed(self, reason: str) -> None:
        """Latches failure from the engine side (e.g. a GPU error)."""
        _lib().ds4tp_mark_failed(self._live(), reason.encode())

    @property
    def errmsg(self) -> str:
        """Message of the handle's last failed call ("" if none)."""
        return _text(_lib().ds4tp_errmsg(self._live()))

    # -- observability ----------------------------------------------------

    def stats(self) -> Dict[str, Any]:
        """Counters and histograms since creation or stats_reset(), as a dict
        (ds4tp_stats fields; histograms as {count, sum_ns, buckets})."""
        st = Stats()
        st.size = ctypes.sizeof(st)
        _check(_lib().ds4tp_stats_read(self._live(), ctypes.byref(st)))
        return st.as_dict()

    def links(self) -> List[Dict[str, Any]]:
        """The pair's data links (ds4tp_links): the data connection, and its
        standby link or rails where it has them, each as a dict."""
        arr = (LinkInfo * 8)()
        n = _lib().ds4tp_links(self._live(), arr, 8, ctypes.sizeof(LinkInfo))
        _check(min(n, 0))
        return [arr[i].as_dict() for i in range(min(n, 8))]

    def stats_reset(self) -> None:
        """Later stats() count from now."""
        _check(_lib().ds4tp_stats_reset(self._live()))

    def prometheus(self) -> str:
        """The Prometheus text exposition of stats(), for an engine's /metrics."""
        need = ctypes.c_size_t(0)
        _lib().ds4tp_stats_prometheus(self._live(), None, 0, ctypes.byref(need))
        buf = ctypes.create_string_buffer(need.value + 1)
        _check(_lib().ds4tp_stats_prometheus(self._live(), buf, len(buf), ctypes.byref(need)))
        return buf.value.decode()

    def trace_start(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Records gates and control round trips; written at trace_write() and close."""
        _check(_lib().ds4tp_trace_start(self._live(), str(path).encode()))

    def trace_write(self) -> None:
        """Writes the Chrome/Perfetto trace file now (recording goes on)."""
        _check(_lib().ds4tp_trace_write(self._live()))

    def dump(self, path: Optional[str] = None) -> None:
        """Writes the flight recorder (the last 256 gates, each with how long
        this rank waited for the peer) as text to ``path`` and as a Chrome
        trace to ``path + ".json"`` ("%r": the rank; None: DS4TP_PAIR_DUMP)."""
        _check(_lib().ds4tp_dump(self._live(), None if path is None else os.fsencode(path)))

    # -- slab -------------------------------------------------------------

    def layout(self) -> SlabLayout:
        """This pair's :class:`SlabLayout`."""
        layout = SlabLayout()
        _check(_lib().ds4tp_slab_layout_get(self._live(), ctypes.byref(layout)))
        return layout

    @property
    def slab_bytes(self) -> int:
        """Total slab bytes."""
        return _lib().ds4tp_slab_bytes(self._live())

    def out_offset(self, layer: int, gate: int) -> int:
        """Slab offset of out[layer][gate] (raises for out of range)."""
        return self._offset(_lib().ds4tp_slab_out_offset(self._live(), layer, gate),
                            f"out vector (layer {layer}, gate {gate})")

    def in_offset(self, layer: int, gate: int) -> int:
        """Slab offset of in[layer][gate]."""
        return self._offset(_lib().ds4tp_slab_in_offset(self._live(), layer, gate),
                            f"in vector (layer {layer}, gate {gate})")

    def batch_out_offset(self, index: int) -> int:
        """Slab offset of row 0 of batch gate ``index``'s out rows."""
        return self._offset(_lib().ds4tp_slab_batch_out_offset(self._live(), index),
                            f"batch gate {index}")

    def batch_in_offset(self, index: int) -> int:
        """Slab offset of row 0 of batch gate ``index``'s in rows."""
        return self._offset(_lib().ds4tp_slab_batch_in_offset(self._live(), index),
                            f"batch gate {index}")

    def gpu_flags_offset(self) -> int:
        """Slab offset of the engine's per-slot "gate reached" words."""
        return self._offset(_lib().ds4tp_slab_gpu_flags_offset(self._live()), "gpu flags")

    def _offset(self, off, what):
        if off == _NO_OFFSET:
            layout = self.layout()
            raise Error(Status.EINVAL, f"{what} is outside this pair's slab "
                        f"({layout.slots // 2} layers, {layout.batch_gates} batch gates)")
        return off

    def attach_slab(self, buffer: Any = None) -> None:
        """Hands the slab to the transport.

        ``buffer=None``: the library allocates a zeroed, page-aligned slab.
        Else a writable, 64-byte aligned buffer of at least ``slab_bytes``
        (e.g. ``mmap.mmap(-1, pair.slab_bytes)``), kept alive until
        detach/close.
        """
        if buffer is None:
            _check(_lib().ds4tp_attach_slab(self._live(), None, 0))
            return
        address, nbytes, keep = _buffer_address(buffer, writable=True, what="slab buffer")
        _check(_lib().ds4tp_attach_slab(self._live(), address, nbytes))
        self._slab_keep = keep

    def detach_slab(self) -> None:
        """Stops the data plane and forgets the slab (releases our views)."""
        self._release_views()
        _lib().ds4tp_detach_slab(self._live())
        self._slab_keep = None

    @property
    def slab_base(self) -> Optional[int]:
        """Address of the attached slab, or None."""
        return _lib().ds4tp_slab_base(self._live())

    @property
    def slab(self) -> memoryview:
        """The whole attached slab as a writable memoryview of bytes."""
        return self._view(0, self.slab_bytes, "B")

    def out_vector(self, layer: int, gate: int) -> memoryview:
        """This rank's partial for (layer, gate): memoryview of n_embd float32."""
        return self._view(self.out_offset(layer, gate), self.layout().vec_bytes, "f")

    def in_vector(self, layer: int, gate: int) -> memoryview:
        """The peer's partial for (layer, gate), valid after the exchange."""
        return self._view(self.in_offset(layer, gate), self.layout().vec_bytes, "f")

    def batch_out_row(self, index: int, row: int) -> memoryview:
        """Row ``row`` of batch gate ``index``'s out rows (float32)."""
        return self._row(self.batch_out_offset(index), index, row)

    def batch_in_row(self, index: int, row: int) -> memoryview:
        """Row ``row`` of batch gate ``index``'s in rows (float32)."""
        return self._row(self.batch_in_offset(index), index, row)

    def view(self, offset: int, nbytes: int, fmt: str = "B") -> memoryview:
        """A memoryview of ``nbytes`` at slab ``offset`` cast to ``fmt``
        (struct format, e.g. "Q" for the u64 flag words)."""
        if offset + nbytes > self.slab_bytes:
            raise Error(Status.EINVAL, f"bytes {offset}..{offset + nbytes} are outside the "
                        f"{self.slab_bytes}-byte slab")
        return self._view(offset, nbytes, fmt)

    def _row(self, base, index, row):
        layout = self.layout()
        if not 0 <= row < layout.batch_rows:
            raise Error(Status.EINVAL, f"batch gate {index} row {row} outside 0..{layout.batch_rows - 1}")
        return self._view(base + row * layout.vec_stride, layout.vec_bytes, "f")

    def _view(self, offset, nbytes, fmt):
        base = self.slab_base
        if not base:
            raise Error(Status.ESTATE, "no slab attached: call attach_slab first")
        return _tracked_view(self._views, base + offset, nbytes, fmt)

    def _release_views(self):
        _release_views(self._views)

    # -- data plane -------------------------------------------------------

    def gate_exchange(self, layer: int, gate: int, seq: int) -> None:
        """Sends out[layer][gate], waits for the peer's into in[layer][gate].
        Row gate seqs start at 1 and rise by one."""
        self._gate(_lib().ds4tp_gate_exchange(self._live(), layer, gate, seq))

    def batch_gate_exchange(self, index: int, rows: int, seq: int) -> None:
        """Swaps ``rows`` (1..BATCH_MAX_ROWS) rows of batch gate ``index``."""
        self._gate(_lib().ds4tp_batch_gate_exchange(self._live(), index, rows, seq))

    def big_gate_exchange(self, layer: int, seq: int, out: Any, into: Any) -> None:
        """Sends bytes-like ``out`` and receives the peer's payload of the same
        size into the writable buffer ``into``."""
        out_addr, out_n, keep_out = _buffer_address(out, writable=False)
        in_addr, in_n, keep_in = _buffer_address(into, writable=True, what="big gate into")
        if out_n != in_n:
            raise Error(Status.EINVAL, f"big gate: out has {out_n} bytes but into has {in_n}; "
                        "both ranks swap equal sizes")
        rc = _lib().ds4tp_big_gate_exchange(self._live(), layer, seq, out_addr or None,
                                            in_addr or None, out_n)
        del keep_out, keep_in
        self._gate(rc)

    def _gate(self, rc):
        if rc != Status.OK:
            err = Error(rc, last_error())
            cause, self._hook_error = self._hook_error, None
            raise err from cause

    # -- engine integration ---------------------------------------------

    def gate_callback(self, layer: int, gate: int, seq: int) -> bool:
        """ds4tp_gate_callback: the gate in callback shape; True on success,
        False on failure (which latches the pair failed; see errmsg)."""
        return bool(_lib().ds4tp_gate_callback(self._live(), layer, gate, seq))

    def batch_gate_callback(self, index: int, rows: int, seq: int) -> bool:
        """ds4tp_batch_gate_callback; True on success."""
        return bool(_lib().ds4tp_batch_gate_callback(self._live(), index, rows, seq))

    def big_gate_callback(self, layer: int, seq: int, out: Any, into: Any) -> bool:
        """ds4tp_big_gate_callback; True on success."""
        out_addr, out_n, keep_out = _buffer_address(out, writable=False)
        in_addr, in_n, keep_in = _buffer_address(into, writable=True, what="big gate into")
        if out_n != in_n:
            raise Error(Status.EINVAL, f"big gate: out has {out_n} bytes but into has {in_n}")
        ok = _lib().ds4tp_big_gate_callback(self._live(), layer, seq, out_addr or None,
                                            in_addr or None, out_n)
        del keep_out, keep_in
        return bool(ok)

    @staticmethod
    def callback_pointers() -> Dict[str, int]:
        """C addresses of ds4tp_gate_callback, ds4tp_batch_gate_callback and
        ds4tp_big_gate_callback, for engine code that takes a ds4tp_*_fn plus
        ``pair.handle`` as its user data."""
        lib = _lib()
        return {name: ctypes.cast(getattr(lib, "ds4tp_" + name), c_void_p).value
                for name in ("gate_callback", "batch_gate_callback", "big_gate_callback")}

    def set_staging_hooks(self, before: Optional[Callable[..., Optional[int]]] = None,
                          after: Optional[Callable[..., Optional[int]]] = None) -> None:
        """Installs staging hooks (both None removes them).

        ``before(kind, a, b, seq, slab_out)`` fills the memoryview slab_out
        (this rank's partial) before the exchange; ``after(kind, a, b, seq,
        slab_in)`` reads the peer's partial after it. kind is STAGE_ROW
        (a=layer, b=gate) or STAGE_BATCH (a=index, b=rows). Return None or 0
        for success; another int or an exception fails the gate with EIO (the
        exception becomes the Error's __cause__). They run on the gate
        thread and must not call into the library.
        """
        if before is None and after is None:
            _check(_lib().ds4tp_set_staging_hooks(self._live(), None))
            self._hooks = None
            return

        def wrap(fn, fn_type):
            if fn is None:
                return fn_type()

            def trampoline(_user_data, kind, a, b, seq, ptr, nbytes):
                view = _memory_view(ptr, nbytes)
                try:
                    rc = fn(kind, a, b, seq, view)
                    return 0 if rc is None else int(rc)
                except BaseException as e:  # reported through the gate's Error
                    self._hook_error = e
                    return -1
                finally:
                    view.release()

            return fn_type(trampoline)

        hooks = StagingHooks(before_exchange=wrap(before, STAGE_BEFORE_FN),
                             after_exchange=wrap(after, STAGE_AFTER_FN))
        _check(_lib().ds4tp_set_staging_hooks(self._live(), ctypes.byref(hooks)))
        self._hooks = hooks  # the C side keeps the function pointers

    def gate_service_start(self, options: Optional[GateServiceOptions] = None) -> None:
        """Starts the library's gate service thread (defaults when None)."""
        ref = ctypes.byref(options) if options is not None else None
        _check(_lib().ds4tp_gate_service_start(self._live(), ref))

    def gate_service_stop(self) -> None:
        """Stops the gate service and joins its thread (ETIMEDOUT: call again)."""
        _check(_lib().ds4tp_gate_service_stop(self._live()))

    @property
    def gate_service_state(self) -> ServiceState:
        """:class:`ServiceState` of the gate service."""
        return ServiceState(_lib().ds4tp_gate_service_state(self._live()))

    @property
    def gate_seq(self) -> int:
        """The last row gate seq the pair completed (or the service released)."""
        return _lib().ds4tp_gate_seq(self._live())

    def gate_ready(self, slot: int, seq: int) -> None:
        """Stores ``seq`` into ready[slot] (the engine's word for the gate
        service): one aligned 8-byte store. Python has no release store: the
        slab writes before it are ordered by the CPU on x86-64 (TSO), not on
        weakly ordered CPUs (arm64), where Python should drive gates with
        gate_exchange instead."""
        c_uint64.from_address(self._flag_address("gpu_flags_offset", slot)).value = seq

    def gate_released(self, slot: int) -> int:
        """Reads release[slot] (the service's word): the last seq whose peer
        partial landed in in[slot], GATE_POISON after a failure."""
        return c_uint64.from_address(self._flag_address("gpu_release_offset", slot)).value

    def _flag_address(self, region, slot):
        layout = self.layout()
        if not 0 <= slot < layout.slots:
            raise Error(Status.EINVAL, f"slot {slot} outside 0..{layout.slots - 1}")
        base = self.slab_base
        if not base:
            raise Error(Status.ESTATE, "no slab attached: call attach_slab first")
        return base + getattr(layout, region) + slot * layout.flag_stride

    def __repr__(self) -> str:
        if self._h is None:
            return "<ds4tp.Pair closed>"
        return f"<ds4tp.Pair rank {self.rank} transport {transport_name(self.transport)}>"
