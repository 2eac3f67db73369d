#!/usr/bin/env bash
# Split-phase group calls against blocking ones, and a compute + all-reduce
# layer loop in series and overlapped (ds4tp_bench_split), over shm and
# tcp at N = 2 and 4, 16 KiB and 1 MiB; the median of --rounds runs per
# case. Writes the table to stdout and, with --results-dir DIR, to
# DIR/split-phase-<date>-<host>.md (DS4TP_BENCH_HOST names the host).
# Usage: bench/group/split_phase.sh [--build DIR] [--rounds N] [--iters N]
#                                   [--results-dir DIR]
set -euo pipefail
build=build rounds=3 iters=2000 results_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --results-dir) results_dir=$2; shift 2 ;;
    *) echo "split_phase.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
bin="$build/bench/ds4tp_bench_split"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for r in $(seq "$rounds"); do
  for t in shm tcp; do
    for n in 2 4; do
      "$bin" --transport "$t" --ranks "$n" --iters "$iters" >> "$raw"
    done
  done
  echo "split_phase.sh: round $r of $rounds done" >&2
done
/usr/bin/python3 - "$raw" "$rounds" "$iters" "$(nproc)" "$results_dir" "$(dirname "$0")/.." <<'PY'
import collections, statistics, sys
raw, rounds, iters, cpus, out_dir, bench = sys.argv[1:7]
sys.path.insert(0, bench)
from results_file import write
runs = collections.defaultdict(list)
for line in open(raw):
    if line.startswith("SPLIT "):
        f = dict(kv.split("=", 1) for kv in line.split()[1:])
        runs[(f["transport"], int(f["ranks"]), int(f["bytes"]), f["case"])].append(float(f["us"]))
med = {k: statistics.median(v) for k, v in runs.items()}
rows = ["| transport | N | bytes | blocking us | start+wait us | ratio | layer serial us "
        "| layer overlapped us | ratio |", "|---|---|---|---|---|---|---|---|---|"]
for (t, n, b) in sorted({k[:3] for k in med}, key=lambda k: (k[0] != "shm", k[1], k[2])):
    g = lambda c: med[(t, n, b, c)]
    rows.append(f"| {t} | {n} | {b} | {g('blocking'):.1f} | {g('start+wait'):.1f} | "
                f"{g('start+wait') / g('blocking'):.2f}x | {g('layers-serial'):.1f} | "
                f"{g('layers-overlap'):.1f} | {g('layers-overlap') / g('layers-serial'):.2f}x |")
text = (f"{cpus} CPUs; {iters} calls (layers) per case, the slowest rank's median, median of "
        f"{rounds} rounds; a layer computes as long as a blocking all-reduce of its size\n\n"
        + "\n".join(rows) + "\n")
print(text)
if out_dir:
    write(out_dir, "split-phase", "bench/group/split_phase.sh", text)
PY
