#!/usr/bin/env bash
# The engine loop (bench/README.md, "Engine loop"): per-token sync time and
# CPU per rank of libds4tp groups (shm, tcp) against the raw busy-polling
# TCP mesh and Open MPI (vader, tcp), for 2 and 4 ranks, all-reduce and
# all-gather, on the host as it is ("quiet") and with a CPU hog per core
# ("loaded"). Every implementation runs once per round in each case, the
# rounds interleaved, and the table holds the median over the rounds.
#   bench/engine_loop/run.sh [--build DIR] [--rounds N] [--tokens N]
#       [--loaded-tokens N] [--before DIR] [--results-dir DIR] [--loads "quiet loaded"]
#       [--ranks "2 4"] [-- extra loop options]
# --before DIR: also runs the loop against the library of another build
#   (DIR/lib, headers in DIR/..), e.g. main's, as "before-shm"/"before-tcp".
# --results-dir DIR writes the table to DIR/engine-loop-<date>-<host>.md.
# Run as root on a shared host: the benchmark runs in a session of its own
# whose autogroup gets nice -20 (else the kernel's autogroups give each
# session an equal share, whatever the nice value), as does the loaded
# mode's hogs, which compete with the ranks alike.
set -euo pipefail
# A session of its own: its autogroup's nice is this benchmark's alone.
[ -n "${ENGINE_LOOP_SESSION:-}" ] || exec env ENGINE_LOOP_SESSION=1 setsid -w "$0" "$@"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$root/build" rounds=3 tokens=300 loaded_tokens=60 before="" results_dir=""
loads="quiet loaded"
ranks_list="2 4" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --loaded-tokens) loaded_tokens=$2; shift 2 ;;
    --before) before=$(cd "$2" && pwd); shift 2 ;;
    --results-dir) results_dir=$2; shift 2 ;;
    --loads) loads=$2; shift 2 ;;
    --ranks) ranks_list=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) sed -n '2,16p' "$0" >&2; exit 2 ;;
  esac
done
engine="$build/bench/ds4tp_bench_engine"
[ -x "$engine" ] || { echo "run.sh: $engine is not built" >&2; exit 2; }
"$root/scripts/install-deps.sh" libopenmpi-dev >/dev/null
tmp="$(mktemp -d)"
hogs=()
stop_hogs() {
  for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${hogs[@]}"; do wait "$p" 2>/dev/null || true; done
  hogs=()
}
trap 'stop_hogs; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# The session's autogroup (Linux) and the processes: nice -20 where allowed.
[ -w /proc/self/autogroup ] && echo -20 >/proc/self/autogroup 2>/dev/null || true
renice -n -20 $$ >/dev/null 2>&1 || true

mpicc -O2 -o "$tmp/engine_mpi" "$here/engine_mpi.c" "$here/engine_core.c"
if [ -n "$before" ]; then
  # The same loop against the other build's library (its headers beside it).
  gcc -O2 -c -o "$tmp/engine_core.o" "$here/engine_core.c"
  g++ -O2 -std=c++20 -I"$before/../include" -o "$tmp/engine_before" "$here/engine_loop.cpp" \
    "$here/raw_mesh.cpp" "$tmp/engine_core.o" -L"$before/lib" -lds4tp -Wl,-rpath,"$before/lib"
fi

# What waking a rank that sleeps costs, per way of sleeping (on the host as
# it is, before any hog).
"$build/bench/ds4tp_bench_wake" 1000 300 >"$tmp/wake.txt" 2>&1 || true
loop=("${extra[@]}")
cases=("allreduce 16384" "allgather 8192")
raw="$tmp/raw.txt"
: >"$raw"
run_one() {  # load impl ranks coll bytes
  local load=$1 impl=$2 n=$3 coll=$4 bytes=$5 out
  local t=$tokens
  [ "$load" = loaded ] && t=$loaded_tokens  # a loaded token takes 10-1000x longer
  local args=(--ranks "$n" --coll "$coll" --bytes "$bytes" --tokens "$t" "${loop[@]}")
  case $impl in
    raw) out=$(timeout 300 "$engine" --impl raw "${args[@]}" 2>&1) ;;
    lib-shm | lib-tcp) out=$(timeout 300 "$engine" --impl "${impl#lib-}" "${args[@]}" 2>&1) ;;
    lib-shm/private | lib-tcp/private)
      local m=${impl#lib-}
      out=$(timeout 300 "$engine" --impl "${m%/private}" --private-buffer "${args[@]}" 2>&1) ;;
    before-shm | before-tcp)
      out=$(timeout 300 "$tmp/engine_before" --impl "${impl#before-}" "${args[@]}" 2>&1 |
        sed "s/impl=lib-/impl=before-/") ;;
    mpi-vader | mpi-tcp)
      local btl=${impl#mpi-}
      out=$(timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n" \
        --mca btl "self,$btl" --mca btl_tcp_if_include lo "$tmp/engine_mpi" --impl "$impl" \
        "${args[@]}" 2>&1) ;;
  esac
  local line
  line=$(grep '^ENGINE ' <<<"$out" || true)
  if [ -z "$line" ]; then
    echo "run.sh: $impl ranks $n $coll failed: $(tail -3 <<<"$out")" >&2
    return
  fi
  echo "load=$load ${line#ENGINE }" >>"$raw"
}

base_impls=(raw lib-shm lib-tcp mpi-vader mpi-tcp)
[ -n "$before" ] && base_impls+=(before-shm before-tcp)
loadavg=()
for load in $loads; do
  if [ "$load" = loaded ]; then
    for _ in $(seq "$(nproc)"); do
      sh -c 'while :; do :; done' &
      hogs+=($!)
    done
  fi
  impls=("${base_impls[@]}")
  # An engine that keeps its partials in its own buffer (one copy more):
  # on the quiet host only, where the copy shows.
  [ "$load" = quiet ] && impls+=(lib-shm/private lib-tcp/private)
  loadavg+=("$load: $(cut -d' ' -f1-3 /proc/loadavg)")
  echo "== $load: load $(cut -d' ' -f1-3 /proc/loadavg), ${#hogs[@]} hogs, $(nproc) CPUs" >&2
  for n in $ranks_list; do
    for c in "${cases[@]}"; do
      set -- $c
      for r in $(seq "$rounds"); do
        for impl in $(printf '%s\n' "${impls[@]}" | shuf); do
          run_one "$load" "$impl" "$n" "$1" "$2"
        done
      done
      echo "run.sh: $load, $n ranks, $1 done" >&2
    done
  done
  stop_hogs
done

header="load average (1, 5, 15 min) as each mode began: ${loadavg[*]}; $(nproc) CPUs"
header+="; loop: tokens $tokens (loaded $loaded_tokens) ${extra[*]}; median of $rounds rounds"
/usr/bin/python3 "$here/summary.py" "$raw" "$header" --wake "$tmp/wake.txt" \
  ${results_dir:+--out-dir "$results_dir"}
