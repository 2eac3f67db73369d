#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan+UBSan) and runs each one.
#   scripts/fuzz.sh [SECONDS]   run every target SECONDS (default 20) each
# Environment: DS4TP_FUZZ_BUILD (build folder, default build-fuzz),
# DS4TP_FUZZ_TARGETS (space-separated subset). The corpus grows in
# $DS4TP_FUZZ_BUILD/fuzz-corpus/<target> across runs, seeded with valid
# messages; a crash leaves its input in fuzz-artifacts/<target>/ and fails
# the script: copy that file to tests/fuzz/regressions/<target>/ so the
# normal suite (test_fuzz_regress) keeps checking it once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
dir="${DS4TP_FUZZ_BUILD:-build-fuzz}"
scripts/install-deps.sh clang libclang-rt-14-dev
CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDS4TP_BUILD_FUZZ=ON -DDS4TP_SANITIZE=address -DDS4TP_BUILD_TESTS=OFF \
  -DDS4TP_BUILD_EXAMPLES=OFF -DDS4TP_BUILD_BENCH=OFF -DDS4TP_BUILD_TOOLS=OFF \
  -DDS4TP_WITH_RDMA=OFF >/dev/null
cmake --build "$dir" -j"$(nproc)" --target ds4tp_fuzz_all
"$dir/tests/fuzz/ds4tp_fuzz_seeds" "$dir/fuzz-corpus" >/dev/null
# Every target tests/fuzz/CMakeLists.txt builds, unless a subset is named.
targets="${DS4TP_FUZZ_TARGETS:-$(cd "$dir/tests/fuzz" && ls fuzz_* | sed 's/^fuzz_//')}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=0
for t in $targets; do
  mkdir -p "$dir/fuzz-corpus/$t" "$dir/fuzz-artifacts/$t"
  extra=()
  if [ -d "tests/fuzz/regressions/$t" ]; then extra=("tests/fuzz/regressions/$t"); fi
  log="$dir/fuzz-$t.log"
  if "$dir/tests/fuzz/fuzz_$t" -max_total_time="$secs" -print_final_stats=1 \
      -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$dir/fuzz-artifacts/$t/" \
      "$dir/fuzz-corpus/$t" "${extra[@]}" >"$log" 2>&1; then
    execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    echo "fuzz_$t: ${execs:-?} executions in ${secs} s, ${cov:-cov: ?}, no crash"
  else
    failed=1
    echo "fuzz_$t: FAILED; crashing input(s): $(ls "$dir/fuzz-artifacts/$t")" >&2
    tail -40 "$log" >&2
  fi
done
exit $failed
