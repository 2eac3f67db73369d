# The package is pure Python (pyproject.toml says all of it) unless
# DS4TP_TORCH=1 asks for the optional torch.distributed backend, a C++
# extension of PyTorch's c10d (csrc/torch/) built with torch's own
# cpp_extension against the installed torch, linked to libds4tp:
#   DS4TP_TORCH=1 python3 -m pip install --no-build-isolation bindings/python
# libds4tp's headers and library are found through DS4TP_INCLUDE_DIR and
# DS4TP_LIB_DIR, else DS4TP_PREFIX, else pkg-config (ds4tp.pc), else this
# clone's include/ and build/lib/.
import os
import subprocess

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _pkg_config(var):
    try:
        out = subprocess.run(["pkg-config", f"--variable={var}", "ds4tp"], check=True,
                             capture_output=True, text=True).stdout.strip()
        return out or None
    except (OSError, subprocess.CalledProcessError):
        return None


def _libds4tp():
    """(include dir, lib dir) of libds4tp, or SystemExit naming every place tried."""
    tried = []
    candidates = []
    if os.environ.get("DS4TP_INCLUDE_DIR") or os.environ.get("DS4TP_LIB_DIR"):
        candidates.append(("DS4TP_INCLUDE_DIR/DS4TP_LIB_DIR", os.environ.get("DS4TP_INCLUDE_DIR", ""),
                           os.environ.get("DS4TP_LIB_DIR", "")))
    prefix = os.environ.get("DS4TP_PREFIX")
    if prefix:
        for lib in ("lib", "lib64"):
            candidates.append(("DS4TP_PREFIX", os.path.join(prefix, "include"), os.path.join(prefix, lib)))
    inc, lib = _pkg_config("includedir"), _pkg_config("libdir")
    if inc and lib:
        candidates.append(("pkg-config ds4tp", inc, lib))
    root = os.path.normpath(os.path.join(HERE, "..", ".."))
    candidates.append(("this clone", os.path.join(root, "include"), os.path.join(root, "build", "lib")))
    for how, inc, lib in candidates:
        header = os.path.join(inc, "ds4tp", "ds4tp.h")
        shared = os.path.join(lib, "libds4tp.so")
        if os.path.isfile(header) and os.path.exists(shared):
            return inc, lib
        tried.append(f"{how}: {header} and {shared}")
    raise SystemExit("DS4TP_TORCH=1: libds4tp not found; tried\n  " + "\n  ".join(tried) +
                     "\nbuild it (scripts/build.sh build) or set DS4TP_PREFIX to its install prefix")


def _torch_extension():
    try:
        from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths
    except ImportError as e:
        raise SystemExit(f"DS4TP_TORCH=1 needs PyTorch in this Python ({e}); on Debian: "
                         "apt-get install python3-torch libtorch-dev") from None
    inc, lib = _libds4tp()
    src = os.path.join("csrc", "torch")
    ext = CppExtension(
        "ds4tp.torch._c10d",
        [os.path.join(src, f) for f in ("module.cpp", "process_group.cpp", "collectives.cpp",
                                        "tensors.cpp", "ops.cpp", "work.cpp")],
        include_dirs=[inc],
        library_dirs=[lib],
        libraries=["ds4tp"],
        # torch's headers as system headers: -Wall -Wextra then speak of ours only.
        extra_compile_args=["-O2", "-std=c++17", "-Wall", "-Wextra"] +
        [f"-isystem{d}" for d in include_paths()],
        # The package loads its libds4tp first (ds4tp._loader), and the
        # extension's need for libds4tp.so.0 is met by that one; the rpath
        # is the fallback when the extension is imported on its own.
        extra_link_args=[f"-Wl,-rpath,{lib}"],
    )
    return [ext], {"build_ext": BuildExtension.with_options(use_ninja=False)}


if os.environ.get("DS4TP_TORCH") == "1":
    ext_modules, cmdclass = _torch_extension()
    setup(ext_modules=ext_modules, cmdclass=cmdclass)
else:
    setup()
