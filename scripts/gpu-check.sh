#!/usr/bin/env bash
# Builds the CUDA examples with nvcc and runs them on this machine's GPU:
# two ranks on one GPU over shm (pair) and a group of 2 (two threads), each
# way (sync per gate, stream memory operations, graph replay, spinning
# kernel) printing one line with its time per token of 2 x 43 gates of
# 16 KiB. Exits non-zero on any mismatch, error or timeout.
#
#   scripts/gpu-check.sh [build-dir]     (default build-gpu)
# Environment: GPU_CHECK_TOKENS (32), GPU_CHECK_TIMEOUT seconds per run
# (60), CUDA_ARCH for CMAKE_CUDA_ARCHITECTURES (native when cmake knows
# it, else 90), CUDACXX (nvcc; default: PATH, then /usr/local/cuda/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build-gpu}"
tokens="${GPU_CHECK_TOKENS:-32}"
per_run="${GPU_CHECK_TIMEOUT:-60}"

die() { echo "gpu-check: $*" >&2; exit 2; }

for tool in cmake timeout; do
  command -v "$tool" >/dev/null || die "$tool not found (install it, or run scripts/install-deps.sh)"
done
if [ -z "${CUDACXX:-}" ]; then
  if command -v nvcc >/dev/null; then CUDACXX="$(command -v nvcc)"
  elif [ -x /usr/local/cuda/bin/nvcc ]; then CUDACXX=/usr/local/cuda/bin/nvcc
  else die "nvcc not found: put it in PATH or set CUDACXX"; fi
fi
export CUDACXX
if command -v nvidia-smi >/dev/null; then
  echo "gpu-check: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
else
  echo "gpu-check: nvidia-smi not found; trying anyway"
fi
echo "gpu-check: $("$CUDACXX" --version | tail -1)"

arch="${CUDA_ARCH:-}"
if [ -z "$arch" ]; then
  # "native" needs cmake 3.24; older ones get Hopper (H100/H200) code.
  read -r maj min < <(cmake --version | sed -n '1s/[^0-9]*\([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
  if [ "$maj" -gt 3 ] || { [ "$maj" -eq 3 ] && [ "$min" -ge 24 ]; }; then arch=native; else arch=90; fi
fi
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)

echo "gpu-check: building into $dir (CUDA architectures: $arch)"
start=$(date +%s)
mkdir -p "$dir"
cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DDS4TP_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DDS4TP_BUILD_TESTS=OFF -DDS4TP_BUILD_BENCH=OFF \
  -DDS4TP_BUILD_TOOLS=OFF -DDS4TP_BUILD_COMPAT=OFF >"$dir/gpu-check-configure.log" 2>&1 ||
  { tail -30 "$dir/gpu-check-configure.log" >&2; die "cmake configure failed (log: $dir/gpu-check-configure.log)"; }
cmake --build "$dir" -j"$(nproc)" --target ds4tp_cuda_stream ds4tp_cuda_demo >"$dir/gpu-check-build.log" 2>&1 ||
  { tail -40 "$dir/gpu-check-build.log" >&2; die "build failed (log: $dir/gpu-check-build.log)"; }
echo "gpu-check: built in $(( $(date +%s) - start )) s"

stream="$dir/examples/cuda/ds4tp_cuda_stream"
demo="$dir/examples/cuda/ds4tp_cuda_demo"
if missing="$(ldd "$stream" 2>/dev/null | grep 'not found')"; then
  die "built, but cannot run here: $(tr -s ' \t\n' ' ' <<<"$missing")(no NVIDIA driver?)"
fi
fails=0
# run NAME CMD...: the way lines of its output, or why it failed.
run() {
  local name="$1"; shift
  local out rc=0
  out="$(timeout --kill-after=10 "$per_run" "$@" 2>&1)" || rc=$?
  grep -E '^(pair|group) +way ' <<<"$out" || true
  if [ "$rc" -eq 0 ] && ! grep -q MISMATCH <<<"$out"; then return 0; fi
  fails=$((fails + 1))
  case "$rc" in
    124|137) echo "gpu-check: $name: TIMEOUT after ${per_run} s" ;;
    77) echo "gpu-check: $name: no usable CUDA device (exit 77)" ;;
    127) echo "gpu-check: $name: cannot start (exit 127: a library or the binary is missing)" ;;
    *) echo "gpu-check: $name: FAILED (exit $rc)" ;;
  esac
  echo "--- $name output (last 40 lines) ---"
  tail -40 <<<"$out"
  echo "---"
}

model=(--layers 43 --embd 4096 --tokens "$tokens")
run "pair (auto ops)" "$stream" "${model[@]}" --transport shm
run "pair (32-bit ops)" "$stream" "${model[@]}" --transport shm --ops 32
run "pair (spin kernels)" "$stream" "${model[@]}" --transport shm --ops spin
run "group of 2" "$stream" --group "${model[@]}"
run "pair (spinning kernel demo)" "$demo" "${model[@]}" --transport shm

echo "gpu-check: $(( $(date +%s) - start )) s in all"
if [ "$fails" -ne 0 ]; then
  echo "gpu-check: $fails run(s) FAILED"
  exit 1
fi
echo "gpu-check: all ways bit-identical"
