#!/usr/bin/env bash
# The main job: install, build, and run the two-rank demo on loopback.
# Extra arguments go to the demo (e.g. --tokens 64 --transport tcp).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
exec build/examples/ds4tp_demo "$@"
