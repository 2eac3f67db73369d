"""Element types and reduce ops of the group collectives, and the rule that
maps a Python buffer to the library's element type: a typed buffer is taken
as what its format says and never reinterpreted."""

import enum
import struct
from typing import Any, Optional, Union

from ._buffers import UNTYPED_FORMATS, _native, _view, describe_format
from ._loader import _lib


class Dtype(enum.IntEnum):
    """ds4tp_dtype: element types of the reductions."""
    F32 = 0
    F16 = 1
    BF16 = 2
    F64 = 3
    I32 = 4
    I64 = 5
    U8 = 6


class ReduceOp(enum.IntEnum):
    """ds4tp_reduce_op: how a reduction combines the ranks' elements (in
    rank order; integers wrap, MAX and MIN return one of the operands)."""
    SUM = 0
    MAX = 1
    MIN = 2
    PROD = 3


ITEM = {Dtype.F32: 4, Dtype.F16: 2, Dtype.BF16: 2, Dtype.F64: 8, Dtype.I32: 4, Dtype.I64: 8,
        Dtype.U8: 1}
# uint16 elements: the raw bits of a 16-bit float, which one only dtype= says.
RAW16 = "H"
_TAKEN = ("float64, float32, float16, int32, int64, uint8, or uint16 bits with "
          "dtype=Dtype.BF16 (or F16)")


def f32_to_f16(value: float) -> int:
    """The F16 bits of ``value`` by the library's own rounding (nearest,
    ties to even; what an F16 all_reduce rounds with): ds4tp_f32_to_f16."""
    return _lib().ds4tp_f32_to_f16(value)


def f16_to_f32(bits: int) -> float:
    """The float an F16 bit pattern holds (exact): ds4tp_f16_to_f32."""
    return _lib().ds4tp_f16_to_f32(bits)


def f32_to_bf16(value: float) -> int:
    """The BF16 bits of ``value`` (nearest, ties to even): ds4tp_f32_to_bf16."""
    return _lib().ds4tp_f32_to_bf16(value)


def bf16_to_f32(bits: int) -> float:
    """The float a BF16 bit pattern holds (exact): ds4tp_bf16_to_f32."""
    return _lib().ds4tp_bf16_to_f32(bits)


def _own_dtype(fmt: Optional[str]) -> Optional[Dtype]:
    """The Dtype a buffer of native one-element format ``fmt`` holds, if the
    library has that type (numpy's int64 is 'l', array's is 'q': by size)."""
    if fmt is None:
        return None
    fixed = {"f": Dtype.F32, "e": Dtype.F16, "d": Dtype.F64, "B": Dtype.U8}
    if fmt in fixed:
        return fixed[fmt]
    if fmt in "ilqn":
        return {4: Dtype.I32, 8: Dtype.I64}.get(struct.calcsize(fmt))
    return None


def as_dtype(dtype: Any) -> Dtype:
    """``dtype`` as a :class:`Dtype`, or ValueError naming it."""
    try:
        return Dtype(dtype)
    except (ValueError, TypeError):
        names = ", ".join(d.name for d in Dtype)
        raise ValueError(f"dtype={dtype!r} is not a ds4tp.Dtype ({names})") from None


def as_op(op: Any) -> ReduceOp:
    """``op`` as a :class:`ReduceOp`, or ValueError naming it."""
    try:
        return ReduceOp(op)
    except (ValueError, TypeError):
        raise ValueError(f"op={op!r} is not a ds4tp.ReduceOp (SUM, MAX, MIN or PROD)") from None


def infer_dtype(buf: Any, dtype: Optional[Union[Dtype, int]], what: str = "buffer") -> Dtype:
    """The element type of ``buf`` given ``dtype``, or TypeError naming the
    buffer's format and the dtype when they disagree (never a reinterpretation
    of a typed buffer's bytes). Raw bytes ('B', 'b', 'c') take any dtype;
    without one, uint8 ('B') is U8."""
    raw_fmt = _view(buf, what).format
    fmt = _native(raw_fmt)
    held = describe_format(raw_fmt)
    own = _own_dtype(fmt)
    untyped = fmt is not None and fmt in UNTYPED_FORMATS
    if dtype is not None:
        t = as_dtype(dtype)
        if untyped or own == t or (fmt == RAW16 and t in (Dtype.F16, Dtype.BF16)):
            return t
        hint = "convert the values (e.g. a.astype(np.float32)), or drop dtype= and let the " \
               "buffer's format decide"
        if fmt == RAW16:
            hint = "uint16 elements are the raw bits of F16 or BF16 only"
        raise TypeError(f"{what} holds {held} but dtype={t.name} was given: a typed buffer is "
                        f"not reinterpreted; {hint}. Only raw bytes ('B', 'b', 'c', e.g. "
                        f"a.view(np.uint8)) take any dtype")
    if own is not None:
        return own
    if fmt == RAW16:
        raise TypeError(f"cannot tell the element type of a {what} of {held}: its elements "
                        f"are 16-bit float bits; pass dtype=Dtype.BF16 or dtype=Dtype.F16")
    if untyped:
        raise TypeError(f"cannot tell the element type of a {what} of raw bytes ({held}): "
                        f"pass dtype= (Dtype.F32, F16, BF16, ...; uint8 needs none: U8)")
    raise TypeError(f"cannot tell the element type of a {what} of {held}: the reductions take "
                    f"{_TAKEN}; convert the values first (e.g. a.astype(np.float32))")
