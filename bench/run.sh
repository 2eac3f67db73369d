#!/usr/bin/env bash
# Builds libds4tp and ds4tp_bench, runs the bench on this host (leader +
# spawned worker on loopback) and plots the result.
#   bench/run.sh [ds4tp_bench options]      e.g. --long, --transports tcp
# Output: bench-out/ (table.txt, results.csv, samples-16k.csv, *.png,
# summary.md), or the directory given with --out; the target figures also
# go into bench/results/<date>-<host>.md (bench/summary.py --out-dir).
# DS4TP_BUILD_DIR overrides build/; DS4TP_BENCH_HOST names the host in
# bench/results/ (default: uname -n).
# Big gates on a rate-limited veth link vs loopback, with their target
# lines: bench/link/run.sh (root; bench/README.md, "Big gates on a
# rate-limited link").
set -euo pipefail
cd "$(dirname "$0")/.."
# matplotlib only for the plots: the test path does not need it.
scripts/install-deps.sh python3-matplotlib
dir="${DS4TP_BUILD_DIR:-build}"
scripts/build.sh "$dir"
out=bench-out
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  if [ "${args[$i]}" = "--out" ] && [ $((i + 1)) -lt ${#args[@]} ]; then out="${args[$((i + 1))]}"; fi
done
"$dir/bench/ds4tp_bench" --out "$out" "$@"
/usr/bin/python3 bench/plot.py "$out"
# The target figures as a Markdown row, in the run's summary.md and in
# the host's file of the day under bench/results/.
/usr/bin/python3 bench/summary.py "$out" --out-dir bench/results \
  --host "${DS4TP_BENCH_HOST:-$(uname -n)}" >"$out/summary.md"
echo "summary.py: wrote $out/summary.md"
