#!/usr/bin/env bash
# Installs what the tests need, builds, and runs the whole suite with ctest.
#   scripts/test.sh                 normal build (build/)
#   scripts/test.sh --sanitize address|thread
#                                   ASan+UBSan or TSan build (build-asan/, build-tsan/)
#   scripts/test.sh --platform posix [--sanitize ...]
#                                   the portable-POSIX OS layer Darwin uses
#                                   (-DDS4TP_PLATFORM=posix; build-posix/,
#                                   build-posix-asan/, ...)
#   --labels REGEX                  only the tests whose ctest label matches
#                                   (unit, fault, compat, install, bindings,
#                                   cli, demo, check, bench); the build then
#                                   leaves out the examples, bench and tool
#                                   unless a label needs them
set -euo pipefail
cd "$(dirname "$0")/.."
san=""
platform=""
labels=""
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) san="${2:-}"; shift 2 ;;
    --platform) platform="${2:-}"; shift 2 ;;
    --labels) labels="${2:-}"; shift 2 ;;
    *) echo "unknown argument: $1 (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
done
scripts/install-deps.sh
case "$san" in
  "") dir=build; extra=(-DDS4TP_BUILD_BENCH=ON) ;;
  address) dir=build-asan; extra=(-DDS4TP_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug -DDS4TP_BUILD_BENCH=OFF) ;;
  thread) dir=build-tsan; extra=(-DDS4TP_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug -DDS4TP_BUILD_BENCH=OFF) ;;
  *) echo "unknown sanitizer: $san" >&2; exit 2 ;;
esac
case "$platform" in
  "" | auto) ;;
  posix)
    # build -> build-posix, build-asan -> build-posix-asan, ...
    dir="build-posix${dir#build}"
    extra+=(-DDS4TP_PLATFORM=posix -DDS4TP_BUILD_BENCH=OFF) ;;
  *) echo "unknown platform: $platform (auto or posix)" >&2; exit 2 ;;
esac
if [ -n "$labels" ] && ! [[ "$labels" =~ install|bindings|cli|demo|bench ]]; then
  extra+=(-DDS4TP_BUILD_EXAMPLES=OFF -DDS4TP_BUILD_BENCH=OFF -DDS4TP_BUILD_TOOLS=OFF)
else
  extra+=(-DDS4TP_BUILD_EXAMPLES=ON -DDS4TP_BUILD_TOOLS=ON)
fi
scripts/build.sh "$dir" "${extra[@]}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
select=()
if [ -n "$labels" ]; then select=(-L "$labels"); fi
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" --timeout 300 "${select[@]}"
