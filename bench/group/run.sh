#!/usr/bin/env bash
# 16 KiB f32 all-reduce p50 for N=2 and 4: ds4tp (shm, tcp; `ds4tp group
# --local N`), Open MPI (vader, tcp; mpi_ops.c all_reduce), Gloo (tcp with a
# file store; gloo_allreduce.cpp, when libgloo-dev is installed) and one
# raw TCP exchange of the same 16 KiB, and shm_floor.cpp: the library's two
# shm algorithms (slot one-shot, home) with no library, for the machine's
# own floor. The tcp N=2 target line compares within one ds4tp_bench run
# (its group section: the library's all-reduce interleaved with the raw
# exchange in the same two processes, and the raw exchange plus the sum,
# unframed and with the step header's bytes, as references).
# Every implementation runs `reps` times, interleaved, and the table shows
# the median p50, so a burst of load hits all of them alike. Ends with the
# target lines (bench/README.md, "Targets"). The baselines are compiled into a temporary
# directory; nothing here links into the library.
# Usage: bench/group/run.sh [build-dir] [iters] [reps]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# The baselines only (never the library's dependencies), as bench/run.sh
# installs matplotlib for its plots.
"$here/../../scripts/install-deps.sh" libopenmpi-dev libgloo-dev
build="${1:-build}"
tool="$build/tools/ds4tp"
iters="${2:-2000}"
reps="${3:-3}"
count=4096  # 16 KiB of f32
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
have_mpi=0
if command -v mpicc >/dev/null && mpicc -O2 -o "$tmp/mpi" "$here/mpi_ops.c" 2>/dev/null; then have_mpi=1; fi
have_floor=0
if g++ -O3 -std=c++17 -o "$tmp/floor" "$here/shm_floor.cpp" -lpthread 2>/dev/null; then have_floor=1; fi
have_gloo=0
if [ -e /usr/include/gloo/allreduce.h ] &&
   g++ -O2 -std=c++17 -o "$tmp/gloo" "$here/gloo_allreduce.cpp" -lgloo -lpthread 2>/dev/null; then
  have_gloo=1
fi
p50() { sed -n 's/.*p50 *\([0-9.]*\) *us.*/\1/p' | tail -1; }
ds4tp() { "$tool" group --local "$1" --transport "$2" --count $count --iters "$iters" 2>&1 | p50; }
mpi() {
  mpirun --allow-run-as-root --oversubscribe -np "$1" --mca btl "self,$2" "$tmp/mpi" all_reduce "$count" "$iters" 2>&1 | p50
}
gloo() {
  rm -rf "$tmp/store" && mkdir "$tmp/store"
  for ((r = 1; r < $1; r++)); do "$tmp/gloo" "$r" "$1" "$tmp/store" "$count" "$iters" >/dev/null & done
  "$tmp/gloo" 0 "$1" "$tmp/store" "$count" "$iters" | p50
  wait
}
# ds4tp_bench's group section at 16 KiB, interleaved in one run: prints
# "raw lib lib/raw sum/raw framed/raw", raw being the faster of its busy and
# blocking exchanges of the same 16 KiB, lib the group's default policy.
bench_group() {
  "$build/bench/ds4tp_bench" --transports tcp --sections group --sizes 16k --policies adaptive \
    --rounds 4 --out "$tmp/bg" 2>&1 | awk '$1 == "tcp" && $2 == "16" && $3 == "KiB" {
      name = $4; for (i = 5; i <= NF - 8; i++) name = name " " $i
      p50[name] = $(NF - 6) }
    END { raw = p50["raw busy"]; if (p50["raw block"] != "" && p50["raw block"] < raw) raw = p50["raw block"]
      if (raw == "" || p50["lib default"] == "") exit
      printf "%s %s %.3f %.3f %.3f\n", raw, p50["lib default"], p50["lib default"] / raw,
        p50["raw busy+sum"] / raw, p50["raw busy+24 B+sum"] / raw }'
}

impls=("shm 2" "shm 4" "tcp 2" "tcp 4")
[ $have_mpi = 1 ] && impls+=("vader 2" "vader 4" "mpitcp 2" "mpitcp 4")
[ $have_gloo = 1 ] && impls+=("gloo 2" "gloo 4")
[ -x "$build/bench/ds4tp_bench" ] && impls+=("bench 2")
[ $have_floor = 1 ] && [ "$(nproc)" -ge 2 ] && impls+=("floor 2" "floorhome 2")
declare -A got
for ((k = 0; k < reps; k++)); do
  for i in "${impls[@]}"; do
    set -- $i
    case $1 in
      shm | tcp) v=$(ds4tp "$2" "$1") ;;
      vader) v=$(mpi "$2" vader) ;;
      mpitcp) v=$(mpi "$2" tcp) ;;
      gloo) v=$(gloo "$2") ;;
      bench)  # five figures from one run, each kept under its own name
        read -r raw ilib iratio isum iframed <<<"$(bench_group)"
        got[raw 2]+="${raw:-nan} " got[ilib 2]+="${ilib:-nan} " got[iratio 2]+="${iratio:-nan} "
        got[isum 2]+="${isum:-nan} " got[iframed 2]+="${iframed:-nan} "
        continue ;;
      floor) v=$("$tmp/floor" $count 20000 slots | p50) ;;
      floorhome) v=$("$tmp/floor" $count 20000 home | p50) ;;
    esac
    got[$i]+="${v:-nan} "
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
declare -A med
for i in "${!got[@]}"; do med[$i]=$(echo "${got[$i]}" | median); done
m() { echo "${med[$1 $2]:--}"; }

echo "16 KiB f32 all-reduce, median of $reps p50s (us), $iters calls each; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "| %-32s | %8s | %8s |\n" implementation "N=2" "N=4"
printf "|%s|%s|%s|\n" "----------------------------------" "----------" "----------"
row() { printf "| %-32s | %8s | %8s |\n" "$1" "$(m "$2" 2)" "$(m "$2" 4)"; }
row "ds4tp shm" shm
row "ds4tp tcp" tcp
if [ $have_mpi = 1 ]; then
  row "Open MPI vader" vader
  row "Open MPI tcp" mpitcp
else
  echo "(Open MPI: mpicc not found or failed; apt-get install libopenmpi-dev)"
fi
if [ $have_gloo = 1 ]; then row "Gloo tcp" gloo; else echo "(Gloo: libgloo-dev not installed)"; fi
[ -n "${med[ilib 2]:-}" ] && printf "| %-32s | %8s | %8s |\n" "ds4tp tcp, in ds4tp_bench" "$(m ilib 2)" "-"
[ -n "${med[raw 2]:-}" ] && printf "| %-32s | %8s | %8s |\n" "raw tcp exchange (ds4tp_bench)" "$(m raw 2)" "-"
[ -n "${med[floor 2]:-}" ] && printf "| %-32s | %8s | %8s |\n" "shm floor, slots (shm_floor.cpp)" "$(m floor 2)" "-"
[ -n "${med[floorhome 2]:-}" ] && printf "| %-32s | %8s | %8s |\n" "shm floor, home (shm_floor.cpp)" "$(m floorhome 2)" "-"

# Targets (issue 18): shm <= 0.5x vader and <= 0.1x Gloo at N=2 and 4;
# tcp N=2 within 1.1x of one raw exchange of the same bytes.
target() {  # name, ours, theirs, limit
  awk -v n="$1" -v a="$2" -v b="$3" -v l="$4" 'BEGIN {
    if (a == "" || b == "" || a == "nan" || b == "nan" || b == 0) { printf "%-34s not measured\n", n; exit }
    r = a / b; printf "%-34s %8.1f / %8.1f us = %5.2fx, target <= %.2fx: %s\n", n, a, b, r, l, r <= l ? "met" : "MISSED" }'
}
echo
echo "== Targets"
for n in 2 4; do
  [ $have_mpi = 1 ] && target "shm N=$n vs Open MPI vader" "$(m shm $n)" "$(m vader $n)" 0.5
  [ $have_gloo = 1 ] && target "shm N=$n vs Gloo" "$(m shm $n)" "$(m gloo $n)" 0.1
done
# Within one ds4tp_bench run (the same two processes, interleaved), with
# what an all-reduce costs before any library code: the sum, then also the
# 16 bytes of the step header on the wire.
ratio() {  # name, ratio, limit ("" for a reference)
  awk -v n="$1" -v r="$2" -v l="$3" 'BEGIN {
    if (r == "" || r == "nan") { printf "%-34s not measured\n", n; exit }
    if (l == "") { printf "%-34s %5.2fx (a reference, not a target)\n", n, r; exit }
    printf "%-34s %5.2fx, target <= %.2fx: %s\n", n, r, l, r <= l ? "met" : "MISSED" }'
}
if [ -n "${med[iratio 2]:-}" ]; then
  ratio "tcp N=2 vs one raw tcp exchange" "$(m iratio 2)" 1.1
  ratio "(raw exchange + sum)" "$(m isum 2)" ""
  ratio "(raw exchange of 16 B more + sum)" "$(m iframed 2)" ""
fi
# Not a target: how far this machine's own floor (of the algorithm the
# library runs at N=2, 16 KiB: home) is from the vader target.
[ -n "${med[floorhome 2]:-}" ] && [ $have_mpi = 1 ] &&
  target "(shm home floor N=2 vs vader, no library)" "$(m floorhome 2)" "$(m vader 2)" 0.5
exit 0
