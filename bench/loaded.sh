#!/usr/bin/env bash
# The adaptive wait policy (the default) against the two fixed ones, on an
# idle and on an oversubscribed host (bench/README.md, "Adaptive waiting").
#   bench/loaded.sh [build-dir]          (default build/; it must be built)
# Twice, first as the machine is, then with one CPU hog (a shell busy loop)
# per online core, killed on exit:
#   - ds4tp_bench: 16 KiB row gates over tcp and shm with the pair's spin_us
#     0 (always block), 1000000 (always spin) and adaptive, unpinned (the
#     kernel places ranks and hogs, as on a shared host);
#   - ds4tp_bench_service --only service: the gate service (its pair on the
#     default, adaptive) with the service's spin_us 0 (yield), 1000000 and
#     adaptive.
# Prints p50/p99 per policy and the targets: loaded, adaptive's p50 beats
# the worse fixed policy's; idle, it is within 5% of always-spin.
# Env: OUT (default bench-out/loaded), ROUNDS (6), ITERS (300), SVC_ITERS (1000).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build}"
out="${OUT:-bench-out/loaded}"
rounds="${ROUNDS:-6}" iters="${ITERS:-300}" svc_iters="${SVC_ITERS:-1000}"
for b in ds4tp_bench ds4tp_bench_service; do
  [ -x "$dir/bench/$b" ] || { echo "loaded.sh: $dir/bench/$b is not built" >&2; exit 2; }
done
mkdir -p "$out"

hogs=()
stop_hogs() {
  for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${hogs[@]}"; do wait "$p" 2>/dev/null || true; done
  hogs=()
}
trap stop_hogs EXIT
trap 'exit 130' INT TERM

results="$out/results.tsv"  # mode, case, policy, p50 us, p99 us
: >"$results"

# One mode: the pair bench (tcp, shm) and the service bench.
run_mode() {
  local mode=$1 d="$out/$1"
  mkdir -p "$d"
  echo "== $mode: load $(cut -d' ' -f1-3 /proc/loadavg), ${#hogs[@]} hogs, $(nproc) CPUs"
  "$dir/bench/ds4tp_bench" --transports tcp,shm --sections row --sizes 16k \
    --policies 0,1000000,adaptive --rounds "$rounds" --headline-iters "$iters" \
    --no-pin --out "$d" >"$d/bench.txt"
  # results.csv: section,transport,bytes,rows,layers,op,variant,spin_us,samples,p50,p90,p99
  awk -F, -v m="$mode" 'NR > 1 && $1 == "row" && $7 ~ /^lib / {
      p = $8 == "-1" ? "adaptive" : $8 == "0" ? "spin 0" : "always-spin"
      printf "%s\t%s\t%s\t%s\t%s\n", m, $2, p, $10, $12 }' "$d/results.csv" >>"$results"
  "$dir/bench/ds4tp_bench_service" --only service --iters "$svc_iters" >"$d/service.txt"
  awk -v m="$mode" '/^  service / {
      p = /adaptive/ ? "adaptive" : /spin 0, yield/ ? "spin 0" : /always-spin/ ? "always-spin" : ""
      if (p == "") next
      for (i = 1; i <= NF; i++) { if ($i == "p50") a = $(i + 1); if ($i == "p99") b = $(i + 1) }
      printf "%s\tservice\t%s\t%s\t%s\n", m, p, a, b }' "$d/service.txt" >>"$results"
}

run_mode idle
for _ in $(seq "$(nproc)"); do
  sh -c 'while :; do :; done' &
  hogs+=($!)
done
sleep 1
run_mode loaded
stop_hogs

echo
printf '%-7s %-8s %-12s %10s %10s\n' mode case policy "p50 us" "p99 us"
sort -k1,1r -k2,2 -k3,3 "$results" | awk -F'\t' '{ printf "%-7s %-8s %-12s %10.1f %10.1f\n", $1, $2, $3, $4, $5 }'
echo
awk -F'\t' '{ v[$1 "/" $2 "/" $3] = $4; cases[$2] = 1 }
  END {
    for (c in cases) {
      a = v["loaded/" c "/adaptive"]; s0 = v["loaded/" c "/spin 0"]; s1 = v["loaded/" c "/always-spin"]
      if (a != "" && s0 != "" && s1 != "") {
        w = s0 > s1 ? s0 : s1
        printf "loaded %s: adaptive p50 %.1f us vs worse fixed %.1f us: %s\n", c, a, w, a < w ? "met" : "MISSED"
      }
      a = v["idle/" c "/adaptive"]; s1 = v["idle/" c "/always-spin"]
      if (a != "" && s1 != "")
        printf "idle %s: adaptive p50 %.1f us within 5%% of always-spin %.1f us: %s\n", c, a, s1, a <= 1.05 * s1 ? "met" : "MISSED"
    }
  }' "$results" | sort
echo "(files: $out)"
