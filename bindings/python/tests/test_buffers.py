"""Vectors from any buffer: numpy arrays (when numpy is installed), bytearray,
array, mmap and strided views go wherever the binding takes a vector, and
any writable C-contiguous buffer wherever it fills one. A leader and a worker
in two threads of this process (ctypes releases the GIL in every C call)."""

import array
import mmap
import os
import threading

import pytest

import ds4tp

# Under TSan the two ranks' Python threads share Python objects ordered by
# the GIL, which TSan (uninstrumented interpreter) cannot see.
two_threads = pytest.mark.skipif(os.environ.get("DS4TP_TEST_TSAN") == "1",
                                 reason="two Python ranks in one process under TSan")

N_EMBD = 32
IDENT = dict(model_bytes=1, n_layer=1, n_embd=N_EMBD, n_vocab=10)


def run_pair(leader_fn, worker_fn):
    """Runs both ranks to completion; re-raises the first failure."""
    quiet = dict(log_level=ds4tp.LogLevel.WARN, connect_timeout_ms=20000)
    ident = ds4tp.Identity(**IDENT)
    leader = ds4tp.Pair(ds4tp.Options.leader(port=0, **quiet), ident)
    errors, results = [], {}

    def worker_main():
        try:
            with ds4tp.Pair(ds4tp.Options.worker("127.0.0.1", leader.listen_port, **quiet),
                            ds4tp.Identity(**IDENT)) as tp:
                tp.connect()
                tp.attach_slab()
                results["worker"] = worker_fn(tp)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    t = threading.Thread(target=worker_main)
    t.start()
    try:
        with leader:
            leader.connect()
            leader.attach_slab()
            results["leader"] = leader_fn(leader)
    finally:
        t.join(60)
    if errors:
        raise errors[0]
    return results


@two_threads
def test_stdlib_buffers_in_gates_and_logits():
    def leader(tp):
        tp.out_vector(0, ds4tp.GATE_ATTN)[:] = array.array("f", [1.5] * N_EMBD)
        tp.gate_exchange(0, ds4tp.GATE_ATTN, 1)
        got = list(tp.in_vector(0, ds4tp.GATE_ATTN))
        into = bytearray(4096)
        out = mmap.mmap(-1, 4096)
        out.write(b"\x01" * 4096)
        tp.big_gate_exchange(0, 1, out, into)
        tp.send_session_create(1, 64)
        tp.wait_ack(1)
        tp.send_eval(1, seq=1, token=7, logits_floats=8)
        logits = array.array("f", bytes(8 * 4))
        assert tp.recv_logits(8, into=logits) is logits
        tp.send_stop()
        return got, bytes(into), list(logits)

    def worker(tp):
        tp.out_vector(0, ds4tp.GATE_ATTN)[:] = array.array("f", [2.5] * N_EMBD)
        tp.gate_exchange(0, ds4tp.GATE_ATTN, 1)
        into = array.array("B", bytes(4096))
        tp.big_gate_exchange(0, 1, b"\x02" * 4096, into)
        cmd = tp.recv_command(timeout_ms=20000)
        assert cmd.kind == ds4tp.CommandKind.SESSION_CREATE
        tp.send_ack()
        cmd = tp.recv_command(timeout_ms=20000)
        # A strided (every other element) read-only view of doubles.
        doubles = memoryview(array.array("d", [float(cmd.token)] * 16))[::2]
        tp.send_logits(doubles)
        assert tp.recv_command(timeout_ms=20000).kind == ds4tp.CommandKind.STOP
        return bytes(into)

    r = run_pair(leader, worker)
    got, big, logits = r["leader"]
    assert got == [2.5] * N_EMBD
    assert big == b"\x02" * 4096 and r["worker"] == b"\x01" * 4096
    assert logits == [7.0] * 8


@two_threads
def test_numpy_arrays_wherever_a_vector_goes():
    np = pytest.importorskip("numpy")

    def leader(tp):
        out = np.frombuffer(tp.out_vector(0, ds4tp.GATE_ATTN), dtype=np.float32)
        out[:] = np.arange(N_EMBD, dtype=np.float32)          # a numpy view of the slab
        tp.gate_exchange(0, ds4tp.GATE_ATTN, 1)
        peer = np.asarray(tp.in_vector(0, ds4tp.GATE_ATTN)).copy()
        into = np.zeros((4, 256), dtype=np.float32)            # 2-D, written in place
        tp.big_gate_exchange(0, 1, np.full((4, 256), 3.0, dtype=np.float32), into)
        tp.send_session_create(1, 64)
        tp.wait_ack(1)
        tp.send_eval(1, seq=1, token=9, logits_floats=8)
        logits = np.zeros(8, dtype=np.float32)
        tp.recv_logits(8, into=logits)
        tp.send_stop()
        return peer, into, logits

    def worker(tp):
        tp.out_vector(0, ds4tp.GATE_ATTN)[:] = np.full(N_EMBD, -1.0, dtype=np.float32)
        tp.gate_exchange(0, ds4tp.GATE_ATTN, 1)
        into = np.zeros(1024, dtype=np.float32)
        tp.big_gate_exchange(0, 1, np.full(1024, 4.0, dtype=np.float32), into)
        assert tp.recv_command(timeout_ms=20000).kind == ds4tp.CommandKind.SESSION_CREATE
        tp.send_ack()
        cmd = tp.recv_command(timeout_ms=20000)
        # float64, strided: converted to float32 on the way.
        tp.send_logits(np.full(16, float(cmd.token), dtype=np.float64)[::2])
        assert tp.recv_command(timeout_ms=20000).kind == ds4tp.CommandKind.STOP
        with pytest.raises(ValueError, match="C-contiguous"):
            tp.recv_logits(4, into=np.zeros(8, dtype=np.float32)[::2])
        return into

    r = run_pair(leader, worker)
    peer, into, logits = r["leader"]
    assert (peer == -1.0).all() and (into == 4.0).all() and (logits == 9.0).all()
    assert (r["worker"] == 3.0).all()


def test_library_not_found_names_every_place_tried(tmp_path):
    import subprocess
    import sys
    env = dict(os.environ, DS4TP_LIBRARY=str(tmp_path / "nowhere" / "libds4tp.so"))
    code = "import ds4tp\ntry:\n ds4tp.version()\nexcept ds4tp.LibraryNotFound as e:\n print(e)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert str(tmp_path / "nowhere" / "libds4tp.so") in out.stdout, out.stdout + out.stderr
    assert "DS4TP_LIBRARY" in out.stdout

    # An install prefix: $DS4TP_PREFIX/lib/libds4tp.so.0 is found and loaded.
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libds4tp.so.0").symlink_to(os.path.realpath(ds4tp._loader._lib().path))
    del env["DS4TP_LIBRARY"]
    env["DS4TP_PREFIX"] = str(tmp_path)
    code = "import ds4tp; ds4tp.check_version(); print(ds4tp._loader._lib().path)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == str(tmp_path / "lib" / "libds4tp.so.0"), out.stdout + out.stderr


def test_the_loaded_library_has_this_packages_major_version():
    ds4tp.check_version()
    assert ds4tp.version() >> 16 == ds4tp.VERSION_MAJOR
    assert ds4tp.__version__.split(".")[0] == ds4tp.version_string().split(".")[0]
