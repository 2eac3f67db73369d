#!/usr/bin/env bash
# Every group collective against Open MPI's call for it, in one run: the
# p50 of `ds4tp group --local N --op NAME` (shm and tcp) and of mpi_ops.c
# (vader and tcp btl), at 16 KiB and 1 MiB per rank, N = 2 and 4, the
# same sizes and roots on both sides (tools/ds4tp/group_ops.cpp). Each
# measurement runs `reps` times, interleaved; the table shows the median
# p50 and the ratio ds4tp / MPI. all_gather_rows has no MPI call of its
# own and is left out. Writes the table to stdout and, with a results
# directory, to DIR/group-ops-<date>-<host>.md (DS4TP_BENCH_HOST names
# the host). The MPI program is compiled into a temporary directory.
# Usage: bench/group/ops.sh [build-dir] [iters] [reps] [results-dir]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
"$here/../../scripts/install-deps.sh" libopenmpi-dev
build="${1:-build}" iters="${2:-1000}" reps="${3:-3}" results_dir="${4:-}"
tool="$build/tools/ds4tp"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -o "$tmp/mpi_ops" "$here/mpi_ops.c"
ops=(${DS4TP_BENCH_OPS:-all_reduce reduce_scatter reduce gather scatter all_gather all_gather_v all_to_all_v broadcast barrier})
p50() { sed -n 's/.*p50 *\([0-9.]*\) *us.*/\1/p' | tail -1; }
for ((k = 0; k < reps; k++)); do
  for n in 2 4; do
    for count in 4096 262144; do
      it=$iters
      [ "$count" -gt 4096 ] && it=$((iters / 4))
      for op in "${ops[@]}"; do
        [ "$op" = barrier ] && [ "$count" -gt 4096 ] && continue
        for t in shm tcp; do
          v=$("$tool" group --local "$n" --transport "$t" --op "$op" --count "$count" \
                --iters "$it" 2>&1 | p50)
          echo "ds4tp $t $n $count $op ${v:-nan}" >> "$tmp/raw"
          btl=vader
          [ "$t" = tcp ] && btl=tcp
          v=$(mpirun --allow-run-as-root --oversubscribe -np "$n" --mca btl "self,$btl" \
                "$tmp/mpi_ops" "$op" "$count" "$it" 2>&1 | p50)
          echo "mpi $t $n $count $op ${v:-nan}" >> "$tmp/raw"
        done
      done
    done
  done
  echo "ops.sh: round $((k + 1)) of $reps done" >&2
done
/usr/bin/python3 - "$tmp/raw" "$reps" "$iters" "$(nproc)" "$results_dir" "$here/.." <<'PY'
import collections, math, statistics, sys
raw, reps, iters, cpus, out_dir, bench = sys.argv[1:7]
sys.path.insert(0, bench)
from results_file import write
got = collections.defaultdict(list)
for line in open(raw):
    who, t, n, count, op, v = line.split()
    if v != "nan":
        got[(who, t, int(n), int(count), op)].append(float(v))
med = {k: statistics.median(v) for k, v in got.items()}
order = ["all_reduce", "reduce_scatter", "reduce", "gather", "scatter", "all_gather",
         "all_gather_v", "all_to_all_v", "broadcast", "barrier"]
rows = ["| op | N | per rank | ds4tp shm | MPI vader | shm / MPI | ds4tp tcp | MPI tcp | tcp / MPI |",
        "|---|---|---|---|---|---|---|---|---|"]
meets = []
for op in order:
    for n in (2, 4):
        for count in (4096, 262144):
            if not any(k[4] == op and k[2] == n and k[3] == count for k in med):
                continue
            if op == "barrier" and count != 4096:
                continue  # moves no bytes
            cells = []
            for t in ("shm", "tcp"):
                a, b = med.get(("ds4tp", t, n, count, op)), med.get(("mpi", t, n, count, op))
                r = a / b if a and b else math.nan
                cells += [f"{a:.1f}" if a else "-", f"{b:.1f}" if b else "-", f"{r:.2f}x"]
                if count == 4096 and op != "barrier" and r == r:
                    meets.append(r <= 0.8)
            size = "-" if op == "barrier" else "16 KiB" if count == 4096 else "1 MiB"
            rows.append(f"| {op} | {n} | {size} | " + " | ".join(cells) + " |")
text = (f"{cpus} CPUs; p50 in us, the median of {reps} interleaved runs; {iters} calls at 16 KiB, "
        f"{int(iters) // 4} at 1 MiB; the same sizes and rotating roots on both sides\n\n"
        + "\n".join(rows) + f"\n\nAt 16 KiB, {sum(meets)} of {len(meets)} op/N/transport cells are "
        f"at most 0.8x Open MPI's p50.\n")
print(text)
if out_dir:
    write(out_dir, "group-ops", "bench/group/ops.sh", text)
PY
