"""Finding and loading libds4tp, errors, and the module-level calls."""

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path
from typing import List, Tuple

from ._constants import VERSION_MAJOR, Status, Transport


# Names of the shared library: the SONAME first (what the runtime package
# ships), then the development link.
if sys.platform == "darwin":
    _NAMES = ("libds4tp.0.dylib", "libds4tp.dylib")
else:
    _NAMES = ("libds4tp.so.0", "libds4tp.so")


def _prefixes():
    """Install prefixes that may hold libds4tp: $DS4TP_PREFIX, the prefix
    this package was installed into (its ancestors, e.g. pip --prefix next
    to cmake --install), and the Python environment's prefixes."""
    prefixes = []
    if os.environ.get("DS4TP_PREFIX"):
        prefixes.append(Path(os.environ["DS4TP_PREFIX"]))
    prefixes.extend(Path(__file__).resolve().parents[1:6])
    prefixes.extend(Path(p) for p in (sys.prefix, sys.base_prefix))
    out = []
    for p in prefixes:
        if p not in out:
            out.append(p)
    return out


def _libdirs():
    multiarch = getattr(sys.implementation, "_multiarch", None)
    return ["lib", "lib64"] + ([f"lib/{multiarch}"] if multiarch else [])


def _prefix_candidates():
    """The library's possible paths under the install prefixes."""
    return [prefix / d / name for prefix in _prefixes() for d in _libdirs() for name in _NAMES]


def library_candidates() -> List[str]:
    """Every place the library is looked for, in order: $DS4TP_LIBRARY (a
    path), the install prefixes (see _prefix_candidates), then the system
    loader (ctypes.util.find_library, then the bare SONAME)."""
    env = os.environ.get("DS4TP_LIBRARY")
    if env:
        return [env]
    found = [str(p) for p in _prefix_candidates() if p.exists()]
    system = ctypes.util.find_library("ds4tp")
    return found + ([system] if system else []) + [_NAMES[0]]


def library_path() -> str:
    """The path (or loader name) the library is loaded from first."""
    return library_candidates()[0]


class _Missing:
    """Stands in for a function the loaded library lacks (older build)."""

    def __init__(self, name, path):
        self.name, self.path = name, path

    def __call__(self, *args):
        raise Error(Status.EUNSUPPORTED,
                    f"{self.name} is not in {self.path}: the library is older than this "
                    "binding; rebuild libds4tp or point DS4TP_LIBRARY at a newer one")


class LibraryNotFound(OSError):
    """libds4tp could not be loaded; the message names every place tried."""


_LIB = None


def _load():
    tried = []
    for path in library_candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"  {path}{'' if '/' in path else ' (system loader)'}: {e}")
    if not os.environ.get("DS4TP_LIBRARY"):
        tried.insert(0, f"  {'/'.join(_NAMES)} in {', '.join(_libdirs())} of the install "
                     f"prefixes {', '.join(str(p) for p in _prefixes())}: not there")
        tried.insert(0, "  $DS4TP_LIBRARY: not set")
    raise LibraryNotFound(
        "cannot load libds4tp; tried:\n" + "\n".join(tried) +
        "\nSet DS4TP_LIBRARY to the library's path, DS4TP_PREFIX to its install prefix, "
        "or install it where the loader finds it (ldconfig).")


def _lib():
    """Loads and declares the library once (lazily, so importing never fails)."""
    global _LIB
    if _LIB is None:
        from ._declarations import DECLARATIONS
        lib, path = _load()
        for block in DECLARATIONS.values():
            for name, restype, argtypes in block:
                try:
                    fn = getattr(lib, name)
                except AttributeError:
                    setattr(lib, name, _Missing(name, path))
                    continue
                fn.restype = restype
                fn.argtypes = argtypes
        lib.path = path
        _check_major(lib)
        _LIB = lib
    return _LIB


class LibraryVersionError(OSError):
    """The loaded libds4tp has another major version (another ABI)."""


def _check_major(lib):
    loaded = lib.ds4tp_version()
    if loaded >> 16 != VERSION_MAJOR:
        raise LibraryVersionError(
            f"{lib.path} is libds4tp {lib.ds4tp_version_string().decode()} (major "
            f"{loaded >> 16}) but this binding needs major {VERSION_MAJOR} (same major "
            "version = same ABI): install a matching libds4tp or point DS4TP_LIBRARY at one")


def check_version() -> None:
    """Loads the library and checks that its major version is this
    binding's; raises LibraryVersionError (or LibraryNotFound) if not."""
    _check_major(_lib())


def _text(raw):
    return raw.decode(errors="replace") if raw is not None else ""


# ---------------------------------------------------------------------------
# Errors and module-level calls.

class Error(Exception):
    """A failed ds4tp call.

    ``status`` is the DS4TP_E* code (a :class:`Status` when known), ``name``
    its symbolic name, ``message`` the library's explanation.
    """

    def __init__(self, status, message=""):
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status = status
        self.name = err_name(status)
        self.message = message or strerror(status)
        super().__init__(f"{self.name}: {self.message}")


def _check(rc):
    if rc != Status.OK:
        raise Error(rc, last_error())
    return rc


def version() -> int:
    """DS4TP_VERSION_HEX of the linked library: (major<<16)|(minor<<8)|patch."""
    return _lib().ds4tp_version()


def version_string() -> str:
    """"MAJOR.MINOR.PATCH" of the linked library."""
    return _text(_lib().ds4tp_version_string())


def protocol_version() -> int:
    """Wire protocol version the linked library speaks."""
    return _lib().ds4tp_protocol_version()


def strerror(status: int) -> str:
    """Short description of a status code."""
    return _text(_lib().ds4tp_strerror(int(status)))


def err_name(status: int) -> str:
    """Symbolic name of a status code ("DS4TP_ETIMEDOUT")."""
    return _text(_lib().ds4tp_err_name(int(status)))


def last_error() -> str:
    """Message of the last failed call made by this thread ("" if none)."""
    return _text(_lib().ds4tp_last_error())


def transport_name(transport: int) -> str:
    """Lower-case name of a transport value ("tcp"); "?" when unknown."""
    return _text(_lib().ds4tp_transport_name(int(transport)))


def transport_available(transport: int) -> Tuple[bool, str]:
    """(available, why): whether ``transport`` can run on this host, and
    what was found or what is missing. No network I/O."""
    why = ctypes.create_string_buffer(512)
    ok = _lib().ds4tp_transport_available(int(transport), why, len(why))
    return bool(ok), _text(why.value)


def transport_auto(same_host: bool) -> Transport:
    """The transport AUTO would negotiate with a peer that offers what this
    host offers: on this host (``same_host``) or on another. The library's
    own rule; after connecting, :attr:`Pair.transport` says what was
    chosen. No network I/O."""
    return Transport(_lib().ds4tp_transport_auto(1 if same_host else 0))


def command_name(kind: int) -> str:
    """Upper-case name of a command kind or control frame type ("EVAL")."""
    return _text(_lib().ds4tp_command_name(int(kind)))


class _Handle:
    """Lifetime shared by the handle classes: ``close()`` (theirs, idempotent)
    runs at the end of a ``with`` block and at garbage collection."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
