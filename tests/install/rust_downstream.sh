#!/bin/sh
# Builds tests/install/rust_downstream (a crate depending on bindings/rust)
# against an install prefix through pkg-config alone, shared and static,
# and runs it. The shared build must carry no rpath (the loader finds the
# library through LD_LIBRARY_PATH here); the static one needs no libds4tp
# at run time. Then the same through DS4TP_LIB_DIR and DS4TP_STATIC.
#   rust_downstream.sh CARGO PREFIX LIBDIR TARGET_DIR
set -eu
cargo=$1; prefix=$2; libdir=$3; target=$4
src=$(cd "$(dirname "$0")/rust_downstream" && pwd)
unset DS4TP_LIB_DIR DS4TP_STATIC LD_LIBRARY_PATH
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
export CARGO_TARGET_DIR="$target"
fail() { echo "FAIL: $*"; exit 1; }

"$cargo" build --offline --locked --manifest-path "$src/Cargo.toml" || fail "shared build"
exe="$target/debug/ds4tp-downstream"
readelf -d "$exe" | grep -q 'NEEDED.*libds4tp\.so' || fail "the shared build does not link libds4tp.so"
if readelf -d "$exe" | grep -qE 'RPATH|RUNPATH'; then
  readelf -d "$exe" | grep -E 'RPATH|RUNPATH'; fail "an rpath was baked into the binary"
fi
if "$exe" >/dev/null 2>&1; then fail "ran without the library on the loader's path?"; fi
LD_LIBRARY_PATH="$prefix/$libdir" "$exe" | tee "$target/shared.out"
grep -q "downstream OK" "$target/shared.out" || fail "shared run"

"$cargo" build --offline --locked --features static --manifest-path "$src/Cargo.toml" || fail "static build"
if readelf -d "$exe" | grep -q 'NEEDED.*libds4tp'; then fail "the static build still needs libds4tp.so"; fi
"$exe" | tee "$target/static.out"
grep -q "downstream OK" "$target/static.out" || fail "static run"
# The environment overrides instead of pkg-config on the path: DS4TP_LIB_DIR
# names the directory, DS4TP_STATIC=1 asks for the archive (its private
# libraries from the ds4tp.pc beside it).
env -u PKG_CONFIG_PATH DS4TP_LIB_DIR="$prefix/$libdir" DS4TP_STATIC=1 \
  "$cargo" build --offline --locked --manifest-path "$src/Cargo.toml" || fail "DS4TP_LIB_DIR + DS4TP_STATIC build"
if readelf -d "$exe" | grep -q 'NEEDED.*libds4tp'; then fail "DS4TP_STATIC=1 still needs libds4tp.so"; fi
"$exe" | grep -q "downstream OK" || fail "DS4TP_LIB_DIR + DS4TP_STATIC run"

echo "rust downstream OK (shared via pkg-config, static via pkg-config --static, static via DS4TP_LIB_DIR + DS4TP_STATIC)"
