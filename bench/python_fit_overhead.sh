#!/bin/sh
# The Python overhead of a training step (issue 29's must-hold: under 2% of the step on the
# benchmark Llama): bench/python_fit_overhead.py for the benchmark Llama (CausalLM.train against
# build/bench/llama_fit_steps, the same steps from C++) and for a Sequential MLP (Model.fit
# against python_fit_reference --bench), each alternating the two sides in one run.
#
#   bench/python_fit_overhead.sh [BUILD_DIR]     # default: build (targets meshlayout_python,
#                                                #   llama_fit_steps, python_fit_reference)
# Extra arguments for the Llama run go in LLAMA_OVERHEAD_ARGS (e.g. "--layers 2 --blocks 5"),
# for the MLP run in MLP_OVERHEAD_ARGS.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
python=${PYTHON:-/usr/bin/python3}
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"

echo "== the benchmark Llama: CausalLM.train from Python vs train_llama from C++"
"$python" "$here/python_fit_overhead.py" --model llama --cpp "$build/bench/llama_fit_steps" \
  ${LLAMA_OVERHEAD_ARGS:-}
echo "== a Sequential MLP: Model.fit from Python vs the Trainer from C++"
"$python" "$here/python_fit_overhead.py" --model mlp \
  --reference "$build/python/python_fit_reference" ${MLP_OVERHEAD_ARGS:-}
