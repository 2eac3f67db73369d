#!/usr/bin/env bash
# Configures and builds into build/ (or $1 with extra cmake args after it).
# DS4TP_BUILD_TARGETS (space-separated) builds only those targets.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build}"
shift || true
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
# shellcheck disable=SC2086
cmake --build "$dir" -j"$(nproc)" ${DS4TP_BUILD_TARGETS:+--target $DS4TP_BUILD_TARGETS}
