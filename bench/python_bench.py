#!/usr/bin/env python3
"""Python binding benchmark: LayoutMap lookups and distribute_tensor from numpy.

Each figure runs next to its baseline in the same process and prints the ratio:
  lookups     meshlayout.LayoutMap[path] at 100 rules vs Keras 3's LayoutMap.__getitem__
              written in pure Python (exact key, else re.search over every key, all hits
              collected), on the same rules and paths. Target: >= 1 M lookups/s.
  distribute  distribute_tensor(numpy, layout) splitting every byte once over 8 devices vs
              numpy's x.copy() of the same bytes. Target: <= 1.2x the copy.

Run: PYTHONPATH=build/python python3 bench/python_bench.py [--quick]
"""
import re
import statistics
import sys
import time

import numpy as np

import meshlayout as ml


class KerasLayoutMap(dict):
    """keras.distribution.LayoutMap.__getitem__ (Keras 3.0-3.13), verbatim in spirit."""

    def lookup(self, key):
        if key in self:
            return self[key]
        matching_keys = []
        for k in self:
            if re.search(k, key):
                matching_keys.append(k)
        if len(matching_keys) > 1:
            raise ValueError(f"Path '{key}' matches multiple layout specification keys")
        elif len(matching_keys) == 1:
            return self[matching_keys[0]]
        return None


def best_rate(fn, count, repeats):
    """Best of `repeats` runs of fn() (which does `count` operations): operations/second."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return count / min(times)


def bench_lookups(quick):
    mesh = ml.DeviceMesh((2, 4), ["data", "model"])
    rules = [f"layer_{i}/.*(kernel|bias)" for i in range(100)]
    lm = ml.LayoutMap(mesh)
    keras = KerasLayoutMap()
    for r in rules:
        lm[r] = (None, "model")
        keras[r] = lm[r]
    paths = [f"model/layer_{i}/dense/{'kernel' if i % 2 else 'bias'}" for i in range(100)]
    paths += [f"model/head_{i}/gamma" for i in range(28)]  # no rule matches these
    for p in paths:  # same answers
        assert lm[p] is keras.lookup(p), p
    rounds = 200 if quick else 2000
    n = rounds * len(paths)

    def ours():
        for _ in range(rounds):
            for p in paths:
                lm[p]

    keras_rounds = max(1, rounds // 40)

    def theirs():
        for _ in range(keras_rounds):
            for p in paths:
                keras.lookup(p)

    rate = best_rate(ours, n, 3)
    base = best_rate(theirs, keras_rounds * len(paths), 3)
    print(f"lookups (100 rules, {len(paths)} paths): meshlayout {rate / 1e6:.2f} M/s, "
          f"Keras-style pure Python {base / 1e3:.1f} k/s, ratio {rate / base:.0f}x "
          f"(target >= 1 M/s: {'met' if rate >= 1e6 else 'NOT met'})")
    return rate


def bench_distribute(quick):
    mesh = ml.DeviceMesh((2, 4), ["data", "model"])
    layout = ml.TensorLayout(("data", "model"), mesh)
    rows = 1024 if quick else 4096
    x = np.random.default_rng(0).standard_normal((rows, 4096)).astype(np.float32)
    repeats = 7

    def copy_times(fn):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
            del out
        return statistics.median(times)

    t_copy = copy_times(x.copy)
    t_ours = copy_times(lambda: ml.distribute_tensor(x, layout))
    a = ml.distribute_tensor(x, layout)
    np.testing.assert_array_equal(np.asarray(a), x)
    ratio = t_ours / t_copy
    mib = x.nbytes / 2**20
    print(f"distribute_tensor ({mib:.0f} MiB f32 over 8 devices): {t_ours * 1e3:.1f} ms, "
          f"numpy copy {t_copy * 1e3:.1f} ms, ratio {ratio:.2f}x "
          f"(target <= 1.2x: {'met' if ratio <= 1.2 else 'NOT met'})")
    return ratio


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    bench_lookups(quick)
    bench_distribute(quick)
