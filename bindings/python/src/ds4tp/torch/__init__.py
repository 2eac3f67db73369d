"""libds4tp as a torch.distributed backend for CPU tensors.

``import ds4tp.torch`` registers the backend "ds4tp"; then::

    import torch, torch.distributed as dist
    import ds4tp.torch  # noqa: F401  (registers "ds4tp")

    dist.init_process_group("ds4tp")      # env:// (torchrun), or init_method="tcp://..."
    t = torch.ones(4096)
    dist.all_reduce(t)                    # summed in rank order, f32 accumulation
    tp = dist.new_group([0, 1], backend="ds4tp")   # a sub-group: a ds4tp group of its own

Ops: all_reduce (SUM; float32, float16, bfloat16), all_gather,
_all_gather_base, broadcast, barrier. Every other op raises, naming it and
the way round it (a Gloo group beside this one). ``pg_options=Options(...)``
tunes the group (transport, timeouts); see :class:`Options`.

libds4tp's calls block, so a Work returned for ``async_op=True`` is
already complete; ``wait()`` returns at once or raises the library's error.

The extension is built with the package: ``DS4TP_TORCH=1 python3 -m pip
install --no-build-isolation bindings/python`` (bindings/python/README.md).
"""

try:
    import torch.distributed as dist
except ImportError as e:
    raise ImportError(f"ds4tp.torch is a backend for PyTorch, which this Python lacks ({e}); on "
                      "Debian: apt-get install python3-torch") from None

from .. import _loader
from ._options import Options
from ._rendezvous import create

BACKEND = "ds4tp"

# The extension links libds4tp.so.0; loading the package's library first
# (DS4TP_LIBRARY, the prefix, ...) makes the extension use that same one.
_loader._lib()
try:
    from . import _c10d  # noqa: F401
except ImportError as e:
    raise ImportError(
        f"ds4tp.torch: the torch.distributed backend was not built with this package ({e}); "
        "install it with DS4TP_TORCH=1 python3 -m pip install --no-build-isolation "
        "bindings/python (needs python3-torch, libtorch-dev and pybind11-dev)") from None


def _create(backend_opts, pg_options):
    """torch's creator for "ds4tp" (the extended API: the group's store,
    rank, size, timeout, and our Options as pg_options)."""
    opts = pg_options if pg_options is not None else Options()
    if not isinstance(opts, Options):
        raise TypeError(f"ds4tp backend: pg_options must be ds4tp.torch.Options, not "
                        f"{type(opts).__name__}")
    return create(backend_opts.store, backend_opts.group_rank, backend_opts.group_size, opts,
                  backend_opts.timeout)


if BACKEND.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, _create, extended_api=True)

__all__ = ["BACKEND", "Options"]
