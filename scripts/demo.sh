#!/usr/bin/env bash
# The README's main job: install what is missing, build the CLI, run `meshlayout demo` on the
# default virtual mesh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build -j2 meshlayout
./build/bin/meshlayout demo
