#!/usr/bin/env bash
# Builds the system packages (cpack: libds4tp0 and libds4tp-dev .deb, the
# .tar.gz) and uses them the way a user would, from a clean directory:
#   * the .debs' contents and dependencies are what they promise;
#   * both are unpacked with `dpkg -x` into an empty root, where the
#     packaged `ds4tp probe` runs (its relative RPATH finds the packaged
#     library; no LD_LIBRARY_PATH, no ldconfig);
#   * a C consumer (tests/install/consumer, a leader and a forked worker
#     over loopback) builds with nothing but `pkg-config` on the packaged
#     ds4tp.pc, shared and static, and through the packaged CMake package;
#   * the tarball unpacks anywhere and its tool runs.
#   scripts/package-check.sh [BUILD_DIR]      (default build/, built if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
dir="${1:-build}"
scripts/install-deps.sh
scripts/build.sh "$dir"   # incremental after scripts/test.sh
dir=$(cd "$dir" && pwd)

T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "package-check FAIL: $*" >&2; exit 1; }

rm -rf "$dir/packages"
(cd "$dir" && cpack -G "DEB;TGZ" >"$T/cpack.log" 2>&1) || { cat "$T/cpack.log"; fail "cpack"; }
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$dir/CPackConfig.cmake")
major=${version%%.*}
runtime=$(ls "$dir"/packages/libds4tp${major}_"$version"_*.deb)
dev=$(ls "$dir"/packages/libds4tp-dev_"$version"_*.deb)
tgz=$(ls "$dir"/packages/libds4tp-"$version"-*.tar.gz)
echo "built: $(basename "$runtime") $(basename "$dev") $(basename "$tgz")"

# ---- what each .deb holds and needs
has() { # has DEB PATH...: every path is in the package
  local deb=$1; shift
  dpkg-deb -c "$deb" | awk '{print $6}' >"$T/list"
  for p in "$@"; do grep -qx "./$p" "$T/list" || fail "$(basename "$deb") lacks /$p"; done
}
lacks() { # lacks DEB REGEX: no path matches
  dpkg-deb -c "$1" | awk '{print $6}' | grep -E "$2" && fail "$(basename "$1") should not hold $2"
  return 0
}
has "$runtime" usr/bin/ds4tp "usr/lib/libds4tp.so.$major" "usr/lib/libds4tp.so.$version"
lacks "$runtime" 'include/|\.a$|pkgconfig|cmake/|libds4tp\.so$'
has "$dev" usr/include/ds4tp/ds4tp.h usr/include/ds4tp/ds4tp.hpp usr/lib/libds4tp.so usr/lib/libds4tp.a \
  usr/lib/pkgconfig/ds4tp.pc usr/lib/cmake/ds4tp/ds4tpConfig.cmake usr/lib/cmake/ds4tp/ds4tpConfigVersion.cmake
lacks "$dev" 'usr/bin/|libds4tp\.so\.'
deps=$(dpkg-deb -f "$runtime" Depends)
for d in libuv1 libfmt libstdc++6; do
  [[ "$deps" == *"$d"* ]] || fail "libds4tp$major Depends lacks $d: $deps"
done
[[ "$(dpkg-deb -f "$dev" Depends)" == *"libds4tp$major (= $version)"* ]] ||
  fail "libds4tp-dev must depend on libds4tp$major (= $version): $(dpkg-deb -f "$dev" Depends)"
dpkg-deb --ctrl-tarfile "$runtime" | tar xO ./shlibs | grep -q "^libds4tp $major libds4tp$major" ||
  fail "libds4tp$major has no shlibs entry"

# ---- unpacked into a clean root
root="$T/root"
dpkg -x "$runtime" "$root"
dpkg -x "$dev" "$root"
env -u LD_LIBRARY_PATH "$root/usr/bin/ds4tp" probe >"$T/probe.out" || { cat "$T/probe.out"; fail "packaged ds4tp probe"; }
grep -q "libds4tp $version" "$T/probe.out" || fail "probe does not name libds4tp $version: $(head -2 "$T/probe.out")"
echo "packaged ds4tp probe: $(head -1 "$T/probe.out")"

export PKG_CONFIG_PATH="$root/usr/lib/pkgconfig"
unset PKG_CONFIG_LIBDIR
# The packaged .pc names /usr, where the .deb installs, so its flags are
# clean (-I/usr/include is the compiler's own: pkg-config prints nothing).
grep -qx 'prefix=/usr' "$root/usr/lib/pkgconfig/ds4tp.pc" ||
  fail "the .deb's ds4tp.pc does not name prefix=/usr: $(head -1 "$root/usr/lib/pkgconfig/ds4tp.pc")"
as_installed=$(pkg-config --cflags --libs ds4tp | xargs)
[ "$as_installed" = "-lds4tp" ] || fail "the .deb's pkg-config flags are not clean: '$as_installed' (want -lds4tp)"
# Alone on pkg-config's path (no libuv, fmt or libcrypto .pc, as on a host
# without their -dev packages) ds4tp.pc still gives its flags, static ones too.
for how in "--cflags --libs" "--static --libs"; do
  # shellcheck disable=SC2086
  alone=$(PKG_CONFIG_LIBDIR="$root/usr/lib/pkgconfig" PKG_CONFIG_PATH="" command pkg-config $how ds4tp 2>&1) ||
    fail "pkg-config $how ds4tp fails without other packages' .pc files: $alone"
done
[[ "$alone" == *"-luv"*"-lfmt"* ]] || fail "pkg-config --static --libs ds4tp lacks -luv or -lfmt: $alone"
# Here it lies unpacked under $root: pkg-config is told so.
pkg-config() { command pkg-config --define-variable=prefix="$root/usr" "$@"; }
libdir=$(pkg-config --variable=libdir ds4tp)
[ "$(cd "$libdir" && pwd)" = "$(cd "$root/usr/lib" && pwd)" ] || fail "ds4tp.pc points at $libdir, not the unpacked root"
# Release packages carry no debug info: stripped library and tool, the
# archive stripped of its debug sections (its symbols stay).
for f in "$root/usr/lib/libds4tp.so.$version" "$root/usr/bin/ds4tp" "$root/usr/lib/libds4tp.a"; do
  if readelf -S "$f" 2>/dev/null | grep -q '\.debug_info'; then fail "$f carries debug info"; fi
done
dev_kib=$(( $(stat -c %s "$dev") / 1024 ))
[ "$dev_kib" -lt 4096 ] || fail "$(basename "$dev") is $dev_kib KiB: more than 4 MiB, is the archive stripped?"
echo "packaged .pc: $as_installed; $(basename "$dev") $dev_kib KiB, no debug info"
consumer="$src/tests/install/consumer"
cc=${CC:-cc}
# shellcheck disable=SC2046
"$cc" -std=c99 -Wall -Wextra -Werror "$consumer/consumer.c" -o "$T/consumer_shared" \
  $(pkg-config --cflags --libs ds4tp) -Wl,-rpath,"$libdir"
env -u LD_LIBRARY_PATH "$T/consumer_shared" | grep -q "consumer OK" || fail "pkg-config consumer (shared)"
if readelf -d "$T/consumer_shared" | grep -q 'NEEDED.*libds4tp.so.'"$major"; then :; else fail "consumer does not need libds4tp.so.$major"; fi
static_libs=$(pkg-config --static --libs ds4tp | sed 's/-lds4tp\b//')
# shellcheck disable=SC2046,SC2086
"$cc" -std=c99 -Wall -Wextra -Werror "$consumer/consumer.c" -o "$T/consumer_static" \
  $(pkg-config --cflags ds4tp) "$libdir/libds4tp.a" $static_libs
if readelf -d "$T/consumer_static" | grep -q 'NEEDED.*libds4tp'; then fail "static consumer needs libds4tp.so"; fi
"$T/consumer_static" | grep -q "consumer OK" || fail "pkg-config consumer (static)"
echo "pkg-config consumer: shared and static OK"

cmake -S "$consumer" -B "$T/cm" -G Ninja -DCMAKE_PREFIX_PATH="$root/usr" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_BUILD_RPATH="$root/usr/lib" >"$T/cm.log" 2>&1 ||
  { cat "$T/cm.log"; fail "configuring the CMake consumer"; }
cmake --build "$T/cm" >>"$T/cm.log" 2>&1 || { cat "$T/cm.log"; fail "building the CMake consumer"; }
"$T/cm/consumer" | grep -q "consumer OK" || fail "find_package consumer"
"$T/cm/consumer_cxx" | grep -q "consumer OK" || fail "find_package C++ consumer"
echo "find_package(ds4tp) consumer: OK"

# ---- the tarball, unpacked anywhere
mkdir "$T/tgz"
tar xzf "$tgz" -C "$T/tgz"
top=$(ls -d "$T"/tgz/*/)
env -u LD_LIBRARY_PATH "$top/bin/ds4tp" probe | grep -q "libds4tp $version" || fail "tarball's ds4tp probe"
[ -f "$top/lib/pkgconfig/ds4tp.pc" ] && [ -f "$top/include/ds4tp/ds4tp.h" ] || fail "tarball lacks headers or ds4tp.pc"
# Its .pc finds the prefix from its own place (unpacked anywhere).
tlib=$(PKG_CONFIG_PATH="$top/lib/pkgconfig" command pkg-config --variable=libdir ds4tp)
[ "$(cd "$tlib" && pwd)" = "$(cd "$top/lib" && pwd)" ] || fail "the tarball's ds4tp.pc points at $tlib, not where it was unpacked"
echo "package-check OK: $(basename "$runtime"), $(basename "$dev"), $(basename "$tgz")"
