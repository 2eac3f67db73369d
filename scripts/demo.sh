#!/usr/bin/env bash
# The main job: install, build, and run the two-rank demo on loopback.
# Builds only what the demo needs (the library and ds4tp_demo, into
# build/ or $DS4TP_BUILD_DIR); scripts/test.sh builds the rest.
# Extra arguments go to the demo (e.g. --tokens 64 --transport tcp).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${DS4TP_BUILD_DIR:-build}"
scripts/install-deps.sh
DS4TP_BUILD_TARGETS=ds4tp_demo scripts/build.sh "$dir"
exec "$dir/examples/ds4tp_demo" "$@"
