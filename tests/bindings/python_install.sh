#!/bin/sh
# ctest fixture: installs bindings/python the way a user does, offline
# (`pip install --no-build-isolation`, Debian's setuptools as the backend),
# into TARGET; the pytest suites then import it from there. A copy of the
# source is built so the source tree gets no build/ or egg-info.
#   python_install.sh PYTHON SRC TARGET
set -eu
py=$1; src=$2; target=$3
work="$target.src"
rm -rf "$target" "$work"
mkdir -p "$work"
cp -R "$src/pyproject.toml" "$src/README.md" "$src/src" "$work/"
"$py" -m pip install --quiet --no-build-isolation --no-deps --no-index --disable-pip-version-check --root-user-action=ignore \
  --no-compile --target "$target" "$work"
rm -rf "$work"
test -f "$target/ds4tp/__init__.py"
echo "installed ds4tp into $target"
