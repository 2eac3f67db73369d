#!/usr/bin/env bash
# scripts/demo.sh builds the demo's target alone, not every test and bench:
# it runs with a `cmake` on PATH that records its calls (and, for the
# build, leaves a stand-in demo that prints its arguments), into a scratch
# build directory. Checks the build call names --target ds4tp_demo and the
# demo then runs with the script's arguments.
#   demo_targets.sh SOURCE_DIR SCRATCH
set -euo pipefail
src=$1; T=$2
rm -rf "$T"; mkdir -p "$T/bin"
trap 'rm -rf "$T"' EXIT
cat >"$T/bin/cmake" <<'SHIM'
#!/usr/bin/env bash
echo "cmake $*" >>"$DEMO_LOG"
if [ "$1" = "--build" ]; then
  mkdir -p "$2/examples"
  printf '#!/bin/sh\necho "stand-in demo: $*"\n' >"$2/examples/ds4tp_demo"
  chmod +x "$2/examples/ds4tp_demo"
fi
SHIM
chmod +x "$T/bin/cmake"
out=$(PATH="$T/bin:$PATH" DEMO_LOG="$T/log" DS4TP_BUILD_DIR="$T/build" "$src/scripts/demo.sh" --tokens 2)
build=$(grep '^cmake --build' "$T/log") || { cat "$T/log"; echo "FAIL: demo.sh never ran cmake --build"; exit 1; }
case "$build" in
  *"--target ds4tp_demo"*) ;;
  *) echo "FAIL: demo.sh builds more than the demo: $build"; exit 1 ;;
esac
[ "$out" = "stand-in demo: --tokens 2" ] || { echo "FAIL: the demo ran as '$out'"; exit 1; }
echo "demo.sh builds only ds4tp_demo: $build"
