#!/usr/bin/env bash
# Before/after of two or more builds in one run: the 16 KiB figures a
# change to the data layer must keep (a pair's row gate over tcp and over
# shm, a 2-rank group's all-reduce over shm and over tcp), each build run
# once per case in every round, interleaved, so a host that drifts (CPU
# frequency, a neighbour) moves every build alike. Prints one markdown table of the
# rounds' medians (min and max beside them).
#   bench/ab.sh [--rounds N] [--results-dir DIR] NAME=BUILD_DIR ...
# BUILD_DIR holds tools/ds4tp (a build of any version with the CLI), e.g.
#   git worktree add /tmp/before <commit> && cmake -S /tmp/before -B /tmp/before/build -G Ninja \
#     -DCMAKE_BUILD_TYPE=RelWithDebInfo && ninja -C /tmp/before/build ds4tp_cli
#   bench/ab.sh before=/tmp/before/build after=build
# --results-dir DIR also writes the table to DIR/ab-<YYYY-MM-DD>-<host>.md
# (host: DS4TP_BENCH_HOST, default uname -n). Run it on an idle host.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=9 results_dir="" builds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --results-dir) results_dir=$2; shift 2 ;;
    *=*) builds+=("$1"); shift ;;
    *) echo "usage: bench/ab.sh [--rounds N] [--results-dir DIR] NAME=BUILD_DIR ..." >&2; exit 2 ;;
  esac
done
[ ${#builds[@]} -ge 1 ] || { echo "bench/ab.sh: name at least one NAME=BUILD_DIR" >&2; exit 2; }
for b in "${builds[@]}"; do
  [ -x "${b#*=}/tools/ds4tp" ] || { echo "bench/ab.sh: no ${b#*=}/tools/ds4tp" >&2; exit 2; }
done

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
port=$((20000 + RANDOM % 20000))
p50() { grep -o 'p50 *[0-9.]*' | head -1 | awk '{print $2}'; }
for r in $(seq 1 "$rounds"); do
  for b in "${builds[@]}"; do
    name=${b%%=*} cli=${b#*=}/tools/ds4tp
    # "-1cpu": both ranks on CPU 0, where waits yield and sleep (the
    # shared-memory bell) instead of meeting in a spin.
    for c in shm tcp shm-1cpu; do
      t=${c%-1cpu} pin=(); [ "$c" = "$t" ] || pin=(taskset -c 0)
      v=$(timeout 120 "${pin[@]}" "$cli" group --local 2 --transport $t --count 4096 --iters 3000 \
          2>&1 | p50)
      echo "$name group-all-reduce-$c ${v:-nan}" >>"$raw"
    done
    for c in tcp shm shm-1cpu; do
      t=${c%-1cpu} pin=(); [ "$c" = "$t" ] || pin=(taskset -c 0)
      port=$((port + 1))
      timeout 120 "${pin[@]}" "$cli" pair --listen 127.0.0.1:$port --transport $t --count 4000 \
        --big 0 >/dev/null 2>&1 &
      leader=$!
      sleep 0.3
      v=$(timeout 120 "${pin[@]}" "$cli" pair --connect 127.0.0.1:$port --transport $t \
          --count 4000 --big 0 2>&1 | p50)
      wait $leader || true
      echo "$name pair-row-gate-$c ${v:-nan}" >>"$raw"
    done
  done
  echo "bench/ab.sh: round $r of $rounds" >&2
done

table=$(/usr/bin/env python3 - "$raw" "$rounds" "${builds[@]}" <<'EOF'
import statistics, sys
raw, rounds, builds = sys.argv[1], sys.argv[2], [b.split("=", 1)[0] for b in sys.argv[3:]]
got = {}
for line in open(raw):
    name, case, v = line.split()
    if v != "nan":
        got.setdefault((case, name), []).append(float(v))
cases = ["pair-row-gate-tcp", "pair-row-gate-shm", "pair-row-gate-shm-1cpu",
         "group-all-reduce-shm", "group-all-reduce-tcp", "group-all-reduce-shm-1cpu"]
print(f"16 KiB p50 in us: median of {rounds} interleaved rounds (min-max)\n")
print("| case | " + " | ".join(builds) + " |")
print("|---|" + "---|" * len(builds))
for c in cases:
    cells = []
    for b in builds:
        v = got.get((c, b), [])
        cells.append(f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})" if v else "failed")
    print(f"| {c} | " + " | ".join(cells) + " |")
EOF
)
echo "$table"
if [ -n "$results_dir" ]; then
  mkdir -p "$results_dir"
  out="$results_dir/ab-$(date +%F)-${DS4TP_BENCH_HOST:-$(uname -n)}.md"
  {
    echo "# bench/ab.sh: $(date +%F) on ${DS4TP_BENCH_HOST:-$(uname -n)}"
    echo
    echo "Builds (the commit each build directory's checkout holds):"
    echo
    for b in "${builds[@]}"; do
      echo "- ${b%%=*}: $(git -C "${b#*=}" rev-parse --short HEAD 2>/dev/null || echo "not a git checkout")"
    done
    echo
    echo "$table"
  } >"$out"
  echo "bench/ab.sh: wrote $out" >&2
fi
