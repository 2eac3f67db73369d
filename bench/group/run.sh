#!/usr/bin/env bash
# 16 KiB f32 all-reduce p50 for N=2 and 4: ds4tp (shm, tcp; `ds4tp group
# --local N`), Open MPI (vader, tcp; mpi_allreduce.c) and Gloo (tcp with a
# file store; gloo_allreduce.cpp, when libgloo-dev is installed). The
# baselines are compiled into a temporary directory; nothing here links
# into the library. Usage: bench/group/run.sh [build-dir] [iters]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tool="${1:-build}/tools/ds4tp"
iters="${2:-2000}"
count=4096  # 16 KiB of f32
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
have_mpi=0
if command -v mpicc >/dev/null && mpicc -O2 -o "$tmp/mpi" "$here/mpi_allreduce.c" 2>/dev/null; then have_mpi=1; fi
have_gloo=0
if [ -e /usr/include/gloo/allreduce.h ] &&
   g++ -O2 -std=c++17 -o "$tmp/gloo" "$here/gloo_allreduce.cpp" -lgloo -lpthread 2>/dev/null; then
  have_gloo=1
fi
p50() { sed -n 's/.*p50 *\([0-9.]*\) *us.*/\1/p' | tail -1; }
mpi() {
  mpirun --allow-run-as-root --oversubscribe -np "$1" --mca btl "self,$2" "$tmp/mpi" "$count" "$iters" 2>&1 | p50
}
gloo() {
  rm -rf "$tmp/store" && mkdir "$tmp/store"
  for ((r = 1; r < $1; r++)); do "$tmp/gloo" "$r" "$1" "$tmp/store" "$count" "$iters" >/dev/null & done
  "$tmp/gloo" 0 "$1" "$tmp/store" "$count" "$iters" | p50
  wait
}
echo "16 KiB f32 all-reduce, p50 us, $iters calls; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "| %-16s | %8s | %8s |\n" implementation "N=2" "N=4"
printf "|%s|%s|%s|\n" "------------------" "----------" "----------"
for t in shm tcp; do
  a=$("$tool" group --local 2 --transport $t --count $count --iters "$iters" 2>&1 | p50)
  b=$("$tool" group --local 4 --transport $t --count $count --iters "$iters" 2>&1 | p50)
  printf "| %-16s | %8s | %8s |\n" "ds4tp $t" "$a" "$b"
done
if [ $have_mpi = 1 ]; then
  printf "| %-16s | %8s | %8s |\n" "Open MPI vader" "$(mpi 2 vader)" "$(mpi 4 vader)"
  printf "| %-16s | %8s | %8s |\n" "Open MPI tcp" "$(mpi 2 tcp)" "$(mpi 4 tcp)"
else
  echo "(Open MPI: mpicc not found or failed; apt-get install libopenmpi-dev)"
fi
if [ $have_gloo = 1 ]; then
  printf "| %-16s | %8s | %8s |\n" "Gloo tcp" "$(gloo 2)" "$(gloo 4)"
else
  echo "(Gloo: libgloo-dev not installed)"
fi
