#!/usr/bin/env bash
# Runs the group sum's bit tests (tests/unit/test_group_convert.cpp) for AArch64
# on this x86-64 host: every sum kernel an AArch64 build has (the portable
# one and the NEON one, lib/group/reduce_arm64.cpp), built static with
# Debian's aarch64 cross compiler and run under qemu-aarch64. A Mac
# (Apple Silicon) runs these same kernels; nothing here can run Mach-O.
# Bits only: qemu's speed says nothing. Installs qemu-user and
# g++-aarch64-linux-gnu when missing.
#   scripts/check-arm64-sum.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install-deps.sh" qemu-user g++-aarch64-linux-gnu
cxx=aarch64-linux-gnu-g++
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The headers the sources reach (Catch2, fmt) are arch-independent: link
# just those two into an include dir, never the host's whole /usr/include.
mkdir -p "$tmp/inc"
ln -s /usr/include/catch2 "$tmp/inc/catch2"
ln -s /usr/include/fmt "$tmp/inc/fmt"
printf '#define CATCH_CONFIG_MAIN\n#include <catch2/catch.hpp>\n' >"$tmp/main.cpp"
flags=(-std=c++20 -O2 -Wall -Wextra -Werror -DDS4TP_SUM_ARM64=1 -DFMT_HEADER_ONLY
       -I"$root/lib" -I"$root/include" -I"$root/tests" -I"$tmp/inc")
objs=()
for src in "$root/lib/group/reduce.cpp" "$root/lib/group/reduce_arm64.cpp" "$root/lib/group/call.cpp" \
           "$root/tests/unit/test_group_convert.cpp" "$tmp/main.cpp"; do
  obj="$tmp/$(basename "$src" .cpp).o"
  "$cxx" "${flags[@]}" -c "$src" -o "$obj"
  objs+=("$obj")
done
"$cxx" -static -o "$tmp/test_group_convert" "${objs[@]}"
echo "== check-arm64-sum: tests/unit/test_group_convert.cpp under qemu-aarch64 (portable + neon kernels)"
qemu-aarch64 "$tmp/test_group_convert"
