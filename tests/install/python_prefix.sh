#!/bin/sh
# The Python package next to the library in one install prefix: `pip
# install --prefix P` after `cmake --install --prefix P` finds P's libds4tp
# with no DS4TP_LIBRARY and nothing on the loader's path, and pairs over
# loopback in-process (the leader and worker in two threads).
#   python_prefix.sh PYTHON SRC PREFIX SCRATCH
set -eu
py=$1; src=$2; prefix=$3; scratch=$4
rm -rf "$scratch"; mkdir -p "$scratch/src"
cp -R "$src/pyproject.toml" "$src/README.md" "$src/src" "$scratch/src/"
"$py" -m pip install --quiet --no-build-isolation --no-deps --no-index --disable-pip-version-check --root-user-action=ignore \
  --no-compile --prefix "$scratch/prefix" "$scratch/src"
# pip's scheme decides the site directory (Debian: local/lib/python3.X/dist-packages).
site=$(dirname "$(find "$scratch/prefix" -path '*/ds4tp/__init__.py' | head -1)")
site=$(dirname "$site")
# Merge into the library's prefix the way a user's two installs would.
rel=${site#"$scratch/prefix/"}
mkdir -p "$prefix/$rel"
rm -rf "$prefix/$rel/ds4tp"
cp -R "$site/ds4tp" "$prefix/$rel/"
env -u DS4TP_LIBRARY -u DS4TP_PREFIX -u LD_LIBRARY_PATH PYTHONPATH="$prefix/$rel" PYTHONDONTWRITEBYTECODE=1 \
  "$py" - "$prefix" <<'PY'
import sys, threading
import ds4tp
prefix = sys.argv[1]
path = ds4tp.library_path()
assert path.startswith(prefix + "/"), f"loaded {path}, not from {prefix}"
ds4tp.check_version()
ident = ds4tp.Identity(model_bytes=1, n_layer=1, n_embd=8, n_vocab=4)
quiet = dict(log_level=ds4tp.LogLevel.WARN)
with ds4tp.Pair(ds4tp.Options.leader(port=0, **quiet), ident) as leader:
    got = {}
    def worker():
        with ds4tp.Pair(ds4tp.Options.worker("127.0.0.1", leader.listen_port, **quiet), ident) as tp:
            tp.connect(); tp.attach_slab()
            tp.out_vector(0, ds4tp.GATE_ATTN)[:] = memoryview(bytes(32)).cast("f")
            tp.gate_exchange(0, ds4tp.GATE_ATTN, 1)
            got["w"] = tp.in_vector(0, ds4tp.GATE_ATTN)[0]
    t = threading.Thread(target=worker); t.start()
    leader.connect(); leader.attach_slab()
    leader.out_vector(0, ds4tp.GATE_ATTN)[0] = 5.0
    leader.gate_exchange(0, ds4tp.GATE_ATTN, 1)
    t.join(30)
assert got.get("w") == 5.0, got
print(f"python prefix OK: ds4tp {ds4tp.__version__} loaded {path}")
PY
