"""Exits 0 when this Python can build and run the torch.distributed backend
(bindings/python/csrc/torch): PyTorch, its C++ headers and pybind11's.
Otherwise prints "SKIP: " and what is missing, and exits 77 (ctest's
skip code): the backend is optional."""
import os
import sys
import sysconfig

DEBIAN = "Debian: apt-get install python3-torch libtorch-dev pybind11-dev"


def skip(why):
    print(f"SKIP: {why} ({DEBIAN}); the torch backend is optional")
    sys.exit(77)


try:
    import torch.distributed  # noqa: F401
    from torch.utils.cpp_extension import include_paths
except ImportError as e:
    skip(f"{sys.executable} has no PyTorch: {e}")
dirs = include_paths() + [sysconfig.get_paths()["include"], "/usr/include", "/usr/local/include"]
if not any(os.path.exists(os.path.join(d, "torch", "csrc", "distributed", "c10d", "ProcessGroup.hpp"))
           for d in dirs):
    skip("PyTorch's C++ headers are missing")
if not any(os.path.exists(os.path.join(d, "pybind11", "pybind11.h")) for d in dirs):
    skip("pybind11's headers are missing")
