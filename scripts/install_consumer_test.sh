#!/usr/bin/env bash
# Installs the build in <build dir> into a temporary prefix and uses it from outside the source
# tree, as a user would: examples/consumer (copied away) built with find_package(meshlayout)
# and with pkg-config, and, when the build has the Python module, consumer.py with the
# installed package. Fails if an installed CMake, pkg-config or Python file names the source
# tree or the build tree.
#   scripts/install_consumer_test.sh build
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:?usage: $0 <build dir>}")
src=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
if grep -rlI -e "$src" -e "$build" "$prefix/lib" "$prefix/include" --include='*.cmake' \
     --include='*.pc' --include='*.py' --include='*.h'; then
  echo "install_consumer_test: the installed files above name the source or build tree" >&2
  exit 1
fi
cp -r examples/consumer "$work/consumer"
cd "$work"
echo "=== consumer: find_package(meshlayout CONFIG)"
cmake -S consumer -B consumer-build -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
ninja -C consumer-build >/dev/null
./consumer-build/consumer
[[ -x consumer-build/consumer_mpi ]] && ./consumer-build/consumer_mpi
echo "=== consumer: pkg-config meshlayout"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046
c++ consumer/main.cc -o consumer-pc $(pkg-config --cflags --libs meshlayout)
./consumer-pc
site=$(dirname "$(find "$prefix" -path '*meshlayout/__init__.py' | head -1)")
if [[ -n "$site" && "$site" != . ]]; then
  echo "=== consumer: python3 -c 'import meshlayout' ($site)"
  PYTHONPATH=$(dirname "$site") MESHLAYOUT_SOURCE_DIR=$src /usr/bin/python3 consumer/consumer.py
fi
echo "install consumer: OK"
