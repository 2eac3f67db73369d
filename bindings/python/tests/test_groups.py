"""Groups from Python: N threads with one handle each (the local form),
all_reduce in place on numpy arrays, array('f'), memoryviews and the
group buffer, every dtype, checked against a rank-order reference; two ranks over tcp in the
process form; refusals (read-only buffer, unknown format, closed handle)."""

import array
import struct
import threading
import time

import pytest

import ds4tp
from group_threads import run_ranks

try:
    import numpy as np
except ImportError:  # numpy is optional; the array/memoryview cases still run
    np = None


def f32_bits(x):
    """x rounded to float32 (Python floats are doubles)."""
    return struct.unpack("f", struct.pack("f", x))[0]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_local_all_reduce_array_f32(n):
    count = 1000
    groups = ds4tp.Group.local(n)
    out = [None] * n

    def rank(r, g):
        assert g.rank == r and g.size == n
        v = array.array("f", [r + i * 0.25 for i in range(count)])
        assert g.all_reduce(v) is v
        out[r] = v

    try:
        run_ranks(groups, rank)
    finally:
        for g in groups:
            g.close()
    for i in (0, 1, count - 1):
        acc = 0.0
        for r in range(n):
            acc = f32_bits(acc + f32_bits(r + i * 0.25))
        assert out[0][i] == acc, f"element {i}: {out[0][i]} != {acc}"
    for r in range(1, n):
        assert out[r].tobytes() == out[0].tobytes(), f"rank {r} bits differ from rank 0"


@pytest.mark.parametrize("n", [2, 3])
def test_local_group_buffer_in_place(n):
    """The group buffer as a memoryview: filled, all-reduced at its start
    (the no-copy path over shm), read back; close() ends the view."""
    count = 4096  # 16 KiB of f32: the home path for 2 ranks on 2+ cores
    groups = ds4tp.Group.local(n)
    out = [None] * n
    views = []

    def rank(r, g):
        v = g.buffer("f")
        assert v.nbytes >= count * 4
        v[:count] = array.array("f", [r + i * 0.25 for i in range(count)])
        g.all_reduce(v[:count])
        out[r] = v[:count].tobytes()
        views.append(v)

    try:
        run_ranks(groups, rank)
    finally:
        for g in groups:
            g.close()
    want = array.array("f", [0.0] * count)
    for i in range(count):
        acc = 0.0
        for r in range(n):
            acc = f32_bits(acc + f32_bits(r + i * 0.25))
        want[i] = acc
    for r in range(n):
        assert out[r] == want.tobytes(), f"rank {r}: group buffer result differs from the reference"
    with pytest.raises(ValueError):
        views[0][0]  # released by close(): no access to freed memory


@pytest.mark.skipif(np is None, reason="numpy not installed")
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_local_all_reduce_numpy(n, dtype):
    count = 40001  # more than one default chunk for f16
    rng = np.random.default_rng(7)
    data = [rng.standard_normal(count).astype(np.float32) for _ in range(n)]
    if dtype == "bfloat16":  # carried as uint16: the top half of a float32
        inputs = [(d.view(np.uint32) >> 16).astype(np.uint16) for d in data]
        as_f32 = [(x.astype(np.uint32) << 16).view(np.float32) for x in inputs]
        kind = ds4tp.Dtype.BF16
    else:
        inputs = [d.astype(dtype) for d in data]
        as_f32 = [x.astype(np.float32) for x in inputs]
        kind = None  # from the array's format
    ref = as_f32[0].copy()
    for x in as_f32[1:]:
        ref = (ref + x).astype(np.float32)
    bufs = [x.copy() for x in inputs]
    groups = ds4tp.Group.local(n)
    try:
        run_ranks(groups, lambda r, g: g.all_reduce(bufs[r], dtype=kind))
    finally:
        for g in groups:
            g.close()
    if dtype == "float32":
        want = ref
    elif dtype == "float16":
        want = ref.astype(np.float16)
    else:  # round to nearest even, as the library does (no NaNs here)
        u = ref.view(np.uint32).astype(np.uint64)
        want = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    for r in range(n):
        assert bufs[r].tobytes() == bufs[0].tobytes(), f"rank {r} bits differ from rank 0"
    bad = np.flatnonzero(bufs[0].view(np.uint16 if dtype != "float32" else np.uint32)
                         != want.view(bufs[0].view(np.uint16 if dtype != "float32"
                                                   else np.uint32).dtype))
    assert bad.size == 0, f"{bad.size} elements differ from the reference, first at {bad[:5]}"


def test_local_memoryview_and_collectives():
    groups = ds4tp.Group.local(2)
    seen = [None, None]

    def rank(r, g):
        raw = bytearray(struct.pack("4f", 1, 2, 3, 4 + r))
        g.all_reduce(memoryview(raw).cast("f"))
        got = list(struct.unpack("4f", raw))
        assert got == [2, 4, 6, 9], got
        gathered = bytearray(8)
        g.all_gather(bytes([r] * 4), gathered)
        assert gathered == bytes([0] * 4 + [1] * 4)
        b = bytearray(b"root" if r == 1 else b"....")
        g.broadcast(b, root=1)
        assert b == b"root"
        g.barrier()
        seen[r] = True

    try:
        run_ranks(groups, rank)
    finally:
        for g in groups:
            g.close()
    assert seen == [True, True]


def test_refusals_name_the_problem():
    groups = ds4tp.Group.local(2)
    g = groups[0]
    with pytest.raises(TypeError, match="writable"):
        g.all_reduce(bytes(16), dtype=ds4tp.Dtype.F32)
    with pytest.raises(TypeError, match="element type"):
        g.all_reduce(array.array("h", [1, 2]))  # int16: no library dtype
    with pytest.raises(ValueError):
        g.all_reduce(array.array("f", [1.0]), dtype=7)  # not a Dtype
    for h in groups:
        h.close()
    with pytest.raises(ds4tp.Error, match="closed"):
        g.barrier()


def test_mark_failed_releases_the_peer():
    groups = ds4tp.Group.local(2)
    caught = []

    def waiter():
        try:
            groups[0].all_reduce(array.array("f", [1.0] * 16))
        except ds4tp.Error as e:
            caught.append(e)

    t = threading.Thread(target=waiter)
    t.start()
    groups[1].mark_failed()
    t.join(30)
    assert not t.is_alive()
    assert caught and caught[0].status == ds4tp.Status.EFAILED, caught
    assert "rank 1" in str(caught[0]), str(caught[0])
    assert groups[0].failed == ds4tp.Status.EFAILED
    for g in groups:
        g.close()


def test_two_ranks_over_tcp_process_form():
    opts = [ds4tp.GroupOptions(rank=r, group_size=2, rendezvous_host="127.0.0.1",
                               transport=ds4tp.Transport.TCP, connect_timeout_ms=20000,
                               op_timeout_ms=20000, spin_us=0)
            for r in range(2)]
    opts[0].rendezvous_port = 0
    g0 = ds4tp.Group(opts[0])
    opts[1].rendezvous_port = g0.rendezvous_port
    g1 = ds4tp.Group(opts[1])
    groups = [g0, g1]

    def rank(r, g):
        g.connect()
        assert g.transport == ds4tp.Transport.TCP
        v = array.array("f", [float(r + 1)] * 300)
        g.all_reduce(v)
        assert set(v) == {3.0}

    try:
        run_ranks(groups, rank)
    finally:
        for g in groups:
            g.close()


def test_bad_spin_option_is_refused():
    with pytest.raises(ds4tp.Error) as e:
        ds4tp.Group.local(2, ds4tp.GroupOptions(spin_us=-5))
    assert e.value.status == ds4tp.Status.EINVAL
    assert "spin_us" in str(e.value)


def test_group_stats_count_the_all_reduces():
    groups = ds4tp.Group.local(2)
    try:
        run_ranks(groups, lambda r, g: [g.all_reduce(array.array("f", [1.0] * 64)) for _ in range(3)])
        st = groups[0].stats()
        assert st["all_reduces"] == 3, f"all_reduces = {st['all_reduces']}, want 3"
        assert st["all_reduce"]["count"] == 3, st["all_reduce"]
        # Every kind on its own: the all-reduces, and none of the others.
        assert st["collectives"]["all_reduce"] == 3, st["collectives"]
        assert st["collective"]["all_reduce"]["count"] == 3, st["collective"]["all_reduce"]
        assert st["collectives"]["reduce_scatter"] == 0, st["collectives"]
        assert isinstance(st["transport"], ds4tp.Transport), st["transport"]
        assert "ds4tp" in groups[0].prometheus()
        plan = groups[0].plan()
        assert plan.startswith("plan: 1 host x 2 ranks; shm within the host"), plan
        assert groups[1].plan() == plan, (groups[1].plan(), plan)
        assert groups[0].topology(1) == (0, 1, False), groups[0].topology(1)
        with pytest.raises(ds4tp.Error):
            groups[0].topology(2)
        groups[0].stats_reset()
        assert groups[0].stats()["all_reduces"] == 0, "stats_reset did not reset"
    finally:
        for g in groups:
            g.close()


def test_group_names_its_late_rank_and_dumps_its_flight_recorder(tmp_path):
    groups = ds4tp.Group.local(2)
    try:
        def body(r, g):
            for i in range(3):
                if r == 1 and i == 1:
                    time.sleep(0.2)  # rank 1 comes late to the second call
                g.all_reduce(array.array("f", [1.0] * 64))
        run_ranks(groups, body)
        st = groups[0].stats()
        assert len(st["arrived_last"]) == 16, st["arrived_last"]
        assert st["arrived_last"][1] >= 1, st["arrived_last"]
        assert st["lateness"][1]["count"] == 3, st["lateness"][1]
        assert st["lateness"][1]["sum_ns"] >= 100_000_000, st["lateness"][1]
        path = str(tmp_path / "flight-%r")
        groups[0].dump(path)
        text = (tmp_path / "flight-0").read_text()
        assert text.startswith("ds4tp group flight recorder: rank 0 of 2"), text
        assert '"traceEvents"' in (tmp_path / "flight-0.json").read_text()
    finally:
        for g in groups:
            g.close()


def test_split_phase_requests_run_in_issue_order_and_name_failures():
    groups = ds4tp.Group.local(2)
    try:
        def body(r, g):
            x = array.array("f", [float(r + 1)] * 256)
            first = g.all_reduce_start(x)
            second = g.all_reduce_start(x)  # the same buffer: only issue order gives 6
            out = bytearray(2 * 16)
            gathered = g.all_gather_start(bytes([r]) * 16, out)
            done = g.barrier_start()
            assert second.wait() is x
            assert first.test(), "an earlier request is not done after a later one"
            first.wait()
            assert gathered.wait() == bytes([0]) * 16 + bytes([1]) * 16
            done.wait()
            assert x[0] == 6.0 and x[-1] == 6.0, (x[0], x[-1])
        run_ranks(groups, body)
        # A refusal found when the call runs is the request's error.
        req = groups[0].all_reduce_start(array.array("f", [1.0] * 3), op=ds4tp.ReduceOp.MAX)
        groups[1].mark_failed()
        with pytest.raises(ds4tp.Error) as e:
            req.wait()
        assert "rank 1" in e.value.message, e.value.message
    finally:
        for g in groups:
            g.close()
