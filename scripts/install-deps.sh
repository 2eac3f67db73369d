#!/usr/bin/env bash
# Installs the Debian 12 packages libds4tp builds and tests with.
# Skips apt entirely when everything is already there.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config
  libuv1-dev libfmt-dev catch2
  libssl-dev iproute2
  libibverbs-dev
  python3-pytest cargo
  python3-setuptools python3-pip  # bindings/python: pip install --no-build-isolation
  python3-numpy  # tests only: the Python binding takes numpy arrays as vectors
  dpkg-dev  # cpack .deb: dpkg-shlibdeps (scripts/package-check.sh)
  openmpi-bin  # tests only: cli_group_mpirun (4 ranks under mpirun)
)
# Extra packages a caller may add (e.g. the sanitizer or binding builds).
PKGS+=("$@")

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "installing: ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
