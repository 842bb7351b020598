#!/usr/bin/env bash
# `pip install .` as a user runs it, checked from outside the source tree: a fresh venv
# (python3 -m venv --system-site-packages: Debian's numpy, pytest, setuptools and wheel), then
#   pip install --no-build-isolation --no-index .
# with the module already built in <build dir> (MESHLAYOUT_PREBUILT, so the library is not
# compiled a second time), then the Python test suite, copied into a temporary directory, run
# against the installed package. Fails if the package imported is not the venv's.
#   scripts/pip_install_test.sh build
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:?usage: $0 <build dir with the Python module>}")
src=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
py=$work/venv/bin/python
# A build without the module is refused, naming where the module was looked for.
if out=$(MESHLAYOUT_PREBUILT=$work/no-build "$py" -m pip install --no-build-isolation --no-index \
           --no-cache-dir -q "$src" 2>&1); then
  echo "pip_install_test: MESHLAYOUT_PREBUILT without a module was accepted" >&2
  exit 1
fi
grep -q "no module $work/no-build/python/meshlayout/_meshlayout\*.so" <<<"$out" || {
  echo "pip_install_test: unexpected error for a build without the module:" >&2
  echo "$out" >&2
  exit 1
}
MESHLAYOUT_PREBUILT=$build "$py" -m pip install --no-build-isolation --no-index --no-cache-dir \
  -q "$src"
cp -r python/tests "$work/tests"
cd "$work"
# shellcheck disable=SC2016  # $-free Python
"$py" -c '
import os, sys
import meshlayout
where = os.path.realpath(meshlayout.__file__)
if not where.startswith(os.path.realpath(sys.prefix) + os.sep):
    sys.exit(f"pip_install_test: imported {where}, not the package installed in {sys.prefix}")
print("pip_install_test: import meshlayout ->", where)
'
"$py" -m pytest -q -p no:cacheprovider tests
