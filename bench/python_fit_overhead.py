"""The Python overhead of a fit step: meshlayout.Sequential.fit from Python against the same
fit from C++ (python_fit_reference --bench, the Trainer called directly), same model, data,
rules and steps, in one run, alternating the two.

    PYTHONPATH=build/python python3 bench/python_fit_overhead.py [--width 512] [--batch 64]
        [--steps 50] [--reps 5] [--reference build/python/python_fit_reference]

The model: Sequential [Dense(W, relu, d1), Dense(W, relu, d2), Dense(1, d3)] on (W,), under a
LayoutMap on a 2x4 mesh (d1.kernel (None, model), d2.kernel (model, None)), adam / mse, one
epoch of STEPS batches (no shuffle). Each side, three times in turn: a model, one warm-up fit of
one step, then REPS timed fits; the medians of all timed fits are compared: overhead = python / cpp − 1 (target < 2%). What Python adds per step is
the batch-end hook (the GIL taken to check for Ctrl-C) plus, per fit, numpy → host copies and
the History; the steps themselves are the same C++ code.
"""

import argparse
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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--reference", default=os.path.join(
        os.path.dirname(keras.__file__), os.pardir, "python_fit_reference"))
    a = p.parse_args()
    if not os.path.exists(a.reference):
        sys.exit(f"no {a.reference}: build the target python_fit_reference")
    py, cpp = [], []
    for _ in range(3):  # alternate blocks of REPS fits, so load changes hit both sides
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
