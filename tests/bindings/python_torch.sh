#!/bin/sh
# ctest driver for the torch.distributed backend (bindings/python/csrc/torch,
# the ds4tp.torch package). Exits 77 (ctest: skipped), saying why, where
# the interpreter has no PyTorch or its headers (torch_ready.py), so a
# build without them still passes.
#   python_torch.sh install PYTHON SRC TARGET INCLUDE_DIR LIB_DIR
#       pip-installs SRC with DS4TP_TORCH=1 (the C++ extension, built
#       against INCLUDE_DIR and LIB_DIR's libds4tp) into TARGET, from a copy
#       so the source tree gets no build/ or egg-info
#   python_torch.sh run PYTHON ARGS...
#       runs PYTHON ARGS... (a pytest suite, the bench) once PyTorch is there
set -eu
mode=$1; py=$2; shift 2
"$py" "$(dirname "$0")/torch_ready.py" || exit $?
case "$mode" in
  install)
    src=$1; target=$2; inc=$3; lib=$4
    work="$target.src"
    rm -rf "$target" "$work"
    mkdir -p "$work"
    cp -R "$src/pyproject.toml" "$src/setup.py" "$src/README.md" "$src/src" "$src/csrc" "$work/"
    DS4TP_TORCH=1 DS4TP_INCLUDE_DIR="$inc" DS4TP_LIB_DIR="$lib" \
      "$py" -m pip install --quiet --no-build-isolation --no-deps --no-index \
      --disable-pip-version-check --root-user-action=ignore --no-compile --target "$target" "$work"
    rm -rf "$work"
    ls "$target"/ds4tp/torch/_c10d*.so >/dev/null
    echo "installed ds4tp with its torch backend into $target"
    ;;
  run)
    exec "$py" "$@"
    ;;
  *)
    echo "usage: $0 install|run PYTHON ..." >&2
    exit 2
    ;;
esac
