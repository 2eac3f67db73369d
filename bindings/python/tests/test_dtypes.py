"""Element types of the vector APIs: a typed buffer is taken as what its
format says and never reinterpreted (a float64 array with dtype=F16 is
refused, naming both), raw bytes and uint16 bits take an explicit dtype
(the group collectives' new types: test_group_args.py),
read-only and strided arrays are refused with the fix spelled out for a
numpy user; enum-valued properties return the enums; the docstrings'
examples run as written (three processes with the launcher variables)."""

import array
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import ds4tp
from ds4tp import _control, _group

try:
    import numpy as np
except ImportError:  # the stdlib cases still run
    np = None

needs_numpy = pytest.mark.skipif(np is None, reason="numpy not installed")


@pytest.fixture
def pair_of_groups():
    groups = ds4tp.Group.local(2)
    yield groups
    for g in groups:
        g.close()


def reduce_both(groups, bufs, dtype):
    """all_reduce(bufs[r], dtype) on one thread per rank; the errors raised."""
    errors = [None, None]

    def body(r):
        try:
            groups[r].all_reduce(bufs[r], dtype=dtype)
        except BaseException as e:  # noqa: BLE001 - returned to the test
            errors[r] = e
            groups[r].mark_failed()

    ts = [threading.Thread(target=body, args=(r,)) for r in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
        assert not t.is_alive(), "a rank hung in all_reduce"
    return errors


def test_stdlib_typed_buffer_with_a_disagreeing_dtype_is_refused(pair_of_groups):
    g = pair_of_groups[0]
    doubles = array.array("d", [1.0, 2.0])
    before = doubles.tobytes()
    with pytest.raises(TypeError) as e:
        g.all_reduce(doubles, dtype=ds4tp.Dtype.F16)
    msg = str(e.value)
    assert "buffer holds float64 ('d') but dtype=F16 was given" in msg, msg
    assert doubles.tobytes() == before, "the refused buffer was changed"
    with pytest.raises(TypeError, match=r"int32 \('i'\) but dtype=F32"):
        g.all_reduce(array.array("i", [1, 2]), dtype=ds4tp.Dtype.F32)
    with pytest.raises(TypeError, match=r"float32 \('f'\) but dtype=BF16"):
        g.all_reduce(array.array("f", [1.0]), dtype=ds4tp.Dtype.BF16)
    with pytest.raises(TypeError, match=r"uint16 \('H'\) but dtype=F32"):
        g.all_reduce(array.array("H", [1, 2]), dtype=ds4tp.Dtype.F32)
    with pytest.raises(TypeError, match=r"dtype=Dtype.BF16 or dtype=Dtype.F16"):
        g.all_reduce(array.array("H", [1, 2]))
    with pytest.raises(TypeError, match=r"raw bytes .*pass dtype="):
        g.all_reduce(array.array("b", [1, 2]))  # int8: raw bytes (uint8 alone is U8)
    with pytest.raises(ValueError, match="not a ds4tp.Dtype"):
        g.all_reduce(bytearray(8), dtype=9)


@needs_numpy
def test_numpy_typed_arrays_with_a_disagreeing_dtype_are_refused(pair_of_groups):
    g = pair_of_groups[0]
    cases = [(np.float64, ds4tp.Dtype.F16, "float64 ('d')"),
             (np.float64, ds4tp.Dtype.F32, "float64 ('d')"),
             (np.int32, ds4tp.Dtype.F16, "int32 ('i')"),
             (np.int32, ds4tp.Dtype.F32, "int32 ('i')"),
             (np.float16, ds4tp.Dtype.BF16, "float16 ('e')"),
             (np.float32, ds4tp.Dtype.F16, "float32 ('f')")]
    for np_type, dtype, held in cases:
        a = np.arange(8, dtype=np_type)
        before = a.copy()
        with pytest.raises(TypeError) as e:
            g.all_reduce(a, dtype=dtype)
        want = f"buffer holds {held} but dtype={dtype.name} was given"
        assert want in str(e.value), f"{np_type.__name__} + {dtype.name}: {e.value}"
        assert (a == before).all(), f"{np_type.__name__} + {dtype.name}: the array was changed"
    with pytest.raises(TypeError, match=r"uint32 \('I'\).*astype"):
        g.all_reduce(np.zeros(4, dtype=np.uint32))  # no library dtype: not taken as i32 bits


@needs_numpy
@pytest.mark.parametrize("kind", ["F16", "BF16"])
def test_uint16_bits_and_raw_bytes_take_a_dtype(pair_of_groups, kind):
    """uint16 arrays are the raw bits of the dtype given; bytes are too."""
    dtype = getattr(ds4tp.Dtype, kind)
    vals = [np.array([1.0, 2.5, -3.0, 0.5], dtype=np.float32), np.full(4, 1.0, np.float32)]
    if kind == "F16":
        bits = [v.astype(np.float16).view(np.uint16) for v in vals]
        want = (vals[0] + vals[1]).astype(np.float16).view(np.uint16)
    else:
        bits = [(v.view(np.uint32) >> 16).astype(np.uint16) for v in vals]  # exact here
        want = ((vals[0] + vals[1]).view(np.uint32) >> 16).astype(np.uint16)
    for wrap in (lambda b: b.copy(), lambda b: bytearray(b.tobytes())):
        bufs = [wrap(b) for b in bits]
        errors = reduce_both(pair_of_groups, bufs, dtype)
        assert errors == [None, None], errors
        for r, b in enumerate(bufs):
            got = np.frombuffer(bytes(b), dtype=np.uint16)
            assert (got == want).all(), f"{type(b).__name__} rank {r}: {got} != {want}"


@needs_numpy
def test_read_only_and_strided_arrays_name_the_numpy_fix(pair_of_groups):
    g = pair_of_groups[0]
    ro = np.zeros(8, dtype=np.float32)
    ro.setflags(write=False)
    with pytest.raises(TypeError) as e:
        g.all_reduce(ro)
    for fix in ("a.copy()", 'np.require(a, requirements="W")'):
        assert fix in str(e.value), f"read-only message lacks {fix}: {e.value}"
    with pytest.raises(ValueError) as e:
        g.all_reduce(np.zeros(16, dtype=np.float32)[::2])
    assert "np.ascontiguousarray(a)" in str(e.value), f"strided message: {e.value}"
    with pytest.raises(TypeError, match=r"bytearray\(b\)"):
        g.broadcast(bytes(4))


@needs_numpy
def test_logits_into_must_hold_float32():
    with pytest.raises(TypeError, match=r"into holds float64 \('d'\) but float32"):
        _control._float_out(np.zeros(8), 8, "recv_logits")
    with pytest.raises(TypeError, match="a.copy()"):
        ro = np.zeros(8, dtype=np.float32)
        ro.setflags(write=False)
        _control._float_out(ro, 8, "recv_logits")
    into, _, _ = _control._float_out(bytearray(32), 8, "recv_logits")  # raw bytes: taken
    assert len(into) == 32


def test_enum_properties_and_type_marker(pair_of_groups):
    t = pair_of_groups[0].transport
    assert isinstance(t, ds4tp.Transport), f"Group.transport returned {t!r}, not a Transport"
    assert t.name in ("SHM", "TCP"), t
    assert pair_of_groups[0].failed == ds4tp.Status.OK
    marker = Path(ds4tp.__file__).resolve().parent / "py.typed"
    assert marker.is_file(), f"{marker} is not installed (PEP 561 marker)"
    assert _group.Group.all_reduce.__annotations__, "Group.all_reduce has no type hints"


def _example(doc, start):
    """The indented example block of ``doc`` beginning with ``start``."""
    lines = doc.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip().startswith(start))
    indent = len(lines[at]) - len(lines[at].lstrip())
    block = []
    for ln in lines[at:]:
        if ln.strip() and len(ln) - len(ln.lstrip()) < indent:
            break
        block.append(ln[indent:])
    return "\n".join(block).strip() + "\n"


@needs_numpy
def test_the_docstring_examples_run(tmp_path):
    """The module docstring's one-process-per-rank example, as three
    processes with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT; then
    Group.local's example."""
    code = _example(_group.__doc__, "import numpy")
    script = tmp_path / "rank.py"
    script.write_text(code)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(3):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="3", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outs = []
    for r, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        outs.append(out)
        assert p.returncode == 0, f"rank {r} of the docstring example exited {p.returncode}:\n{out}"
    for r, out in enumerate(outs):
        assert re.match(rf"{r} (SHM|TCP) \[6\. 6\. 6\. 6\.\]", out), f"rank {r} printed {out!r}"
    exec(compile(_example(ds4tp.Group.local.__doc__, "import threading"), "local", "exec"), {})


def test_the_library_conversions_match_numpy_and_the_group_sum():
    """ds4tp.f32_to_f16 and friends (the C exports) round as numpy's float16
    does (nearest, ties to even) over every half and a float sweep, bf16
    keeps the top 16 bits when exact, and a two-rank F16 all-reduce returns
    f32_to_f16(f16_to_f32(a) + f16_to_f32(b))."""
    import struct
    assert ds4tp.f32_to_f16(1.0 / 3.0) == 0x3555
    assert ds4tp.f32_to_f16(65520.0) == 0x7c00
    assert ds4tp.f32_to_bf16(3.14159) == 0x4049
    assert ds4tp.bf16_to_f32(0x4049) == 3.140625
    for h in range(0, 0x10000, 7):
        f = ds4tp.f16_to_f32(h)
        if f == f:  # NaNs aside: round trips exactly
            assert ds4tp.f32_to_f16(f) == h, hex(h)
        assert ds4tp.f32_to_bf16(ds4tp.bf16_to_f32(h)) == h or (h & 0x7f80) == 0x7f80, hex(h)
    if np is not None:
        bits = np.arange(0, 1 << 32, 65537, dtype=np.uint64).astype(np.uint32)
        floats = bits.view(np.float32)
        want = floats.astype(np.float16).view(np.uint16)
        got = np.array([ds4tp.f32_to_f16(float(f)) for f in floats], dtype=np.uint16)
        finite = ~np.isnan(floats)
        assert (got[finite] == want[finite]).all(), \
            f"first difference at float bits {hex(int(bits[finite][got[finite] != want[finite]][0]))}"
    a = array.array("H", [ds4tp.f32_to_f16(x / 7) for x in range(1, 200)])
    b = array.array("H", [ds4tp.f32_to_f16(x / 3) for x in range(1, 200)])
    want = [ds4tp.f32_to_f16(struct.unpack("f", struct.pack("f", ds4tp.f16_to_f32(x) +
                                                            ds4tp.f16_to_f32(y)))[0])
            for x, y in zip(a, b)]
    groups = ds4tp.Group.local(2)
    try:
        ts = [threading.Thread(target=g.all_reduce, args=(v,), kwargs={"dtype": ds4tp.Dtype.F16})
              for g, v in zip(groups, (a, b))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert list(a) == want and list(b) == want
    finally:
        for g in groups:
            g.close()
