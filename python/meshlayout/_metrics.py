"""compile(metrics=[…]) for meshlayout's fit / evaluate: Keras 3's metric names, their values per
sample, the running means of an epoch, and the progress lines that show them.

    tracker = Metrics(["mae", "accuracy"])
    tracker.update(y_true, y_pred)        # one training batch: numpy arrays
    tracker.results()                     # {"mae": running mean, "accuracy": …}

A metric is Keras' MeanMetricWrapper: each batch gives one value per sample (the metric over
the sample's other axes: mse and mae the mean over the last axis, accuracies the fraction of
matches), and the result is the mean over every sample seen since the last reset, in float64
(Keras accumulates in float32). The log key is the name given ("mae", "acc"). "accuracy"/"acc"
become binary, sparse categorical or categorical accuracy from the shapes, as Keras' compile
resolves them: a last axis of 1 in y_pred is binary, y_true of lower rank (or with a last axis
of 1) is sparse, else categorical.
"""

import math
import os
import sys
import time

import numpy as np

KINDS = {"mse": "mean_squared_error", "mean_squared_error": "mean_squared_error",
         "mae": "mean_absolute_error", "mean_absolute_error": "mean_absolute_error",
         "accuracy": "accuracy", "acc": "accuracy", "binary_accuracy": "binary_accuracy",
         "sparse_categorical_accuracy": "sparse_categorical_accuracy",
         "categorical_accuracy": "categorical_accuracy"}


def check_name(m):
    if isinstance(m, str) and m in KINDS:
        return m
    raise ValueError(f"Could not interpret metric identifier: {m} (meshlayout computes "
                     f"{', '.join(sorted(KINDS))})")


def _kind(name, y_true, y_pred):
    kind = KINDS[name]
    if kind != "accuracy":
        return kind
    if y_pred.shape[-1:] == (1,) and y_pred.ndim == y_true.ndim:
        return "binary_accuracy"
    if y_true.ndim < y_pred.ndim or y_true.shape[-1:] == (1,):
        return "sparse_categorical_accuracy"
    return "categorical_accuracy"


def per_sample(name, y_true, y_pred):
    """The metric's value for each sample (row) of the batch, float64, shape (rows,)."""
    y_true = np.asarray(y_true)
    y_pred = np.asarray(y_pred)
    kind = _kind(name, y_true, y_pred)
    if kind in ("mean_squared_error", "mean_absolute_error"):
        d = y_pred.astype(np.float64) - y_true.astype(np.float64).reshape(y_pred.shape)
        v = d * d if kind == "mean_squared_error" else np.abs(d)
    elif kind == "binary_accuracy":
        v = (y_true.reshape(y_pred.shape) == (y_pred > 0.5)).astype(np.float64)
    elif kind == "categorical_accuracy":
        v = (np.argmax(y_true, -1) == np.argmax(y_pred, -1)).astype(np.float64)
    else:  # sparse categorical
        labels = y_true.reshape(y_pred.shape[:-1])
        v = (labels == np.argmax(y_pred, -1)).astype(np.float64)
    v = v.reshape(len(v), -1)
    return v.mean(axis=1) if v.shape[1] else np.zeros(len(v))


def mean(name, y_true, y_pred):
    """The metric over every sample (what a whole evaluate() gives)."""
    return float(np.mean(per_sample(name, y_true, y_pred)))


class Metrics:
    """The running means of the compiled metrics over the batches since reset()."""

    def __init__(self, names):
        self.names = list(names)
        self.reset()

    def reset(self):
        self.totals = [0.0] * len(self.names)
        self.count = 0

    def update(self, y_true, y_pred):
        for i, name in enumerate(self.names):
            self.totals[i] += float(np.sum(per_sample(name, y_true, y_pred)))
        self.count += len(y_true)
        return self.results()

    def results(self):
        n = max(self.count, 1)
        return {name: t / n for name, t in zip(self.names, self.totals)}


def _per_step(seconds, steps):
    per = seconds / steps if steps > 0 else 0.0
    if per >= 1.0:
        return f"{per:.0f}s/step"
    if per >= 1e-3:
        return f"{per * 1e3:.0f}ms/step"
    return f"{per * 1e6:.0f}us/step"


def _values(logs):
    return " - ".join(f"{k}: {v:.4f}" for k, v in logs.items())


class Progress:
    """Keras' progress lines with every log value (the C++ progress shows the loss only):
    "Epoch e/E", then on a terminal with verbose 1 a bar redrawn after each step, else one line
    per epoch "S/S - 0s - 3ms/step - loss: … - mae: … - val_loss: …". Process 0 only. An
    epoch's clock starts when the previous epoch ends (start_clock)."""

    def __init__(self, verbose, epochs, process_index):
        term = os.environ.get("TERM")
        self.verbose = verbose if process_index == 0 else 0
        self.bar = verbose == 1 and sys.stderr.isatty() and term != "dumb"
        self.epochs = epochs
        self.steps = 0
        self.start_clock()

    def start_clock(self):
        self.start = time.monotonic()

    def _write(self, text):
        sys.stdout.write(text)
        sys.stdout.flush()

    def header(self, epoch, steps):
        self.steps = steps
        if self.verbose:
            self._write(f"Epoch {epoch + 1}/{self.epochs}\n")

    def batch_end(self, done, logs):
        if self.verbose and self.bar:
            self._write("\r" + self._bar(done, logs))

    def epoch_end(self, done, logs):
        if self.verbose:
            seconds = time.monotonic() - self.start
            if self.bar:
                self._write("\r" + self._bar(done, logs) + "\n")
            else:
                self._write(f"{done}/{self.steps} - {math.floor(seconds):.0f}s - "
                            f"{_per_step(seconds, done)} - {_values(logs)}\n")
        self.start_clock()

    def _bar(self, done, logs, width=20):
        seconds = time.monotonic() - self.start
        filled = done * width // self.steps if self.steps > 0 else width
        bar = "\u2501" * filled + "\u2500" * (width - filled)
        digits = len(str(self.steps))
        return (f"{done:>{digits}}/{self.steps} {bar} {math.floor(seconds):.0f}s "
                f"{_per_step(seconds, done)} - {_values(logs)}")
