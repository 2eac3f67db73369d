"""The group collectives' refusals from Python: ranks that disagree on a
call's dtype or op fail it with the library's EDESYNC naming both calls;
bad arguments raise TypeError or ValueError naming the problem before any
rank waits (the group stays usable); the new element types are taken from
the buffer's format and never reinterpreted."""

import array
import threading

import pytest

import ds4tp
from ds4tp import Dtype, ReduceOp

np = pytest.importorskip("numpy")


def both(groups, fns):
    """fns[r](groups[r]) on one thread each; the exception each raised (or None)."""
    errors = [None, None]

    def body(r):
        try:
            fns[r](groups[r])
        except BaseException as e:  # noqa: BLE001 - returned to the test
            errors[r] = e

    ts = [threading.Thread(target=body, args=(r,)) for r in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
        assert not t.is_alive(), "a rank hung"
    return errors


@pytest.fixture
def pair():
    gs = ds4tp.Group.local(2, ds4tp.GroupOptions(op_timeout_ms=5000))
    yield gs
    for g in gs:
        g.close()


@pytest.mark.parametrize("case", ["dtype", "bits", "op", "root", "size"])
def test_ranks_that_disagree_fail_with_edesync_naming_both(pair, case):
    """Calls of the same bytes that differ in dtype, op or root are named;
    a dtype of another width makes other bytes, named by their sizes."""
    if case == "dtype":  # the same bytes, another element type
        fns = [lambda g: g.all_reduce(np.ones(64, np.float32)),
               lambda g: g.all_reduce(np.ones(64, np.int32))]
        names = ("all_reduce f32 sum", "all_reduce i32 sum")
    elif case == "bits":  # float16 against uint16 bits given as BF16
        fns = [lambda g: g.all_reduce(np.ones(64, np.float16)),
               lambda g: g.all_reduce(np.ones(64, np.uint16), dtype=Dtype.BF16)]
        names = ("all_reduce f16 sum", "all_reduce bf16 sum")
    elif case == "op":
        fns = [lambda g: g.all_reduce(np.ones(64, np.int32), op=ReduceOp.MAX),
               lambda g: g.all_reduce(np.ones(64, np.int32), op=ReduceOp.SUM)]
        names = ("all_reduce i32 max", "all_reduce i32 sum")
    elif case == "root":
        fns = [lambda g: g.reduce(np.ones(8), 0), lambda g: g.reduce(np.ones(8), 1)]
        names = ("reduce f64 sum at rank 0", "reduce f64 sum at rank 1")
    else:  # 64 float32 against 64 float16
        fns = [lambda g: g.all_reduce(np.ones(64, np.float32)),
               lambda g: g.all_reduce(np.ones(64, np.float16))]
        names = ("256 bytes", "128 bytes")
    errors = both(pair, fns)
    for r, e in enumerate(errors):
        assert isinstance(e, ds4tp.Error), f"rank {r}: {e!r} instead of ds4tp.Error"
        assert e.status == ds4tp.Status.EDESYNC, f"rank {r}: {e.status.name}: {e.message}"
        for name in names:
            assert name in e.message, f"rank {r}: {name!r} not in the message: {e.message}"


def test_all_to_all_v_counts_that_disagree_are_named(pair):
    """Rank 0 expects 16 bytes from rank 1, which sends 8: EDESYNC with both numbers."""
    def rank(me):
        def fn(g):
            g.all_to_all_v(bytearray(16), [8, 8], bytearray(24), [8, 16 if me == 0 else 8])
        return fn

    errors = both(pair, [rank(0), rank(1)])
    assert isinstance(errors[0], ds4tp.Error), repr(errors[0])
    assert errors[0].status == ds4tp.Status.EDESYNC, errors[0]
    assert "sends rank 0 8 bytes, which expects 16" in errors[0].message, errors[0].message


def refusals(g):
    """(call, exception type, words the message must hold) on rank 0 of 2."""
    f4, d4 = np.zeros(4, np.float32), np.zeros(4, np.float64)
    shared = np.zeros(8, np.float32)
    return [
        (lambda: g.all_reduce(f4, op=9), ValueError, "op=9 is not a ds4tp.ReduceOp"),
        (lambda: g.all_reduce(f4, op="max"), ValueError, "op='max' is not a ds4tp.ReduceOp"),
        (lambda: g.all_reduce(np.zeros(4, np.int16)), TypeError, "int16 ('h')"),
        (lambda: g.all_reduce(np.zeros(4, np.uint32)), TypeError, "uint32 ('I')"),
        (lambda: g.all_reduce(np.zeros(4, np.int64), dtype=Dtype.F64), TypeError,
         "int64 ('l') but dtype=F64"),
        (lambda: g.all_reduce(array.array("q", [1]), dtype=Dtype.I32), TypeError,
         "int64 ('q') but dtype=I32"),
        (lambda: g.reduce(f4, 2), ValueError, "root=2 is outside the group's ranks 0..1"),
        (lambda: g.reduce(f4, -1), ValueError, "root=-1"),
        (lambda: g.reduce(f4, 1.0), TypeError, "root must be an int"),
        (lambda: g.reduce_scatter(np.zeros(6, np.float32), f4), ValueError,
         "src has 6 F32 elements; 2 ranks x 4"),
        (lambda: g.reduce_scatter(np.zeros(8, np.float32), d4), TypeError,
         "src holds float32 ('f') (F32) but out holds float64 ('d') (F64)"),
        (lambda: g.reduce_scatter(shared, shared[2:6]), ValueError,
         "out overlaps src other than as this rank's segment (src[0:4])"),
        (lambda: g.gather(f4, None, 0), TypeError, "out is None at the root"),
        (lambda: g.gather(f4, np.zeros(6, np.float32), 0), ValueError, "out has 6 elements"),
        (lambda: g.gather(f4, np.zeros(8, np.int32), 0), TypeError,
         "gather: src holds float32 ('f') but out holds int32 ('i')"),
        (lambda: g.scatter(None, f4, 0), TypeError, "src is None at the root"),
        (lambda: g.scatter(np.zeros(9, np.float32), f4, 0), ValueError, "src has 9 elements"),
        (lambda: g.all_gather_v(f4, np.zeros(9, np.float32), [4, 4, 1]), ValueError,
         "counts has 3 entries; the group has 2 ranks"),
        (lambda: g.all_gather_v(f4, np.zeros(9, np.float32), [5, 4]), ValueError,
         "src has 4 elements but counts[0]"),
        (lambda: g.all_gather_v(f4, np.zeros(9, np.float32), [4, 4]), ValueError,
         "out has 9 elements; sum(counts) = 8"),
        (lambda: g.all_gather_v(f4, np.zeros(8, np.float32), [4, -4]), ValueError,
         "counts[1] is -4"),
        (lambda: g.all_gather_v(f4, np.zeros(8, np.float32), [4, 4.0]), TypeError,
         "counts[1] must be an int"),
        (lambda: g.all_gather_v(f4, np.zeros(8, np.float32), 8), TypeError,
         "counts must be a sequence of 2 ints"),
        (lambda: g.all_gather_rows(np.zeros(10, np.float32), np.zeros(20, np.float32), 3),
         ValueError, "src's 10 elements are not 3 rows"),
        (lambda: g.all_gather_rows(f4, np.zeros(6, np.float32), 2), ValueError,
         "out has 6 elements; 2 ranks x 4"),
        (lambda: g.all_to_all_v(f4, [2, 2], f4.copy(), [2, 2], send_offsets=[0, 3]),
         ValueError, "send_offsets[1] + send_counts[1] = 5 is past src's 4 elements"),
        (lambda: g.all_to_all_v(f4, [2, 2], f4.copy(), [3, 2]), ValueError,
         "recv_offsets[1] + recv_counts[1] = 5 is past out's 4 elements"),
        (lambda: g.all_to_all_v(shared, [2, 2], shared[2:], [2, 2]), ValueError,
         "src and out overlap"),
        (lambda: g.all_to_all_v(f4, [2, 2], d4, [2, 2]), TypeError, "holds float64 ('d')"),
    ]


def test_bad_arguments_are_refused_naming_them(pair):
    g = pair[0]
    for i, (call, kind, words) in enumerate(refusals(g)):
        with pytest.raises(kind) as e:
            call()
        assert words in str(e.value), f"case {i}: {words!r} not in {e.type.__name__}: {e.value}"
    assert g.failed == ds4tp.Status.OK, "a refusal failed the group"
    # Refused before any rank waited: the group still works.
    bufs = [np.array([1, 5, -3], np.int64), np.array([4, 2, -9], np.int64)]
    errors = both(pair, [lambda h: h.all_reduce(bufs[0], op=ReduceOp.MIN),
                         lambda h: h.all_reduce(bufs[1], op=ReduceOp.MIN)])
    assert errors == [None, None], errors
    assert bufs[0].tolist() == bufs[1].tolist() == [1, 2, -9], bufs


def test_typed_buffers_with_their_own_dtype_are_taken(pair):
    """float64, int32, int64 (numpy's 'l', array's 'q') and uint8 take the
    matching dtype= or none; raw bytes still take any."""
    cases = [(lambda: np.array([1.5, -2.0]), Dtype.F64),
             (lambda: array.array("i", [3, -4]), Dtype.I32),
             (lambda: np.array([3, -4], np.int64), Dtype.I64),
             (lambda: array.array("q", [3, -4]), Dtype.I64),
             (lambda: np.array([7, 250], np.uint8), Dtype.U8)]
    for make, dtype in cases:
        for given in (None, dtype):
            bufs = [make(), make()]
            errors = both(pair, [lambda h, b=bufs[r]: h.all_reduce(b, dtype=given, op=ReduceOp.MAX)
                                 for r in range(2)])
            assert errors == [None, None], f"{dtype.name} dtype={given}: {errors}"
            assert bufs[0].tolist() == make().tolist(), f"{dtype.name}: max of equal parts"
    raw = [bytearray(np.array([1.5, 2.0], np.float32).tobytes()) for _ in range(2)]
    errors = both(pair, [lambda h, b=raw[r]: h.all_reduce(b, dtype=Dtype.F32) for r in range(2)])
    assert errors == [None, None], errors
    assert np.frombuffer(raw[0], np.float32).tolist() == [3.0, 4.0], raw[0]
