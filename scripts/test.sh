#!/usr/bin/env bash
# Installs what the tests need, builds, and runs the whole suite with ctest.
#   scripts/test.sh                 normal build (build/)
#   scripts/test.sh --sanitize address|thread
#                                   ASan+UBSan or TSan build (build-asan/, build-tsan/)
set -euo pipefail
cd "$(dirname "$0")/.."
san=""
if [ "${1:-}" = "--sanitize" ]; then san="$2"; fi
scripts/install-deps.sh
case "$san" in
  "") dir=build; extra=() ;;
  address) dir=build-asan; extra=(-DDS4TP_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug -DDS4TP_BUILD_BENCH=OFF) ;;
  thread) dir=build-tsan; extra=(-DDS4TP_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug -DDS4TP_BUILD_BENCH=OFF) ;;
  *) echo "unknown sanitizer: $san" >&2; exit 2 ;;
esac
scripts/build.sh "$dir" "${extra[@]}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" --timeout 300
