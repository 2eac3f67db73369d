#!/usr/bin/env bash
# The newcomer's first steps, exactly as README.md's install section says:
# every ```sh block between <!-- install:begin --> and <!-- install:end -->
# runs as written (its /opt/ds4tp made a fresh scratch prefix), in order,
# from a scratch "clone" (build/ and bindings/rust link the real ones;
# bindings/python is copied, pip builds in it), next to this directory's
# programs: engine.c (one rank of a three-rank group, started three times
# per way), engine-rs/ (a crate with the README's path dependency) and
# engine.py (three ranks as threads), each a three-rank all-reduce. Every line
# they print must carry the bits of the rank-order f32 sum, computed here;
# pkg-config's flags must be normalised. A block needing cargo or pip is
# skipped, saying so, when that is missing. Nothing is left behind.
#   newcomer.sh README BUILD_DIR SOURCE_DIR PYTHON SCRATCH
set -euo pipefail
readme=$1; build=$2; src=$3; py=$4; T=$5
here=$(cd "$(dirname "$0")/newcomer" && pwd)
fail() { echo "newcomer FAIL: $*" >&2; exit 1; }
rm -rf "$T"
mkdir -p "$T/clone/bindings" "$T/bin"
trap 'rm -rf "$T"' EXIT
prefix="$T/prefix"

ln -s "$build" "$T/clone/build"
ln -s "$src/bindings/rust" "$T/clone/bindings/rust"
mkdir "$T/clone/bindings/python"
cp -R "$src/bindings/python/pyproject.toml" "$src/bindings/python/setup.py" \
  "$src/bindings/python/README.md" "$src/bindings/python/src" "$src/bindings/python/csrc" \
  "$T/clone/bindings/python/"
cp "$here/engine.c" "$here/engine.py" "$T/clone/"
mkdir -p "$T/clone/engine-rs"
cp -R "$here/engine-rs/Cargo.toml" "$here/engine-rs/src" "$T/clone/engine-rs/"
# The README says python3: the interpreter with Debian's packages.
ln -s "$py" "$T/bin/python3"

# ---- the blocks
awk -v dir="$T" '
  /^<!-- install:begin -->/ { on = 1; next }
  /^<!-- install:end -->/ { on = 0 }
  on && /^```sh$/ { n++; f = sprintf("%s/block%02d.sh", dir, n); inblock = 1; next }
  inblock && /^```$/ { inblock = 0; close(f); next }
  inblock { print > f }
  # A python block whose first line is "# NAME.py" is that file of the clone.
  on && /^```python$/ { getline first; if (first ~ /^# [a-z_]+\.py$/) { py = dir "/clone/" substr(first, 3); pyblock = 1; print first > py }; next }
  pyblock && /^```$/ { pyblock = 0; close(py); next }
  pyblock { print > py }
' "$readme"
blocks=$(ls "$T"/block*.sh 2>/dev/null | wc -l)
[ "$blocks" -ge 5 ] || fail "found $blocks sh blocks between the install markers in $readme (want the install, C, Rust and Python blocks)"
grep -q 'cmake --install' "$T/block01.sh" || fail "the first install block does not run cmake --install"

# The expected bits: rank r holds 1/(3+i+r) as f32, summed in rank order.
want=$("$py" - <<'PY'
import struct
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
out = []
for i in range(8):
    acc = f32(1.0 / (3 + i))
    for r in (1, 2):
        acc = f32(acc + f32(1.0 / (3 + i + r)))
    out.append("%08x" % struct.unpack("I", struct.pack("f", acc))[0])
print(" ".join(out))
PY
)

have() { command -v "$1" >/dev/null 2>&1; }
ran=0
declare -A lines=()
for b in "$T"/block*.sh; do
  name=$(basename "$b" .sh)
  sed -i "s|/opt/ds4tp|$prefix|g" "$b"
  if grep -q 'cargo ' "$b" && ! have cargo; then
    echo "SKIP $name (cargo not found; Debian: apt-get install cargo):"; sed 's/^/    /' "$b"; continue
  fi
  if grep -q 'DS4TP_TORCH=1' "$b" && [ "${DS4TP_NEWCOMER_TORCH:-1}" = 0 ]; then
    echo "SKIP $name (DS4TP_NEWCOMER_TORCH=0: the plain build's install_newcomer runs it):"
    sed 's/^/    /' "$b"; continue
  fi
  if grep -q 'DS4TP_TORCH=1' "$b" && ! torch_why=$("$py" "$src/tests/bindings/torch_ready.py" 2>/dev/null); then
    echo "SKIP $name (${torch_why#SKIP: }):"; sed 's/^/    /' "$b"; continue
  fi
  if grep -q 'pip install' "$b" && ! "$py" -c "import setuptools, pip" 2>/dev/null; then
    echo "SKIP $name ($py lacks pip or setuptools: python3-pip, python3-setuptools):"; sed 's/^/    /' "$b"; continue
  fi
  echo "--- $name"
  sed 's/^/    /' "$b"
  # A user's shell: no library or package paths from ctest; pip offline.
  if ! (cd "$T/clone" && env -u LD_LIBRARY_PATH -u DYLD_LIBRARY_PATH -u DS4TP_LIBRARY -u DS4TP_PREFIX \
          -u DS4TP_LIB_DIR -u DS4TP_STATIC -u PKG_CONFIG_PATH -u PYTHONPATH -u CARGO_TARGET_DIR -u RUSTFLAGS \
          PATH="$T/bin:$PATH" prefix="$prefix" PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
          PIP_ROOT_USER_ACTION=ignore PYTHONDONTWRITEBYTECODE=1 \
          timeout 600 bash -euo pipefail "$b") >"$T/$name.log" 2>&1; then
    cat "$T/$name.log"; fail "README install block $name failed (its commands are above)"
  fi
  ran=$((ran + 1))
  if grep -- '-I[^ ]*/\.\./' "$T/$name.log"; then
    fail "$name: pkg-config printed unnormalised flags (above)"
  fi
  while read -r lang bits; do
    [ "$bits" = "$want" ] || { cat "$T/$name.log"; fail "$name: the $lang all-reduce gave bits '$bits', want '$want'"; }
    lines[$lang]=$(( ${lines[$lang]:-0} + 1 ))
  done < <(sed -n 's/^newcomer all-reduce \([a-z]*\): \([0-9a-f]\{8\}\( [0-9a-f]\{8\}\)\{7\}\).*/\1 \2/p' "$T/$name.log")
  # The torch example: three ranks, each with the sum 1 + 2 + 3.
  if grep -q 'DS4TP_TORCH=1' "$b"; then
    torch_ok=$(grep -cE '^(\[default[0-2]\]:)?[0-2] 6\.0 plan: ' "$T/$name.log" || true)
    [ "$torch_ok" -eq 3 ] || { cat "$T/$name.log"; fail "$name: $torch_ok torch ranks printed the sum 6.0 (want 3)"; }
    lines[torch]=3
  fi
  # The Python package loaded the prefix's library (it names the one it loaded).
  if grep '^newcomer all-reduce python:' "$T/$name.log" | grep -v " from $prefix/lib/"; then
    fail "$name: the Python package loaded a library from outside $prefix (above)"
  fi
  grep -E 'newcomer all-reduce|warning: ds4tp-sys|pkg-config|^-I' "$T/$name.log" | sed 's/^/    > /' || true
done

# Each language's program ran (once per way of finding the library).
c=${lines[c]:-0}; rust=${lines[rust]:-0}; python=${lines[python]:-0}
[ "$c" -ge 9 ] || fail "the C program printed a correct result $c times (want 9: three ranks each for rpath, LD_LIBRARY_PATH, static)"
if have cargo; then
  [ "$rust" -ge 3 ] || fail "the Rust program printed a correct result $rust times (want 3)"
fi
if "$py" -c "import setuptools, pip" 2>/dev/null; then
  [ "$python" -ge 2 ] || fail "the Python program printed a correct result $python times (want 2: pip --prefix, venv)"
fi
if [ "${DS4TP_NEWCOMER_TORCH:-1}" != 0 ] && "$py" "$src/tests/bindings/torch_ready.py" >/dev/null 2>&1; then
  [ "${lines[torch]:-0}" -eq 3 ] || fail "no README block ran the torch backend's example"
fi
echo "newcomer OK: $ran README blocks ran; correct three-rank all-reduces: C $c, Rust $rust, Python $python, torch ranks ${lines[torch]:-0}"
