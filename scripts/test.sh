#!/usr/bin/env bash
# The README's test command (and CI's): install what is missing, then build and run every
# test twice — an optimised build, and an AddressSanitizer + UndefinedBehaviorSanitizer build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=2

run_suite() {  # run_suite <build dir> <cmake args...>
  local dir=$1; shift
  echo "=== build $dir ($*)"
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  ninja -C "$dir" -j"$jobs"
  echo "=== test $dir"
  (cd "$dir" && ctest -j"$jobs" --output-on-failure --timeout 600)
}

run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo
run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DMESHLAYOUT_SANITIZE=address,undefined \
  -DMESHLAYOUT_BUILD_BENCHMARKS=OFF
