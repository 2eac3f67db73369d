"""The control plane of a :class:`~ds4tp.Pair`: leader commands and replies,
the symmetric calls of both ranks, and the worker side (a mixin of Pair)."""

import array
import ctypes
from ctypes import POINTER, c_int, c_int32, c_uint32
from typing import Any, Iterable, Optional, Tuple

from ._buffers import (UNTYPED_FORMATS, _buffer_address, _floats, _int32s, _native, _view,
                       describe_format)
from ._constants import (ACK_DONE, DRAFTER_META_BYTES, IMAGE_FINGERPRINT_BYTES, Status,
                         WAIT_FOREVER)
from ._loader import Error, _check, _lib, last_error
from ._structs import (COMMAND_FN, BatchItem, Command, Image, ImageSpan, Reply, WORKER_OPS,
                       WorkerOps,
                       _CommandStruct)


def _items(items):
    """A ctypes BatchItem array from BatchItems or (session_id, token) pairs."""
    items = [it if isinstance(it, BatchItem) else BatchItem(*it) for it in items]
    return (BatchItem * max(len(items), 1))(*items), len(items)


def _float_out(into, count, what):
    """(buffer, address, keepalive) for ``count`` float32s to be written
    into: ``into`` (writable, large enough) or a new array('f')."""
    if into is None:
        into = array.array("f", bytes(count * 4))
    fmt = _view(into, f"{what} into").format
    if _native(fmt) not in ("f",) + tuple(UNTYPED_FORMATS):
        raise TypeError(f"{what}: into holds {describe_format(fmt)} but float32 values are "
                        "written: pass a float32 buffer (e.g. np.empty(n, dtype=np.float32)) "
                        "or raw bytes")
    address, nbytes, keep = _buffer_address(into, writable=True, what=f"{what} into")
    if nbytes < count * 4:
        raise Error(Status.EINVAL, f"{what}: buffer holds {nbytes // 4} floats, {count} needed")
    return into, address, keep


class ControlPlane:
    """Control-plane calls; every method needs the live handle (``_live``)."""

    # -- control plane: leader commands ---------------------------------------
    # Each returns once the frame is written (see ds4tp.h for the replies
    # each command is owed); logits_floats is the size of the worker's
    # logits half to read per row, 0 for none.

    def send_session_create(self, session_id: int, ctx_size: int) -> None:
        """SESSION_CREATE; then wait_ack."""
        _check(_lib().ds4tp_send_session_create(self._live(), session_id, ctx_size))

    def send_session_destroy(self, session_id: int) -> None:
        """SESSION_DESTROY; then wait_ack."""
        _check(_lib().ds4tp_send_session_destroy(self._live(), session_id))

    def send_sync(self, session_id: int, tokens: Iterable[int], logits_floats: int = 0) -> None:
        """SYNC: the session's tokens become exactly ``tokens``; then wait_sync."""
        arr, n = _int32s(tokens)
        _check(_lib().ds4tp_send_sync(self._live(), session_id, arr, n, logits_floats))

    def send_sync_images(self, session_id: int, tokens: Iterable[int],
                         images: Iterable[Image], logits_floats: int = 0) -> None:
        """SYNC_IMAGES with :class:`Image` embeddings; then wait_sync."""
        arr, n = _int32s(tokens)
        spans = (ImageSpan * max(len(images), 1))()
        keep = []
        for span, im in zip(spans, images):
            for name in ("token_start", "token_count", "data_width", "width", "height",
                         "content_width", "content_height"):
                setattr(span, name, getattr(im, name))
            fp = bytes(im.fingerprint)[:IMAGE_FINGERPRINT_BYTES]
            ctypes.memmove(span.fingerprint, fp, len(fp))
            address, _, k = _floats(im.embd)
            keep.append(k)
            span.embd = ctypes.cast(address, POINTER(ctypes.c_float))
        _check(_lib().ds4tp_send_sync_images(self._live(), session_id, arr, n, spans, len(images),
                                             logits_floats))

    def send_eval(self, session_id: int, seq: int, token: int, logits_floats: int = 0) -> None:
        """EVAL: one decode step; ``seq`` rises with every EVAL and MTP."""
        _check(_lib().ds4tp_send_eval(self._live(), session_id, seq, token, logits_floats))

    def send_mtp(self, session_id: int, seq: int, token: int, limit: int) -> None:
        """MTP: a multi-token-prediction cycle of up to ``limit`` drafts; then wait_ack."""
        _check(_lib().ds4tp_send_mtp(self._live(), session_id, seq, token, limit))

    def send_rewind(self, session_id: int, pos: int) -> None:
        """REWIND to ``pos`` (no reply)."""
        _check(_lib().ds4tp_send_rewind(self._live(), session_id, pos))

    def send_invalidate(self, session_id: int) -> None:
        """INVALIDATE (no reply)."""
        _check(_lib().ds4tp_send_invalidate(self._live(), session_id))

    def send_spec_restore(self, session_id: int, pos: int) -> None:
        """SPEC_RESTORE to ``pos``; then wait_ack (ACK_UNAVAILABLE: sync in full)."""
        _check(_lib().ds4tp_send_spec_restore(self._live(), session_id, pos))

    def send_eval_batch(self, items: Iterable[Any], logits_floats: int = 0) -> None:
        """EVAL_BATCH of BatchItems or (session_id, token) pairs; then wait_ack(0)."""
        arr, n = _items(items)
        _check(_lib().ds4tp_send_eval_batch(self._live(), arr, n, logits_floats))

    def send_mixed_batch(self, prefill_session_id: int, prompt: Iterable[int],
                         items: Iterable[Any], logits_floats: int = 0) -> None:
        """MIXED_BATCH: a prefill chunk plus one decode step per item; then wait_ack."""
        parr, pn = _int32s(prompt)
        iarr, n = _items(items)
        _check(_lib().ds4tp_send_mixed_batch(self._live(), prefill_session_id, parr, pn, iarr, n,
                                             logits_floats))

    def send_verify(self, session_id: int, drafts: Iterable[int], flags: int = 0) -> None:
        """VERIFY: announces a verify block of the drafts (VERIFY_* flags)."""
        arr, n = _int32s(drafts)
        _check(_lib().ds4tp_send_verify(self._live(), session_id, arr, n, flags))

    def send_verify_commit(self, mode: int, count: int, logits_floats: int = 0) -> None:
        """VERIFY_COMMIT: the decision (:class:`CommitMode`) on the open block."""
        _check(_lib().ds4tp_send_verify_commit(self._live(), int(mode), count, logits_floats))

    def send_draft(self, session_id: int, token: int, pos: int, mode: int) -> None:
        """DRAFT: a lockstep drafter step (:class:`DraftMode`)."""
        _check(_lib().ds4tp_send_draft(self._live(), session_id, token, pos, int(mode)))

    def send_stop(self) -> None:
        """STOP: ends the lockstep; the worker loop returns."""
        _check(_lib().ds4tp_send_stop(self._live()))

    # -- control plane: leader replies ----------------------------------------

    def wait_ack(self, session_id: int) -> int:
        """Reads the COMMAND_ACK of the last command for ``session_id`` (0 for
        EVAL_BATCH) and returns its status (>= 0). A worker failure raises
        Error(EREMOTE); see :attr:`remote_status`."""
        status = c_int32(0)
        _check(_lib().ds4tp_wait_ack(self._live(), session_id, ctypes.byref(status)))
        return status.value

    def wait_sync(self, session_id: int) -> Tuple[int, int]:
        """Reads the SYNC_ACK of the last SYNC*: (status, position)."""
        status, position = c_int32(0), c_uint32(0)
        _check(_lib().ds4tp_wait_sync(self._live(), session_id, ctypes.byref(status),
                                      ctypes.byref(position)))
        return status.value, position.value

    def recv_logits(self, count: int, into: Any = None) -> Any:
        """Reads the next logits half (``count`` floats) into the writable
        float32 buffer ``into``, or a new array('f'), which it returns."""
        into, address, keep = _float_out(into, count, "recv_logits")
        _check(_lib().ds4tp_recv_logits(self._live(), address, count))
        del keep
        return into

    @property
    def remote_status(self) -> int:
        """The status the worker reported with its failure (0 if none)."""
        return _lib().ds4tp_remote_status(self._live())

    # -- control plane: both ranks --------------------------------------------

    def hash_check(self, session_id: int, seq: int, hash: int) -> None:
        """Lockstep state hash check; raises Error(EDIVERGED) when the hashes
        differ (the pair stays usable)."""
        _check(_lib().ds4tp_hash_check(self._live(), session_id, seq, hash))

    def sync_checkpoint(self, point: int, current: int,
                        total: int, requested: bool = False) -> bool:
        """Agreed cancellation at a prefill boundary: True when either rank
        requested it."""
        cancelled = c_int(0)
        _check(_lib().ds4tp_sync_checkpoint(self._live(), point, current, total,
                                            1 if requested else 0, ctypes.byref(cancelled)))
        return bool(cancelled.value)

    def agree_execution_mode(self, flags: int, caps: int = 0) -> int:
        """Start-up agreement: ``flags`` must match the peer's; returns the
        intersection of both ranks' ``caps``."""
        c = c_uint32(caps)
        _check(_lib().ds4tp_agree_execution_mode(self._live(), flags, ctypes.byref(c)))
        return c.value

    def agree_drafter_split(self, mine_on: bool, meta: Optional[bytes] = None) -> Tuple[bool, bool]:
        """Start-up agreement of the split drafter: (agreed, peer_on). ``meta``
        is DRAFTER_META_BYTES bytes (None = zeros)."""
        if meta is not None and len(meta) != DRAFTER_META_BYTES:
            raise Error(Status.EINVAL, f"drafter meta must be {DRAFTER_META_BYTES} bytes, "
                        f"got {len(meta)}")
        buf = ctypes.create_string_buffer(bytes(meta), DRAFTER_META_BYTES) if meta else None
        agreed, peer_on = c_int(0), c_int(0)
        _check(_lib().ds4tp_agree_drafter_split(self._live(), 1 if mine_on else 0, buf,
                                                ctypes.byref(agreed), ctypes.byref(peer_on)))
        return bool(agreed.value), bool(peer_on.value)

    def block_begin(self, rows: int, n_layers: int, gates_per_layer: int = 1) -> int:
        """Verify block begin (both ranks); returns the agreed gates per layer."""
        gpl = c_uint32(gates_per_layer)
        _check(_lib().ds4tp_block_begin(self._live(), rows, n_layers, ctypes.byref(gpl)))
        return gpl.value

    def block_end(self) -> None:
        """Verify block end (both ranks)."""
        _check(_lib().ds4tp_block_end(self._live()))

    def small_exchange(self, mine: bytes) -> bytes:
        """Swaps len(mine) (1..SMALL_EXCHANGE_MAX) bytes with the peer; returns its bytes."""
        mine = bytes(mine)
        peer = ctypes.create_string_buffer(max(len(mine), 1))
        _check(_lib().ds4tp_small_exchange(self._live(), mine, peer, len(mine)))
        return peer.raw[:len(mine)]

    def head_row_send(self, row: int, floats: Any) -> None:
        """Worker -> leader output-head row of the current verify block."""
        address, n, keep = _floats(floats)
        _check(_lib().ds4tp_head_row_send(self._live(), row, address, n))
        del keep

    def head_row_recv(self, row: int, count: int, into: Any = None) -> Any:
        """Leader: receives head row ``row`` (``count`` floats) into the
        writable float32 buffer ``into`` (e.g. a numpy float32 array), or a
        new array('f'), which it returns."""
        into, address, keep = _float_out(into, count, "head_row_recv")
        _check(_lib().ds4tp_head_row_recv(self._live(), row, address, count))
        del keep
        return into

    # -- control plane: worker --------------------------------------------------

    def recv_command(self, timeout_ms: int = WAIT_FOREVER) -> Command:
        """Waits for the next command and returns it as a :class:`Command`."""
        raw = _CommandStruct()
        _lib().ds4tp_command_init(ctypes.byref(raw))
        try:
            _check(_lib().ds4tp_recv_command(self._live(), ctypes.byref(raw), timeout_ms))
            return Command(raw)
        finally:
            _lib().ds4tp_command_free(ctypes.byref(raw))

    def send_ack(self, status: int = ACK_DONE) -> None:
        """COMMAND_ACK for the last command."""
        _check(_lib().ds4tp_send_ack(self._live(), status))

    def send_sync_ack(self, status: int, position: int) -> None:
        """SYNC_ACK: status and the tokens the session holds now."""
        _check(_lib().ds4tp_send_sync_ack(self._live(), status, position))

    def send_logits(self, floats: Any) -> None:
        """One logits half (the command's logits_floats values)."""
        address, n, keep = _floats(floats)
        _check(_lib().ds4tp_send_logits(self._live(), address, n))
        del keep

    def send_error(self, status: int, message: str) -> None:
        """Reports that the last command failed; the worker takes no more."""
        _check(_lib().ds4tp_send_error(self._live(), status, message.encode()))

    def worker_run(self, handler: Any) -> None:
        """Serves commands until STOP (returns) or a failure (raises Error).

        ``handler`` has a method per command kind (``session_create``,
        ``sync``, ``eval``, ... ``hash``: the ds4tp_worker_ops names), each
        called as ``method(pair, command, reply)`` with a :class:`Command` and
        a :class:`Reply`; it returns None/0, a positive ack status, or a
        negative engine status to fail. A kind without a method is reported
        unsupported. An exception fails the command (status -1, its text as
        the message) and becomes the raised Error's __cause__.
        """
        ops = WorkerOps()
        keep = []
        failure = []

        def bind(fn):
            def trampoline(_user_data, _pair, cmd_p, reply_p):
                reply = Reply(reply_p.contents)
                try:
                    rc = fn(self, Command(cmd_p.contents), reply)
                    return 0 if rc is None else int(rc)
                except BaseException as e:  # reported to the leader, re-raised below
                    failure.append(e)
                    reply.message = f"python {type(e).__name__}: {e}"
                    return -1
                finally:
                    reply._release()
            cb = COMMAND_FN(trampoline)
            keep.append(cb)
            return cb

        for name in WORKER_OPS:
            fn = getattr(handler, name, None)
            if fn is not None:
                setattr(ops, name, bind(lambda pair, cmd, reply, fn=fn: fn(pair, cmd, reply)))
        rc = _lib().ds4tp_worker_run(self._live(), ctypes.byref(ops), None)
        if rc != Status.OK:
            raise Error(rc, last_error()) from (failure[0] if failure else None)
