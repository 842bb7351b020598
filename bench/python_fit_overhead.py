"""The Python overhead of a fit step, measured against the same steps driven from C++ in the
same run, alternating the two sides (so that load changes on a shared machine hit both).

    PYTHONPATH=build/python python3 bench/python_fit_overhead.py [--model llama|mlp] …
    bench/python_fit_overhead.sh [BUILD_DIR]          # both models

--model llama (the default; issue 29's "benchmark Llama"): the Llama of bench/llama_train_bench.cc
(d=1024, 16 heads / 8 key-value heads, ff 2816, vocab 32000, F32; --layers 8 by default: 159M
parameters) under examples/rules/llama_megatron.json on a mesh batch=1,model=8, AdamW, batch
--batch x --seq tokens. Python: models.CausalLM.from_config(config, rules), then REPS calls of
model.train(tokens, batch_size, steps) (each a fresh AdamW, STEPS steps), each call timed whole
(numpy → token rows, the temporary token file, the optimizer and the steps); C++:
build/bench/llama_fit_steps, the same model (the same initial weights), rows and calls through
train_llama. The first call of each block is a warm-up; the losses of both sides must be equal
bit for bit (checked: the same steps). overhead = median Python call / median C++ call − 1.

--model mlp: Sequential [Dense(W, relu, d1), Dense(W, relu, d2), Dense(1, d3)] on (W,) under a
LayoutMap on a 2x4 mesh, adam / mse, one epoch of STEPS batches, Model.fit from Python against
python_fit_reference --bench (the Trainer called from C++): what Python adds per step there is
the batch-end hook (the GIL taken to check for Ctrl-C) plus, per fit, numpy → host copies and
the History.

Last line: RESULT python_overhead=±x.xx% (target < 2%).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import meshlayout as keras
from meshlayout import layers


def data(rows, width):
    i = np.arange(rows)[:, None]
    j = np.arange(width)[None, :]
    x = (((31 * i + 17 * j) % 23) - 11).astype(np.float32) / 8
    y = ((((13 * np.arange(rows)) % 7) - 3).astype(np.float32) / 4)[:, None]
    return x, y


def python_fits(width, batch, steps, reps):
    mesh = keras.DeviceMesh((2, 4), ["batch", "model"])
    rules = keras.LayoutMap(mesh)
    rules["d1.kernel"] = (None, "model")
    rules["d2.kernel"] = ("model", None)
    with rules.scope():
        model = keras.Sequential([keras.Input((width,)),
                                  layers.Dense(width, activation="relu", name="d1"),
                                  layers.Dense(width, activation="relu", name="d2"),
                                  layers.Dense(1, name="d3")], name="bench")
    model.compile(optimizer="adam", loss="mse")
    x1, y1 = data(batch, width)
    model.fit(x1, y1, batch_size=batch, epochs=1, shuffle=False, verbose=0)  # warm-up
    x, y = data(batch * steps, width)
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
        out.append(time.perf_counter() - start)
    return out


def cpp_fits(reference, width, batch, steps, reps):
    text = subprocess.run([reference, "--bench", str(width), str(batch), str(steps), str(reps)],
                          check=True, capture_output=True, text=True).stdout
    return [float(line.split()[1]) for line in text.splitlines() if line.startswith("seconds")]


LLAMA = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 1024,
         "intermediate_size": 2816, "num_attention_heads": 16, "num_key_value_heads": 8,
         "head_dim": 64, "rms_norm_eps": 1e-5, "max_position_embeddings": 2048,
         "tie_word_embeddings": False}
RULES = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "examples", "rules",
                     "llama_megatron.json")


def llama_rows(rows, seq, vocab):
    r = np.arange(rows, dtype=np.int64)[:, None]
    i = np.arange(seq + 1, dtype=np.int64)[None, :]
    return ((131 * r + 7919 * i + 13) % vocab).astype(np.int32)


def llama_python(model, tokens, batch, steps, reps):
    times, losses = [], []
    for _ in range(reps):
        start = time.perf_counter()
        out = model.train(tokens, batch_size=batch, steps=steps, optimizer="adamw")
        times.append(time.perf_counter() - start)
        losses.append(out)
    return times, losses


def llama_cpp(binary, config, a):
    text = subprocess.run([binary, "--config", json.dumps(config), "--rules", RULES,
                           "--batch", str(a.batch), "--seq", str(a.seq), "--steps", str(a.steps),
                           "--reps", str(a.reps)], check=True, capture_output=True,
                          text=True).stdout
    times = [float(line.split()[1]) for line in text.splitlines() if line.startswith("seconds")]
    losses = [[float(v) for v in line.split()[1:]] for line in text.splitlines()
              if line.startswith("losses")]
    return times, losses


def llama_main(a):
    from meshlayout import models
    from meshlayout import rules as ml_rules

    if not os.path.exists(a.cpp):
        sys.exit(f"no {a.cpp}: build the target llama_fit_steps")
    config = dict(LLAMA, num_hidden_layers=a.layers)
    mesh = keras.DeviceMesh((1, 8), ["batch", "model"])
    with open(RULES) as f:
        layout_map = ml_rules.layout_map(f.read(), "meshlayout", mesh)
    model = models.CausalLM.from_config(config, rules=layout_map)
    tokens = llama_rows(a.batch * a.steps, a.seq, LLAMA["vocab_size"])
    print(f"llama: d=1024 layers={a.layers} heads=16 kv_heads=8 ff=2816 vocab=32000, "
          f"mesh[batch=1,model=8] Megatron rules, AdamW, {a.steps} steps of {a.batch} x {a.seq} "
          f"tokens per call, {a.reps} calls per block (the first a warm-up), {a.blocks} blocks "
          "per side, alternating")
    py, cpp, reference = [], [], None
    for block in range(a.blocks):
        ct, cl = llama_cpp(a.cpp, config, a)
        # Python's model keeps training across blocks; C++'s starts fresh each block: compare
        # the first call of each side's first block (the same initial weights, the same rows).
        pt, pl = llama_python(model, tokens, a.batch, a.steps, a.reps)
        if reference is None:
            reference = (cl[0], pl[0])
        cpp += ct[1:]
        py += pt[1:]
        print(f"  block {block}: c++ calls {', '.join(f'{t:.3f}' for t in ct)} s; "
              f"python calls {', '.join(f'{t:.3f}' for t in pt)} s", flush=True)
    same = reference[0] == reference[1]
    print(f"losses of the first call: c++ {reference[0]}, python {reference[1]}: "
          f"{'equal bit for bit' if same else 'DIFFERENT'}")
    mp, mc = statistics.median(py), statistics.median(cpp)
    print(f"python: median {mp / a.steps:.3f} s/step; c++: median {mc / a.steps:.3f} s/step")
    print(f"RESULT python_overhead={mp / mc - 1:+.2%} (target < 2%)")
    if not same:
        sys.exit("the two sides did not run the same steps")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("llama", "mlp"), default="llama")
    p.add_argument("--width", type=int, default=512, help="mlp: the width")
    p.add_argument("--batch", type=int, default=None, help="llama: 1, mlp: 64")
    p.add_argument("--seq", type=int, default=128, help="llama: tokens per row")
    p.add_argument("--layers", type=int, default=8, help="llama: transformer layers")
    p.add_argument("--steps", type=int, default=None, help="llama: 2, mlp: 50")
    p.add_argument("--reps", type=int, default=None, help="llama: 3, mlp: 5")
    p.add_argument("--blocks", type=int, default=3, help="alternations of the two sides")
    build = os.path.join(os.path.dirname(keras.__file__), os.pardir, os.pardir)
    p.add_argument("--reference", default=os.path.join(build, "python", "python_fit_reference"))
    p.add_argument("--cpp", default=os.path.join(build, "bench", "llama_fit_steps"))
    a = p.parse_args()
    llama = a.model == "llama"
    a.batch = a.batch or (1 if llama else 64)
    a.steps = a.steps or (2 if llama else 50)
    a.reps = a.reps or (3 if llama else 5)
    if llama:
        return llama_main(a)
    if not os.path.exists(a.reference):
        sys.exit(f"no {a.reference}: build the target python_fit_reference")
    py, cpp = [], []
    for _ in range(a.blocks):  # alternate blocks of REPS fits, so load changes hit both sides
        cpp += cpp_fits(a.reference, a.width, a.batch, a.steps, a.reps)
        py += python_fits(a.width, a.batch, a.steps, a.reps)
    mp, mc = statistics.median(py), statistics.median(cpp)
    print(f"python fit: median {mp * 1e3 / a.steps:.3f} ms/step over {a.steps} steps "
          f"(runs {', '.join(f'{t:.3f}' for t in py)} s)")
    print(f"c++ fit:    median {mc * 1e3 / a.steps:.3f} ms/step "
          f"(runs {', '.join(f'{t:.3f}' for t in cpp)} s)")
    print(f"RESULT python_overhead={mp / mc - 1:+.2%} (target < 2%)")


if __name__ == "__main__":
    main()
