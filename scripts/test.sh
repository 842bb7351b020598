#!/usr/bin/env bash
# The README's test command (and CI's): install what is missing, then build and run
#   1. every test (unit, property, examples, CLI, mpirun -np 2/4) in an optimised build, then
#      the Python module's pytest suite on that build, then `pip install .` of that module into a
#      venv and the suite again from outside the tree, then an install of it used from outside
#      the tree (C++ with find_package and pkg-config, Python);
#   2. the same C++ tests under AddressSanitizer + UndefinedBehaviorSanitizer (the heaviest
#      cases, listed below, in the optimised stage only);
#   3. the threaded code (thread pool, in-process communicator, arrays as thread ranks,
#      checkpoint I/O on the pool, progress bars,
#      concurrent lookups) under ThreadSanitizer (MPI left out: Open MPI is not instrumented);
#   4. each fuzz target for a short smoke run, the three at once (fuzz/run.sh; 5-minute runs are
#      for developers).
# Before building, every C++ file is checked against .clang-format (scripts/format.sh --check)
# and the compute seam's rule is checked (scripts/check_compute_seam.sh).
# Every build here treats warnings as errors (MESHLAYOUT_WERROR; users' builds do not).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --fuzz
jobs=2
passed=0   # tests passed over every stage, for the closing line
skipped=0  # tests skipped (GPU tests where there is no GPU): counted apart, never as passed
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
script_start=$SECONDS
stage_start=$SECONDS
stage_times=()
stage_done() {  # stage_done <name>: records how long the stage since the last call took
  stage_times+=("$1 $((SECONDS - stage_start)) s")
  echo "=== $1 took $((SECONDS - stage_start)) s"
  stage_start=$SECONDS
}

# The heavy cases — ten-step Llama trainings (float32 and float64) against their references —
# run in the optimised stage only. Under the sanitizers their representative siblings run:
# every gradient against the float64 reference, one step, the optimizer updates by hand
# (LlamaTrainReferenceTest), and the smaller models of every layer. A sanitizer build runs
# them 10-30x slower, which made mpi.models.np4 hit its timeout on a slow machine. The model
# families under mpirun (LlamaFamiliesMpiTest: nine families x two rule sets x np 2/4) likewise
# run optimised only — under ASan they took mpi.models.np4 from 39 s to 105 s, past a third of
# its 300 s timeout; the same families run in process under the sanitizers (LlamaFamiliesTest).
# The three heaviest mpirun binaries (models, cross_entropy, train) run at np 2 only under ASan
# (their np 4 runs took 114 of the ASan stage's 337 s, their np 2 runs 58 s), and two of their
# tests optimised only: GenerationMpiTest (under ASan: GenerationTest's sampling on every mesh in
# process, mpi.cli.generate_sampled.np2 across processes) and CrossEntropyMpiTest's categorical
# case (CrossEntropyTest's in process as two and four processes; the sparse cases under mpirun).
sanitizer_ctest_exclude='^(LlamaTrainTest\.TenSteps|mpi\.(models|cross_entropy|train)\.np4$)'
sanitizer_gtest_filter='-LlamaTrainMpiTest.TenSteps*:LlamaFamiliesMpiTest.*:GenerationMpiTest.*'
sanitizer_gtest_filter+=':CrossEntropyMpiTest.CategoricalAndProbabilities*'

run_suite() {  # run_suite <build dir> <extra ctest args> <cmake args...>
  local dir=$1 ctest_extra=$2; shift 2
  echo "=== build $dir ($*)"
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  ninja -C "$dir" -j"$jobs"
  stage_done "build $dir"
  echo "=== test $dir"
  local log="$dir/ctest.log"
  # shellcheck disable=SC2086  # ctest_extra is a word list
  (cd "$dir" && ctest -j"$jobs" --output-on-failure --timeout 600 $ctest_extra) | tee "$log"
  # ctest counts a skipped test in "out of N"; it is reported as skipped instead.
  local ran not_run
  ran=$(sed -n 's/.*tests passed, 0 tests failed out of \([0-9]*\).*/\1/p' "$log")
  not_run=$(grep -c '(Skipped)$' "$log" || true)
  passed=$((passed + ran - not_run))
  skipped=$((skipped + not_run))
  stage_done "test $dir"
}

stage_done "install dependencies"
bash scripts/format.sh --check        # the tree stays as .clang-format formats it
bash scripts/check_compute_seam.sh    # layers, models, optimizers touch shard bytes only via kernels/
stage_done "format and compute-seam checks"
# Every stage builds with -g1 (line tables: a failure's stack still names files and lines) instead
# of -g: on this 2-core machine a translation unit compiles about a third faster and its object
# is half the size (cli/train_command.cc under ASan: 25 s and 28 MB with -g, 16 s and 15 MB with
# -g1), which is most of the suite's time.
g1_release=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
# Unity builds (cmake/MeshlayoutUnity.cmake): each target's sources compile as one translation
# unit, so gtest, fmt, nlohmann/json, CLI11 and the library's headers are parsed, and their inline
# code emitted and instrumented, once per target instead of once per source: a target compiles
# in 40-60% of the CPU time (the ASan+UBSan build in about 55% of its time). The sanitizer stages
# always (their build dirs are this script's own); the optimised stage only in CI's fresh clone
# (below: build/ is also the developers', whose edits rebuild one source at a time).
unity=(-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=0)
# The CUDA device kind compiles here whenever nvcc is present (so it cannot rot); its GPU tests
# skip, and are reported as skipped, where there is no GPU (scripts/gpu_check.sh runs them on one).
cuda_args=(-DMESHLAYOUT_CUDA=OFF)
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  cuda_args=(-DMESHLAYOUT_CUDA=ON)
fi
# CI (CI=true, a fresh clone) builds the optimised stage as a unity build too (1,300 -> 780 CPU
# seconds, so about 646 -> 400 s on 2 cores); a build/ configured before keeps what it has, so a
# developer's stays one source per object.
opt_unity=()
if [[ "${CI:-}" == true && ! -f build/CMakeCache.txt ]]; then
  opt_unity=("${unity[@]}")
fi
run_suite build "" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${g1_release[@]}" -DMESHLAYOUT_WERROR=ON \
  -DMESHLAYOUT_PYTHON=ON "${cuda_args[@]}" "${opt_unity[@]}"

echo "=== pytest python/tests (the module built in build/python)"
PYTHONPATH=build/python /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests \
  | tee build/pytest.log
py_passed=$(sed -n 's/^\([0-9]*\) passed.*/\1/p' build/pytest.log)
if [[ -z "$py_passed" || "$py_passed" -eq 0 ]]; then
  echo "pytest ran no tests" >&2
  exit 1
fi
passed=$((passed + py_passed))
stage_done "pytest"

echo "=== pip install . into a venv (the module prebuilt in build/), pytest from outside the tree"
bash scripts/pip_install_test.sh build | tee build/pip_pytest.log
pip_passed=$(sed -n 's/^\([0-9]*\) passed.*/\1/p' build/pip_pytest.log)
if [[ -z "$pip_passed" || "$pip_passed" -eq 0 ]]; then
  echo "pytest of the pip-installed package ran no tests" >&2
  exit 1
fi
passed=$((passed + pip_passed))
stage_done "pip install"

echo "=== install build into a temporary prefix, use it from outside the tree"
bash scripts/install_consumer_test.sh build
passed=$((passed + 1))
stage_done "install consumer"

# -O1, as AddressSanitizer's documentation advises: the checks are the same as at -O0 and the
# tests run several times faster.
GTEST_FILTER="$sanitizer_gtest_filter" run_suite build-asan "-E $sanitizer_ctest_exclude" \
  -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g1 -O1" \
  -DMESHLAYOUT_SANITIZE=address,undefined -DMESHLAYOUT_BUILD_BENCHMARKS=OFF -DMESHLAYOUT_WERROR=ON \
  "${unity[@]}"

echo "=== build build-tsan (ThreadSanitizer)"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${g1_release[@]}" \
  -DMESHLAYOUT_SANITIZE=thread \
  -DMESHLAYOUT_WITH_MPI=OFF -DMESHLAYOUT_BUILD_BENCHMARKS=OFF -DMESHLAYOUT_WERROR=ON \
  "${unity[@]}" >/dev/null
# The longest first: two binaries run at once (io_test waits on its threads and files much of
# its time, so the pair overlaps: 73 s one after the other).
tsan_tests=(io/io_test nn/nn_test cli/cli_test ops/ops_test array/array_test
            layout_map/layout_map_test runtime/runtime_test)
ninja -C build-tsan -j"$jobs" "${tsan_tests[@]##*/}"
stage_done "build build-tsan"
echo "=== test build-tsan ($jobs binaries at a time)"
tsan_pids=()
for t in "${tsan_tests[@]}"; do
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" "build-tsan/src/meshlayout/$t" \
    --gtest_brief=1 >"build-tsan/${t##*/}.log" 2>&1 &
  tsan_pids+=($!)
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
done
for i in "${!tsan_tests[@]}"; do
  log="build-tsan/${tsan_tests[$i]##*/}.log" rc=0
  wait "${tsan_pids[$i]}" || rc=$?
  cat "$log"
  if ((rc != 0)); then
    echo "${tsan_tests[$i]} failed under ThreadSanitizer (exit $rc)" >&2
    exit 1
  fi
  passed=$((passed + $(sed -n 's/.*PASSED.* \([0-9]*\) tests\..*/\1/p' "$log")))
done
stage_done "test build-tsan"

echo "=== fuzz smoke (20 s per target, the three at once)"
FUZZ_JOBS=3 bash fuzz/run.sh 20
passed=$((passed + 3))  # one per fuzz target
stage_done "fuzz smoke"

echo "=== every stage passed (ctest optimised, pytest, pip install, install consumer, ASan/UBSan, TSan, fuzz smoke)"
printf '  %s\n' "${stage_times[@]}"
echo "total: $((SECONDS - script_start)) s"
echo "tests: $passed passed, 0 failed, $skipped skipped (GPU tests without a GPU)"
