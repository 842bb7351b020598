#!/usr/bin/env bash
# gpu_check.sh — the GPU checks of the CUDA device kind (issue 26), in two halves:
#
#   bash scripts/gpu_check.sh prepare   # here (no GPU needed): builds build-cuda (nvcc 13, sm_90a +
#                                       # sm_90) and packs the test and bench binaries with the
#                                       # shared libraries they load that a CUDA image lacks into
#                                       # .gpu/bundle.tar.xz (git-ignored; carry it to the GPU machine)
#   bash scripts/gpu_check.sh run [FILTER]   # on the GPU machine, in the repository root: unpacks,
#                                       # runs every GPU test and benchmark, logs under $OUT (or
#                                       # .gpu/out), prints a summary table last
#
# cuBLAS and the CUDA driver come from the GPU machine (libcublasLt alone is 540 MB); everything
# else the binaries load (fmt, re2, abseil, OpenBLAS, sentencepiece…) travels in the bundle.
# FILTER (optional) is a regular expression over the step names below, to rerun a part.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
BUILD=${MESHLAYOUT_CUDA_BUILD:-build-cuda}

# name | binary (relative to the bundle's bin/) | arguments
steps=(
  "env|-|"
  "array_gpu|array_test|--gtest_filter=Gpu*"
  "cuda_kernels|cuda_kernels_test|"
  "memcheck_reshard|compute-sanitizer|--tool memcheck --error-exitcode 3 BUNDLE/bin/array_test --gtest_filter=GpuArrayTest.Megatron*"
  "io_gpu|io_test|--gtest_filter=*Gpu*"
  "ops_gpu|ops_test|--gtest_filter=AttentionGpu*"
  "llama_gpu|models_test|--gtest_filter=LlamaGpu*"
  "generate_gpu|meshlayout|-"
  "bench_baselines|gpu_baselines|--json OUTDIR/gpu_baselines.json"
  "bench_reshard|gpu_reshard_bench|--json OUTDIR/gpu_reshard.json"
  "bench_checkpoint|gpu_checkpoint_bench|--json OUTDIR/gpu_checkpoint.json"
  "bench_llama|gpu_llama_bench|--layers 8 --json OUTDIR/gpu_llama.json"
  "bench_torch|python3|bench/gpu_llama_torch.py --layers 8 --json OUTDIR/torch.json --ours OUTDIR/gpu_llama.json"
)

prepare() {
  command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  if [[ ! -f $BUILD/build.ninja ]]; then
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMESHLAYOUT_WERROR=ON \
      -DMESHLAYOUT_CUDA=ON -DMESHLAYOUT_BUILD_BENCHMARKS=ON -DMESHLAYOUT_WITH_MPI=ON || return 1
  fi
  local targets=(array_test cuda_kernels_test io_test ops_test models_test meshlayout gpu_baselines
                 gpu_reshard_bench gpu_checkpoint_bench gpu_llama_bench)
  local present=()
  for t in "${targets[@]}"; do
    if ninja -C "$BUILD" -t targets all 2>/dev/null | grep -q "^$t:"; then present+=("$t"); fi
  done
  echo "building: ${present[*]}"
  # -k 0: a target that fails to build is left out of the bundle (and reported "absent" there).
  flock /tmp/ninja.lock ninja -C "$BUILD" -j2 -k 0 "${present[@]}" ||
    echo "WARNING: some targets failed to build; the bundle holds the others" >&2
  rm -rf .gpu/stage && mkdir -p .gpu/stage/bin .gpu/stage/lib
  for t in "${present[@]}"; do
    f=$(find "$BUILD" -type f -name "$t" -perm -u+x | head -1)
    [[ -n $f ]] || continue
    cp "$f" .gpu/stage/bin/ && strip --strip-debug .gpu/stage/bin/"$t"
  done
  # Shared libraries outside the C runtime and CUDA's own (those come from the GPU machine).
  for f in .gpu/stage/bin/*; do ldd "$f"; done | awk '/=> \// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*|libcuda|libcublas[^/]*|libcudart|libnccl|libmpi[^/]*|libopen-[^/]*|libpmix|libevent[^/]*|libhwloc)\.so' |
    while read -r lib; do cp -L "$lib" .gpu/stage/lib/; done
  # Open MPI for mpirun -np 2 on one GPU (its plugins load at run time).
  if [[ -d /usr/lib/x86_64-linux-gnu/openmpi ]]; then
    for f in .gpu/stage/bin/*; do ldd "$f"; done | awk '/=> \// {print $3}' | sort -u |
      grep -E '/(libmpi[^/]*|libopen-[^/]*|libpmix|libevent[^/]*|libhwloc)\.so' |
      while read -r lib; do cp -L "$lib" .gpu/stage/lib/; done
  fi
  git rev-parse HEAD > .gpu/stage/COMMIT
  git status --short >> .gpu/stage/COMMIT
  tar -C .gpu/stage -cJf .gpu/bundle.tar.xz . || return 1
  du -h .gpu/bundle.tar.xz
}

run_step() {  # name binary args; output to $OUTDIR/name.log, result to the summary
  local name=$1 bin=$2 args=$3 rc
  # Each step gets at most STEP_SECONDS (default 150) and what is left of DEADLINE_SECONDS
  # (default 420) since the run began, so one hang cannot eat the lease.
  local left=$((DEADLINE - SECONDS - 5))
  local limit=$((left < STEP_LIMIT ? left : STEP_LIMIT))
  if ((limit < 10)); then printf '%-18s %-9s\n' "$name" "no-time" >>"$SUMMARY"; return; fi
  local log="$OUTDIR/$name.log"
  local start=$SECONDS
  if [[ $bin == - && $name == env ]]; then
    { nvidia-smi; nvcc --version | tail -2; echo "CUBLAS_DIRS=$CUBLAS_DIRS"; uname -a
      cat "$BUNDLE/COMMIT"; ldd "$BUNDLE/bin/array_test" | grep -E 'not found|cublas|cudart' || true; } >"$log" 2>&1
    rc=$?
  elif [[ $name == generate_gpu ]]; then
    [[ -x $BUNDLE/bin/meshlayout ]] || { printf '%-18s %-8s\n' "$name" "absent" >>"$SUMMARY"; return; }
    local dir=$OUTDIR/tiny_llama
    rm -rf "$dir"
    timeout "$limit" "$BUNDLE/bin/meshlayout" demo --keep "$dir" --no-progress >"$log" 2>&1 || true
    dir=$dir/llama
    MESHLAYOUT_GPU_DEVICES=8 timeout "$limit" "$BUNDLE/bin/meshlayout" generate --model "$dir" \
      --device gpu --mesh batch=2,model=4 --prompt-ids 3,17,42 --max-new-tokens 8 >>"$log" 2>&1
    rc=$?
    timeout "$limit" "$BUNDLE/bin/meshlayout" generate --model "$dir" --mesh batch=2,model=4 \
      --prompt-ids 3,17,42 --max-new-tokens 8 >>"$log" 2>&1 || rc=99
  else
    # A bundled binary, else a program of the GPU machine (python3 with PyTorch, compute-sanitizer).
    local exe=$BUNDLE/bin/$bin
    [[ -x $exe ]] || exe=$(command -v "$bin" || true)
    [[ -n $exe ]] || { printf '%-18s %-8s\n' "$name" "absent" >>"$SUMMARY"; return; }
    args=${args//OUTDIR/$OUTDIR}
    # shellcheck disable=SC2086
    PYTHONUNBUFFERED=1 timeout "$limit" "$exe" ${args//BUNDLE/$BUNDLE} >"$log" 2>&1
    rc=$?
  fi
  local verdict=ok
  ((rc == 0)) || verdict="FAIL($rc)"
  local detail
  detail=$(grep -hE '^\[  (PASSED|FAILED|SKIPPED) +\]|tests? from .* ran' "$log" | tail -3 | tr '\n' ' ')
  printf '%-18s %-9s %4ss  %s\n' "$name" "$verdict" $((SECONDS - start)) "$detail" >>"$SUMMARY"
  if ((rc != 0)); then
    { echo "--- $name (tail)"; grep -E 'Failure|FAILED|error|Error|Expected|Which is|actual' "$log" | head -40
      tail -15 "$log"; } >>"$FAILS"
  fi
}

run() {
  local filter=${1:-.}
  DEADLINE=$((SECONDS + ${DEADLINE_SECONDS:-420}))
  STEP_LIMIT=${STEP_SECONDS:-150}
  OUTDIR=$PWD/.gpu/out
  rm -rf "$OUTDIR" && mkdir -p "$OUTDIR"
  BUNDLE=$PWD/.gpu/bundle
  rm -rf "$BUNDLE" && mkdir -p "$BUNDLE" && tar -C "$BUNDLE" -xJf .gpu/bundle.tar.xz || exit 1
  CUBLAS_DIRS=$(find /usr/local /opt /usr/lib \( -name 'libcublas.so.13' -o -name 'libcublasLt.so.13' \) \
                  -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
  export LD_LIBRARY_PATH=$BUNDLE/lib:${CUBLAS_DIRS}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export PATH=$PATH:/usr/local/cuda/bin
  SUMMARY=$OUTDIR/summary.txt FAILS=$OUTDIR/failures.txt
  : >"$SUMMARY"; : >"$FAILS"
  for s in "${steps[@]}"; do
    IFS='|' read -r name bin args <<<"$s"
    [[ $name =~ $filter ]] || continue
    run_step "$name" "$bin" "$args"
  done
  for f in "$OUTDIR"/*.json; do [[ -f $f ]] && { echo "== $(basename "$f")"; cat "$f"; echo; }; done
  echo "== failures"; head -c 6000 "$FAILS"
  echo "== summary"; cat "$SUMMARY"
  # Everything in one file: the device tool brings back at most 8 files from $OUT.
  if [[ -n ${OUT:-} ]]; then tar -C "$OUTDIR" -czf "$OUT/gpu_check_logs.tar.gz" . ; fi
}

case $mode in
  prepare) prepare ;;
  run) shift; run "${1:-.}" ;;
  *) echo "usage: bash scripts/gpu_check.sh prepare | run [FILTER]" >&2; exit 2 ;;
esac
