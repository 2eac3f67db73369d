"""The group collectives from Python over N threads (the local form, N = 2,
3, 4, steps of 4 KiB so the larger counts take several): all_reduce,
reduce_scatter (and in place) and reduce for every dtype and op; gather,
scatter, all_gather_v, all_gather_rows and all_to_all_v in elements of
several types. Each result is checked against a numpy reference.

The inputs are exact in every dtype (as tests/group/test_group_ops.cpp's:
multiples of 1/32, products of 1/2, 1, 2 and -1, integers that wrap alike
in any order), so the reference does not depend on the order a plan
combines in: floats combine in float64 and round once, integers in their
own numpy type (which wraps)."""

import itertools

import pytest

import ds4tp
from ds4tp import Dtype, ReduceOp
from group_threads import run_ranks

np = pytest.importorskip("numpy")

# The numpy type that carries each dtype (bf16: its bits, as uint16).
CARRIER = {Dtype.F32: np.float32, Dtype.F16: np.float16, Dtype.BF16: np.uint16,
           Dtype.F64: np.float64, Dtype.I32: np.int32, Dtype.I64: np.int64, Dtype.U8: np.uint8}
COUNTS = [1, 7, 1500]  # one element, a few, and several steps of 4 KiB
FLOATS = (Dtype.F32, Dtype.F16, Dtype.BF16, Dtype.F64)


@pytest.fixture(params=[2, 3, 4])
def groups(request):
    gs = ds4tp.Group.local(request.param, ds4tp.GroupOptions(chunk_bytes=4096))
    yield gs
    for g in gs:
        g.close()


def exact(t, op, r, j):
    """Rank r's elements j (an int64 array) for (dtype, op), as float64."""
    h = (r * 2654435761 + j * 40503 + int(t) * 97) % 1000003
    if t not in FLOATS:
        return (h % 200 - 100).astype(np.float64)
    if op == ReduceOp.PROD:
        return np.array([0.5, 1.0, 2.0, -1.0])[h % 4]
    return (h % 97 - 48) / 32.0


def to_dtype(t, x):
    """float64 values as dtype t's carrier (integers wrap as C casts do)."""
    if t == Dtype.BF16:  # exact values: the top half of the float32 is the bf16
        return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if t in FLOATS:
        return x.astype(CARRIER[t])
    return x.astype(np.int64).astype(CARRIER[t])


COMBINE = {ReduceOp.SUM: np.add, ReduceOp.PROD: np.multiply, ReduceOp.MAX: np.maximum,
           ReduceOp.MIN: np.minimum}


def reference(t, op, n, j):
    """The op over ranks 0..n-1 of elements j, in dtype t's carrier."""
    if t in FLOATS:
        acc = exact(t, op, 0, j)
        for r in range(1, n):
            acc = COMBINE[op](acc, exact(t, op, r, j))
        return to_dtype(t, acc)
    acc = to_dtype(t, exact(t, op, 0, j))
    with np.errstate(over="ignore"):
        for r in range(1, n):
            acc = COMBINE[op](acc, to_dtype(t, exact(t, op, r, j))).astype(CARRIER[t])
    return acc


def same(got, want, what):
    """Asserts bit equality, naming the first differing element."""
    g, w = np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8)
    assert g.shape == w.shape, f"{what}: {g.size} bytes, {w.size} expected"
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, (f"{what}: {bad.size} bytes differ from the numpy reference, first at "
                           f"byte {bad[0]}: got {np.asarray(got)[:8]}, want {np.asarray(want)[:8]}")


def test_reductions_every_dtype_and_op(groups):
    n = len(groups)

    def rank(me, g):
        for t, op, count in itertools.product(Dtype, ReduceOp, COUNTS):
            what = f"dtype {t.name} op {op.name} count {count}"
            kind = Dtype.BF16 if t == Dtype.BF16 else None  # the others from the format
            j = np.arange(count, dtype=np.int64)
            want = reference(t, op, n, j)
            buf = to_dtype(t, exact(t, op, me, j))
            assert g.all_reduce(buf, dtype=kind, op=op) is buf
            same(buf, want, f"all_reduce {what}")
            # reduce_scatter: rank r's element j of segment s is exact(r, s*count + j).
            src = to_dtype(t, exact(t, op, me, np.arange(count * n, dtype=np.int64)))
            seg_want = reference(t, op, n, me * count + j)
            out = np.zeros(count, dtype=CARRIER[t])
            g.reduce_scatter(src, out, op=op, dtype=kind)
            same(out, seg_want, f"reduce_scatter {what}")
            mine = src[me * count:(me + 1) * count]  # in place: this rank's segment of src
            g.reduce_scatter(src, mine, op=op, dtype=kind)
            same(mine, seg_want, f"reduce_scatter in place {what}")
            root = count % n
            buf = to_dtype(t, exact(t, op, me, j))
            before = buf.copy()
            g.reduce(buf, root, op=op, dtype=kind)
            same(buf, want if me == root else before, f"reduce to rank {root} {what}")

    run_ranks(groups, rank)


def byte_of(r, j):
    """Rank r's bytes j (an int64 array) for the moving collectives."""
    return ((r * 73 + j * 31 + j // 251) & 0xFF).astype(np.uint8)


def test_gather_and_scatter_count_elements(groups):
    n = len(groups)

    def rank(me, g):
        for count, carrier in ((0, np.uint8), (5, np.uint8), (9000, np.uint8), (700, np.int64),
                               (333, np.float32)):
            root = count % n
            width = np.dtype(carrier).itemsize
            mine = byte_of(me, np.arange(count * width)).view(carrier)
            want = np.concatenate([byte_of(r, np.arange(count * width)) for r in range(n)])
            out = np.zeros(n * count, dtype=carrier) if me == root else None
            assert g.gather(mine, out, root) is out
            if me == root:
                same(out, want, f"gather to rank {root} of {count} {carrier.__name__}")
            piece = np.zeros(count, dtype=carrier)
            src = want.view(carrier) if me == root else None
            g.scatter(src, piece, root)
            same(piece, mine, f"scatter from rank {root} of {count} {carrier.__name__}")

    run_ranks(groups, rank)


def test_all_gather_v_and_rows(groups):
    n = len(groups)
    # Uneven parts of float32, rank 1's empty.
    part = [0 if r == 1 else 750 + 245 * r for r in range(n)]

    def rank(me, g):
        src = byte_of(me, np.arange(part[me] * 4)).view(np.float32)
        want = np.concatenate([byte_of(r, np.arange(part[r] * 4)) for r in range(n)])
        out = np.zeros(sum(part), dtype=np.float32)
        assert g.all_gather_v(src, out, part) is out
        same(out, want, f"all_gather_v of {part} float32")
        # Rows of int32: rank r's slice of row i is its elements i*slice ...
        rows, slice_ = 37, 33
        rin = byte_of(me, np.arange(rows * slice_ * 4)).view(np.int32)
        rout = np.zeros(rows * slice_ * n, dtype=np.int32)
        g.all_gather_rows(rin, rout, rows)
        full = [byte_of(r, np.arange(rows * slice_ * 4)).view(np.int32).reshape(rows, slice_)
                for r in range(n)]
        same(rout, np.concatenate(full, axis=1).reshape(-1),
             f"all_gather_rows of {rows} rows of {slice_} int32")

    run_ranks(groups, rank)


@pytest.mark.parametrize("packed", [True, False])
def test_all_to_all_v(groups, packed):
    """Rank a sends rank b (a + 2b) * 90 float64 elements (rank 0 sends
    rank 0 none); packed offsets by default, else with gaps (the received
    parts in reverse rank order)."""
    n = len(groups)

    def amount(a, b):
        return (a + 2 * b) * 90

    def rank(me, g):
        sc = [amount(me, r) for r in range(n)]
        rc = [amount(r, me) for r in range(n)]
        gap = 0 if packed else 11
        so = [sum(sc[:r]) + gap * r for r in range(n)]
        ro = [sum(rc[:r]) for r in range(n)] if packed else \
            [sum(rc[r + 1:]) + gap * (n - r) for r in range(n)]  # in reverse order
        src = np.full(sum(sc) + gap * n, np.nan)
        out = np.full(sum(rc) + gap * (n + 1), -7.0)
        want = out.copy()
        for r in range(n):
            src[so[r]:so[r] + sc[r]] = me * 1000.0 + r + np.arange(sc[r]) / 8
            want[ro[r]:ro[r] + rc[r]] = r * 1000.0 + me + np.arange(rc[r]) / 8
        if packed:
            g.all_to_all_v(src, sc, out, rc)
        else:
            g.all_to_all_v(src, sc, out, rc, send_offsets=so, recv_offsets=ro)
        same(out, want, f"all_to_all_v ({'packed' if packed else 'offsets with gaps'})")

    run_ranks(groups, rank)


def test_raw_bytes_count_bytes():
    """bytearrays move bytes and reduce as U8 without a dtype (wrapping)."""
    gs = ds4tp.Group.local(2)

    def rank(me, g):
        b = bytearray([200, me, 255])
        g.all_reduce(b)
        assert list(b) == [144, 1, 254], list(b)  # (200 + 200) % 256, 0 + 1, 510 % 256
        out = bytearray(5)
        g.all_gather_v(bytes([me + 1] * (me + 2)), out, [2, 3])
        assert out == bytes([1, 1, 2, 2, 2]), bytes(out)

    try:
        run_ranks(gs, rank)
    finally:
        for g in gs:
            g.close()
