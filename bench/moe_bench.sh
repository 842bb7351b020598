#!/bin/sh
# Runs bench/moe_bench.cc (meshlayout, a Mixtral-class model on 8 virtual devices, the experts
# expert-parallel, width-split and replicated) and bench/moe_torch.py (the same model in PyTorch,
# 2 threads), then prints meshlayout / PyTorch tokens/s for prefill and decode per placement.
#
#   bench/moe_bench.sh [BUILD_DIR]      # default: build; installs Debian's python3-torch
# Extra arguments for both programs go in MOE_BENCH_ARGS, e.g. "--reps 5 --prompt 64".
# Memory: the replicated placement holds every expert on every device (8 layers: ~18 GB);
# MOE_BENCH_MODE=expert-parallel (or expert-tp) runs one placement only.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
args=${MOE_BENCH_ARGS:-}
mode=${MOE_BENCH_MODE:-all}
python=${PYTHON:-/usr/bin/python3}
bash "$here/../scripts/install-deps.sh" --bench

echo "== meshlayout ($build/bench/moe_bench $args --mode $mode)"
ours=$("$build/bench/moe_bench" $args --mode "$mode")
echo "$ours"
echo "== PyTorch ($python $here/moe_torch.py $args)"
theirs=$(OMP_NUM_THREADS=2 "$python" "$here/moe_torch.py" $args)
echo "$theirs"

value() {  # value NAME TEXT: NAME=<number> from the RESULT line
  printf '%s\n' "$2" | sed -n "s/^RESULT .*\\b$1=\\([0-9.eE+-]*\\).*/\\1/p"
}
tp=$(value torch_prefill_tokens_per_s "$theirs")
td=$(value torch_decode_tokens_per_s "$theirs")
echo "== ratios (meshlayout / PyTorch tokens/s; > 1: meshlayout faster)"
for m in expert_parallel expert_tp replicated; do
  mp=$(value "${m}_prefill_tokens_per_s" "$ours")
  md=$(value "${m}_decode_tokens_per_s" "$ours")
  [ -n "$mp" ] || continue
  awk -v m="$m" -v mp="$mp" -v md="$md" -v tp="$tp" -v td="$td" 'BEGIN {
    printf "%-16s prefill %.1f vs %.1f tokens/s: %.2f; decode %.1f vs %.1f tokens/s: %.2f\n", m, mp, tp, mp / tp, md, td, md / td
  }'
done
