#!/bin/sh
# Runs bench/llama_train_bench.cc (meshlayout, 8 virtual devices, Megatron rules, with its
# cblas_sgemm baseline) and bench/llama_train_torch_bench.py (the same step in PyTorch, 2
# threads), then prints meshlayout / PyTorch training tokens/s (issue 14's target: >= 0.8).
#
#   bench/llama_train_bench.sh [BUILD_DIR]     # default: build; installs Debian's python3-torch
# Extra arguments for both programs go in LLAMA_BENCH_ARGS, e.g. "--reps 5 --batch 2".
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
args=${LLAMA_BENCH_ARGS:-}
python=${PYTHON:-/usr/bin/python3}
bash "$here/../scripts/install-deps.sh" --bench

echo "== meshlayout ($build/bench/llama_train_bench $args)"
ours=$("$build/bench/llama_train_bench" $args)
echo "$ours"
echo "== PyTorch ($python $here/llama_train_torch_bench.py $args)"
theirs=$("$python" "$here/llama_train_torch_bench.py" $args)
echo "$theirs"

value() {  # value NAME TEXT: NAME=<number> from the RESULT line
  printf '%s\n' "$2" | sed -n "s/^RESULT .*\\b$1=\\([0-9.eE+-]*\\).*/\\1/p"
}
awk -v m="$(value train_tokens_per_s "$ours")" -v t="$(value torch_train_tokens_per_s "$theirs")" \
    -v r="$(value train_ratio "$ours")" 'BEGIN {
  printf "== train step: meshlayout %.1f, torch %.1f tokens/s: ratio %.2f (meshlayout vs its cblas_sgemm baseline: %.2f)\n", m, t, m / t, r
}'
