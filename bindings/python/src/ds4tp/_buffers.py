"""Raw memory and Python buffers (bytes, bytearray, array, memoryview,
numpy arrays, mmap: anything with the buffer protocol) as C pointers."""

import array
import ctypes
import struct
import sys
import weakref
from ctypes import c_char_p, c_int, c_int32, c_void_p
from typing import Optional

_NO_OFFSET = (1 << 64) - 1


def _memory_view(address, nbytes):
    """A writable 'B' memoryview over raw memory the library owns."""
    fn = ctypes.pythonapi.PyMemoryView_FromMemory
    fn.restype = ctypes.py_object
    fn.argtypes = [c_void_p, ctypes.c_ssize_t, c_int]
    return fn(address, nbytes, 0x200)  # PyBUF_WRITE


def _tracked_view(views, address, nbytes, fmt):
    """A writable memoryview of ``nbytes`` at ``address`` cast to ``fmt``,
    remembered (weakly) in ``views`` so that _release_views can end it
    before the library frees the memory."""
    raw = _memory_view(address, nbytes)
    view = raw.cast(fmt) if fmt != "B" else raw
    if view is not raw:
        raw.release()
    views[:] = [r for r in views if r() is not None]
    views.append(weakref.ref(view))
    return view


def _release_views(views):
    """Releases every view in ``views`` still alive (one with exports, e.g.
    a numpy array over it, stays: the caller must drop those first)."""
    for ref in views:
        view = ref()
        if view is not None:
            try:
                view.release()
            except BufferError:
                pass
    views.clear()


# Buffer formats that carry no element type of their own: raw bytes. Only
# these may be told what they hold (``dtype=``); a typed buffer is taken
# as what its format says.
UNTYPED_FORMATS = "Bbc"

_FORMAT_NAMES = {
    "f": "float32", "e": "float16", "d": "float64", "b": "int8", "B": "uint8",
    "c": "char", "h": "int16", "H": "uint16", "i": "int32", "I": "uint32",
    "q": "int64", "Q": "uint64", "?": "bool",
}


def describe_format(fmt: str) -> str:
    """'float64 ('d')' for a buffer format, the raw format when unknown.
    C long and size_t are named by their width here (numpy's int64 is 'l')."""
    native = _native(fmt) or ""
    name = _FORMAT_NAMES.get(native)
    if native in ("l", "L", "n", "N"):
        name = f"{'u' if native.isupper() else ''}int{struct.calcsize(native) * 8}"
    return f"{name} ({fmt!r})" if name else f"elements of format {fmt!r}"


def _view(obj, what="buffer"):
    try:
        return memoryview(obj)
    except TypeError:
        raise TypeError(f"{what} must support the buffer protocol (a numpy array, array.array, "
                        f"bytearray, memoryview, mmap); got {type(obj).__name__}") from None


def _writable_hint(view):
    if not view.readonly and not view.c_contiguous:
        return ("it is not C-contiguous (a slice with a step, a transpose): pass "
                "np.ascontiguousarray(a), written back with a[...] = b if the strided array "
                "must change, or a contiguous array to begin with")
    return ("it is read-only: pass a writable copy (numpy: a.copy() or "
            "np.require(a, requirements=\"W\"); bytes: bytearray(b))")


def _buffer_address(obj, writable, what="buffer"):
    """(address, nbytes, keepalive) of a contiguous bytes-like object. A
    buffer to be written into must be writable and C-contiguous; one only
    read is copied when it is neither."""
    if isinstance(obj, bytes) and not writable:
        return ctypes.cast(c_char_p(obj), c_void_p).value or 0, len(obj), obj
    view = _view(obj, what)
    if writable and view.readonly:
        raise TypeError(f"{what} must be writable (it is written in place), but "
                        + _writable_hint(view))
    if writable and not view.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous to be written into, but "
                         + _writable_hint(view))
    if not view.c_contiguous:
        data = view.tobytes()  # a strided view, copied in C order
        copy = (ctypes.c_char * len(data)).from_buffer_copy(data)
        return ctypes.addressof(copy), len(data), copy
    if view.readonly:
        copy = (ctypes.c_char * view.nbytes).from_buffer_copy(view)
        return ctypes.addressof(copy), view.nbytes, copy
    holder = (ctypes.c_char * view.nbytes).from_buffer(view.cast("B"))
    return ctypes.addressof(holder), view.nbytes, holder


def _int32s(values):
    """A ctypes int32 array of ``values`` (and its length)."""
    values = list(values)
    return (c_int32 * max(len(values), 1))(*values), len(values)


def _native(fmt: str) -> Optional[str]:
    """The struct format of one element without a native byte-order prefix
    (numpy writes '<f' for a little-endian float32), or None."""
    if fmt[:1] in "@=" or (fmt[:1] == "<" and sys.byteorder == "little") or \
            (fmt[:1] in ">!" and sys.byteorder == "big"):
        fmt = fmt[1:]
    return fmt if len(fmt) == 1 and fmt in "bBhHiIlLqQnNefd" else None


def _floats(values):
    """(address, count, keepalive) of float32 data: a C-contiguous float32
    buffer (array('f'), numpy float32, a slab view) as is; any other numeric
    buffer (numpy float64, strided, n-dimensional) or iterable converted,
    flattened in C order."""
    try:
        view = memoryview(values)
    except TypeError:
        view = None
    if view is not None:
        fmt = _native(view.format)
        if fmt == "f" and view.c_contiguous:
            address, _, keep = _buffer_address(values, writable=False)
            return address, view.nbytes // 4, keep
        if fmt is not None:
            flat = memoryview(view.tobytes() if not view.c_contiguous else view.cast("B"))
            values = flat.cast(fmt).tolist()
    arr = array.array("f", values)
    return arr.buffer_info()[0], len(arr), arr
