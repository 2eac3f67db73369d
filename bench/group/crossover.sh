#!/usr/bin/env bash
# all_reduce p50 per size and algorithm, for choosing the crossovers
# (group.hpp kTwoShot*Bytes, kHome*Bytes): slot one-shot, slot two-shot
# and, over shm, the home algorithm. DS4TP_GROUP_TWO_SHOT_BYTES and
# DS4TP_GROUP_HOME_BYTES force them (0 = always, huge = never); every
# rank of a --local run shares the environment. `ds4tp group` reduces
# its group buffer, as an engine using the no-copy path would.
# Usage: bench/group/crossover.sh [build-dir] [iters]
set -euo pipefail
tool="${1:-build}/tools/ds4tp"
iters="${2:-200}"
never=999999999999
printf "%-4s %-2s %10s %12s %12s %12s\n" transport N bytes one_shot_us two_shot_us home_us
for t in shm tcp; do
  for n in 2 4; do
    for bytes in 1024 4096 16384 65536 262144 1048576 4194304; do
      count=$((bytes / 4))
      p50() {  # two-shot threshold, home threshold
        DS4TP_GROUP_TWO_SHOT_BYTES=$1 DS4TP_GROUP_HOME_BYTES=$2 "$tool" group --local "$n" \
          --transport "$t" --count "$count" --iters "$iters" 2>&1 |
          sed -n 's/.*p50 *\([0-9.]*\) us.*/\1/p' | tail -1
      }
      home=-
      # The home path holds at most chunk_bytes (1 MiB by default).
      [ "$t" = shm ] && [ "$bytes" -le 1048576 ] && home=$(p50 $never 0)
      printf "%-4s %-2s %10s %12s %12s %12s\n" "$t" "$n" "$bytes" "$(p50 $never $never)" \
        "$(p50 0 $never)" "$home"
    done
  done
done
