#!/bin/sh
# Runs bench/llama_bench.cc (meshlayout, 8 virtual devices, Megatron rules, with its
# cblas_sgemm baseline) and bench/llama_torch_bench.py (the same model in PyTorch, 2 threads),
# then prints meshlayout / PyTorch tokens/s for prefill and decode.
#
#   bench/llama_bench.sh [BUILD_DIR]      # default: build; installs Debian's python3-torch
# Extra arguments for both programs go in LLAMA_BENCH_ARGS, e.g. "--reps 5 --prompt 64".
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
args=${LLAMA_BENCH_ARGS:-}
python=${PYTHON:-/usr/bin/python3}
bash "$here/../scripts/install-deps.sh" --bench

echo "== meshlayout ($build/bench/llama_bench $args)"
ours=$("$build/bench/llama_bench" $args)
echo "$ours"
echo "== PyTorch ($python $here/llama_torch_bench.py $args)"
theirs=$("$python" "$here/llama_torch_bench.py" $args)
echo "$theirs"

value() {  # value NAME TEXT: NAME=<number> from the RESULT line
  printf '%s\n' "$2" | sed -n "s/^RESULT .*\\b$1=\\([0-9.eE+-]*\\).*/\\1/p"
}
mp=$(value prefill_tokens_per_s "$ours")
md=$(value decode_tokens_per_s "$ours")
tp=$(value torch_prefill_tokens_per_s "$theirs")
td=$(value torch_decode_tokens_per_s "$theirs")
echo "== ratios (meshlayout / PyTorch tokens/s; > 1: meshlayout faster)"
awk -v mp="$mp" -v md="$md" -v tp="$tp" -v td="$td" -v pr="$(value prefill_ratio "$ours")" \
    -v dr="$(value decode_ratio "$ours")" 'BEGIN {
  printf "prefill: meshlayout %.1f, torch %.1f tokens/s: ratio %.2f (meshlayout vs its cblas_sgemm baseline: %.2f)\n", mp, tp, mp / tp, pr
  printf "decode:  meshlayout %.1f, torch %.1f tokens/s: ratio %.2f (meshlayout vs its cblas_sgemm baseline: %.2f)\n", md, td, md / td, dr
}'
