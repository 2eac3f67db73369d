"""The control plane from Python against C (tests/bindings/ds4tp_peer.c
--control): a Python leader sends every command to a C worker (callback
loop or manual), and a Python worker (worker_run with Python callbacks, or
recv_command by hand) serves a C leader. Every value is checked on both
sides; see the peer's control_leader() and worker_handle()."""

import array

import pytest

import ds4tp

PEER_IDENTITY = dict(model_bytes=0xB1D, model_id=7, n_vocab=1000, quant_bits=32, ctx_size=512)
N_LAYER, N_EMBD = 2, 32
SID, SID2, LF, HEAD_FLOATS, BAD_SID, FAIL_STATUS = 42, 43, 16, 32, 999, -42
LEADER_CAPS, WORKER_CAPS, EXEC_FLAGS, GOOD_HASH = 0xB, 0x6, 0x5, 0xABCDEF
TEN = list(range(1, 11))
META = bytes(i ^ 0x5A for i in range(ds4tp.DRAFTER_META_BYTES))
K = ds4tp.CommandKind


def logit(kind, row, i):
    return (int(kind) * 10000 + row * 100 + i) * 0.5


def logits(kind, rows):
    return array.array("f", [logit(kind, r, i) for r in range(rows) for i in range(LF)])


def embd_value(t, i):
    return (t * 1000 + i) * 0.25


def head_row():
    return array.array("f", [(1000 + i) * 0.125 for i in range(HEAD_FLOATS)])


def image():
    return ds4tp.Image(token_start=1, token_count=2, data_width=N_EMBD, width=4, height=4,
                       content_width=4, content_height=3,
                       fingerprint=bytes((i * 7) & 0xFF for i in range(32)),
                       embd=[embd_value(t, i) for t in range(2) for i in range(N_EMBD)])


def identity():
    return ds4tp.Identity(n_layer=N_LAYER, n_embd=N_EMBD, **PEER_IDENTITY)


def opts(quiet):
    return dict(quiet, frame_timeout_ms=20000)


# ---- leader -------------------------------------------------------------------

def read_logits(tp, kind, row):
    assert tp.recv_logits(LF).tolist() == logits(kind, row + 1)[row * LF:].tolist()


def leader_script(tp, fail):
    tp.connect()
    assert tp.agree_execution_mode(EXEC_FLAGS, LEADER_CAPS) == LEADER_CAPS & WORKER_CAPS
    assert tp.agree_drafter_split(True, META) == (True, True)

    tp.send_session_create(SID, 512)
    assert tp.wait_ack(SID) == ds4tp.ACK_DONE
    tp.send_sync(SID, TEN, LF)
    assert tp.wait_sync(SID) == (0, 10)
    read_logits(tp, K.SYNC, 0)

    tp.send_session_create(SID2, 256)
    assert tp.wait_ack(SID2) == 0
    tp.send_sync(SID2, TEN, LF)
    assert tp.sync_checkpoint(1, 5, 10, requested=False) is True
    assert tp.wait_sync(SID2) == (ds4tp.ACK_CANCELLED, 5)
    with pytest.raises(ds4tp.Error) as e:  # a cancelled sync owes no logits
        tp.recv_logits(LF)
    assert e.value.status == ds4tp.Status.ESTATE

    tp.send_sync_images(SID, TEN[:6], [image()], LF)
    assert tp.wait_sync(SID) == (0, 6)
    read_logits(tp, K.SYNC_IMAGES, 0)
    tp.send_eval(SID, 1, 77, LF)
    read_logits(tp, K.EVAL, 0)
    tp.send_mtp(SID, 2, 78, 3)
    assert tp.wait_ack(SID) == 0
    tp.send_rewind(SID, 5)
    tp.send_invalidate(SID)
    tp.send_spec_restore(SID, 4)
    assert tp.wait_ack(SID) == ds4tp.ACK_UNAVAILABLE

    tp.send_eval_batch([(SID, 5), ds4tp.BatchItem(SID2, 6, 0)], LF)
    assert tp.wait_ack(0) == 0
    read_logits(tp, K.EVAL_BATCH, 0)
    read_logits(tp, K.EVAL_BATCH, 1)
    tp.send_mixed_batch(SID, [9, 8, 7], [(SID2, 3)], LF)
    assert tp.wait_ack(SID) == 0
    read_logits(tp, K.MIXED_BATCH, 0)
    read_logits(tp, K.MIXED_BATCH, 1)

    tp.send_verify(SID, [11, 12, 13], ds4tp.VERIFY_DRAFT_SHARED)
    assert tp.block_begin(3, N_LAYER, 1) == 1
    assert tp.small_exchange(b"leader!!") == b"worker!!"
    assert tp.head_row_recv(1, HEAD_FLOATS) == head_row()
    tp.block_end()
    tp.send_verify_commit(ds4tp.CommitMode.PREFIX, 2)
    tp.send_draft(SID, 5, 7, ds4tp.DraftMode.PROPOSE)

    tp.hash_check(SID, 9, GOOD_HASH)
    with pytest.raises(ds4tp.Error) as e:
        tp.hash_check(SID, 10, 1)
    assert e.value.status == ds4tp.Status.EDIVERGED and not tp.failed

    tp.send_session_destroy(SID2)
    assert tp.wait_ack(SID2) == 0
    tp.send_session_destroy(SID)
    assert tp.wait_ack(SID) == 0
    if fail:
        tp.send_session_destroy(BAD_SID)
        with pytest.raises(ds4tp.Error) as e:
            tp.wait_ack(BAD_SID)
        # EREMOTE per ds4tp.h; EFAILED (same words) when the library's
        # watcher sees the worker close first (a known library race).
        assert e.value.status in (ds4tp.Status.EREMOTE, ds4tp.Status.EFAILED)
        assert "no session 999" in e.value.message
        assert tp.remote_status == FAIL_STATUS and tp.failed
        return
    tp.send_stop()
    # Closing handshake (see ds4tp_peer.c): the worker has read STOP.
    assert tp.small_exchange(b"L") == b"W"


@pytest.mark.parametrize("worker", ["loop", "manual"])
@pytest.mark.parametrize("fail", [False, True], ids=["stop", "remote-failure"])
def test_python_leader_c_worker(peer_exe, child, quiet, worker, fail):
    with ds4tp.Pair(ds4tp.Options.leader(port=0, **opts(quiet)), identity()) as tp:
        args = [peer_exe, "worker", "--control", "--port", tp.listen_port, "--layers", N_LAYER,
                "--embd", N_EMBD]
        c = child(args + (["--manual"] if worker == "manual" else []))
        try:
            leader_script(tp, fail)
        finally:
            rc = c.finish()
    assert rc == 0, c.err
    assert ("reported the failure" in c.out) == fail
    assert "peer OK: rank 1" in c.out


# ---- worker -----------------------------------------------------------------

class Worker:
    """The Python twin of the peer's worker_handle: one method per command
    kind (the names of ds4tp_worker_ops)."""

    def __init__(self):
        self.commands = 0
        self.failed_on_purpose = False

    def session_create(self, tp, cmd, reply):
        self.commands += 1
        assert (cmd.session_id, cmd.ctx_size) in [(SID, 512), (SID2, 256)]

    def session_destroy(self, tp, cmd, reply):
        self.commands += 1
        if cmd.session_id == BAD_SID:
            self.failed_on_purpose = True
            reply.message = f"no session {BAD_SID} on the worker"
            return FAIL_STATUS
        assert cmd.session_id in (SID, SID2)

    def sync(self, tp, cmd, reply):
        self.commands += 1
        assert cmd.tokens == TEN and cmd.logits_floats == LF
        if cmd.session_id == SID2:
            assert tp.sync_checkpoint(1, 5, 10, requested=True) is True
            reply.position = 5
            return ds4tp.ACK_CANCELLED
        assert reply.position == 10 and reply.logits_rows == 1
        reply.logits[:] = logits(K.SYNC, 1)

    def sync_images(self, tp, cmd, reply):
        self.commands += 1
        assert cmd.tokens == TEN[:6] and len(cmd.images) == 1
        im, want = cmd.images[0], image()
        for name in ("token_start", "token_count", "data_width", "width", "height",
                     "content_width", "content_height", "fingerprint"):
            assert getattr(im, name) == getattr(want, name), name
        assert im.embd.tolist() == want.embd
        reply.logits[:] = logits(K.SYNC_IMAGES, 1)

    def eval(self, tp, cmd, reply):
        self.commands += 1
        assert (cmd.session_id, cmd.seq, cmd.token, cmd.logits_floats) == (SID, 1, 77, LF)
        reply.logits[:] = logits(K.EVAL, 1)

    def mtp(self, tp, cmd, reply):
        self.commands += 1
        assert (cmd.session_id, cmd.seq, cmd.token, cmd.limit) == (SID, 2, 78, 3)

    def rewind(self, tp, cmd, reply):
        self.commands += 1
        assert (cmd.session_id, cmd.pos) == (SID, 5)

    def invalidate(self, tp, cmd, reply):
        self.commands += 1
        assert cmd.session_id == SID

    def spec_restore(self, tp, cmd, reply):
        self.commands += 1
        assert (cmd.session_id, cmd.pos) == (SID, 4)
        return ds4tp.ACK_UNAVAILABLE

    def eval_batch(self, tp, cmd, reply):
        self.commands += 1
        assert [(i.session_id, i.token) for i in cmd.items] == [(SID, 5), (SID2, 6)]
        assert (reply.logits_rows, reply.logits_floats) == (2, LF)
        reply.logits[:] = logits(K.EVAL_BATCH, 2)

    def mixed_batch(self, tp, cmd, reply):
        self.commands += 1
        assert cmd.session_id == SID and cmd.tokens == [9, 8, 7]
        assert [(i.session_id, i.token) for i in cmd.items] == [(SID2, 3)]
        reply.logits[:] = logits(K.MIXED_BATCH, 2)

    def verify(self, tp, cmd, reply):
        self.commands += 1
        assert cmd.tokens == [11, 12, 13] and cmd.flags == ds4tp.VERIFY_DRAFT_SHARED
        assert tp.block_begin(3, N_LAYER, 2) == 1
        assert tp.small_exchange(b"worker!!") == b"leader!!"
        tp.head_row_send(1, head_row())
        tp.block_end()

    def verify_commit(self, tp, cmd, reply):
        self.commands += 1
        assert (cmd.mode, cmd.count) == (ds4tp.CommitMode.PREFIX, 2)

    def draft(self, tp, cmd, reply):
        self.commands += 1
        assert (cmd.session_id, cmd.token, cmd.pos, cmd.mode) == (SID, 5, 7, ds4tp.DraftMode.PROPOSE)

    def hash(self, tp, cmd, reply):
        self.commands += 1
        assert cmd.session_id == SID and cmd.seq in (9, 10)
        reply.hash = GOOD_HASH if cmd.seq == 9 else 2


class _Reply:
    """A Reply stand-in for the manual loop (plain attributes)."""

    def __init__(self, cmd, rows):
        self.logits_rows, self.logits_floats = rows, cmd.logits_floats
        self.logits = array.array("f", bytes(rows * cmd.logits_floats * 4))
        self.position, self.hash, self.message = len(cmd.tokens), 0, ""


ACKED = {K.SESSION_CREATE, K.SESSION_DESTROY, K.MTP, K.SPEC_RESTORE, K.EVAL_BATCH, K.MIXED_BATCH}


def rows_owed(cmd):
    if not cmd.logits_floats:
        return 0
    return {K.EVAL: 1, K.SYNC: 1, K.SYNC_IMAGES: 1, K.EVAL_BATCH: len(cmd.items),
            K.MIXED_BATCH: 1 + len(cmd.items),
            K.VERIFY_COMMIT: int(cmd.mode == ds4tp.CommitMode.ROLLBACK and cmd.count > 0)
            }.get(cmd.kind, 0)


def serve_by_hand(tp, w):
    """recv_command and the explicit replies, as ds4tp.h describes them."""
    while True:
        cmd = tp.recv_command(timeout_ms=30000)
        if cmd.kind == K.STOP:
            return
        reply = _Reply(cmd, rows_owed(cmd))
        status = getattr(w, cmd.kind.name.lower())(tp, cmd, reply) or 0
        if status < 0:
            tp.send_error(status, reply.message)
            return
        if cmd.kind in ACKED:
            tp.send_ack(status)
        elif cmd.kind in (K.SYNC, K.SYNC_IMAGES):
            tp.send_sync_ack(status, reply.position)
        elif cmd.kind == K.HASH:
            try:
                tp.hash_check(cmd.session_id, cmd.seq, reply.hash)
            except ds4tp.Error as e:
                assert e.status == ds4tp.Status.EDIVERGED and cmd.seq == 10
        if status == 0:
            for r in range(reply.logits_rows):
                tp.send_logits(reply.logits[r * LF:(r + 1) * LF])


@pytest.mark.parametrize("mode", ["worker_run", "manual"])
@pytest.mark.parametrize("fail", [False, True], ids=["stop", "remote-failure"])
def test_python_worker_c_leader(peer_exe, child, quiet, mode, fail):
    c = child([peer_exe, "leader", "--control", "--layers", N_LAYER, "--embd", N_EMBD]
              + (["--fail"] if fail else []))
    port = c.read_port()
    w = Worker()
    with ds4tp.Pair(ds4tp.Options.worker("127.0.0.1", port, **opts(quiet)), identity()) as tp:
        try:
            tp.connect()
            assert tp.agree_execution_mode(EXEC_FLAGS, WORKER_CAPS) == LEADER_CAPS & WORKER_CAPS
            assert tp.agree_drafter_split(True, META) == (True, True)
            if mode == "manual":
                serve_by_hand(tp, w)
            elif fail:
                with pytest.raises(ds4tp.Error) as e:
                    tp.worker_run(w)
                assert e.value.status == ds4tp.Status.EFAILED
            else:
                tp.worker_run(w)
            if not fail:
                assert tp.small_exchange(b"W") == b"L"  # the leader's closing handshake
        finally:
            rc = c.finish()
    assert rc == 0, c.err
    assert "peer OK: rank 0" in c.out
    assert w.failed_on_purpose == fail
    assert w.commands == 19 + fail


def test_callback_exception_reaches_the_leader_and_the_caller(peer_exe, child, quiet):
    c = child([peer_exe, "leader", "--control", "--layers", N_LAYER, "--embd", N_EMBD])
    port = c.read_port()

    class Broken(Worker):
        def sync(self, tp, cmd, reply):
            raise RuntimeError("engine blew up")

    with ds4tp.Pair(ds4tp.Options.worker("127.0.0.1", port, **opts(quiet)), identity()) as tp:
        try:
            tp.connect()
            tp.agree_execution_mode(EXEC_FLAGS, WORKER_CAPS)
            tp.agree_drafter_split(True, META)
            with pytest.raises(ds4tp.Error) as e:
                tp.worker_run(Broken())
            assert e.value.status == ds4tp.Status.EFAILED
            assert isinstance(e.value.__cause__, RuntimeError)
        finally:
            c.finish()
    assert c.proc.returncode != 0
    assert "engine blew up" in c.err  # the leader saw the worker's message
