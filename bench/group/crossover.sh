#!/usr/bin/env bash
# One-shot against two-shot all_reduce p50 per size, for choosing the
# crossover (group.hpp kTwoShot*Bytes). DS4TP_GROUP_TWO_SHOT_BYTES forces
# the algorithm (0 = always two-shot, huge = never); every rank of a
# --local run shares the environment, as it must.
# Usage: bench/group/crossover.sh [build-dir] [iters]
set -euo pipefail
tool="${1:-build}/tools/ds4tp"
iters="${2:-200}"
printf "%-4s %-2s %10s %12s %12s\n" transport N bytes one_shot_us two_shot_us
for t in shm tcp; do
  for n in 2 4; do
    for bytes in 16384 65536 262144 1048576 4194304; do
      count=$((bytes / 4))
      p50() {
        DS4TP_GROUP_TWO_SHOT_BYTES=$1 "$tool" group --local "$n" --transport "$t" \
          --count "$count" --iters "$iters" 2>&1 | sed -n 's/.*p50 *\([0-9.]*\) us.*/\1/p' | tail -1
      }
      printf "%-4s %-2s %10s %12s %12s\n" "$t" "$n" "$bytes" "$(p50 999999999999)" "$(p50 0)"
    done
  done
done
