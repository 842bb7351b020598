"""Model.fit (keras' Model.fit on numpy arrays or a Python iterator of batches) through the C++
Trainer, and what Python adds around its steps: the compiled metrics' running means, the
validation metrics, the progress lines that show them, Keras' initial_epoch, steps_per_epoch,
validation_split and shuffle.

    history = model.fit(x, y, batch_size=32, epochs=5, validation_split=0.2, initial_epoch=2,
                        steps_per_epoch=10, shuffle=True, seed=0)
    history.history   # {"loss": […], "mae": […], "val_loss": […], "val_mae": […]}
    history.epoch     # [2, 3, 4]
"""

import math
import warnings

import numpy as np

from meshlayout import _meshlayout
from meshlayout import _metrics
from meshlayout import callbacks as _callbacks


def verbose_level(verbose):
    if verbose == "auto":
        return 1
    if verbose not in (0, 1, 2):
        raise ValueError(f"verbose must be 'auto', 0, 1 or 2, got {verbose!r}")
    return int(verbose)


def batch_size_of(batch_size):
    if batch_size is None:
        return 32
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
            or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    return int(batch_size)


def _count(value, name, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _from_batches(iterator):
    """A Python iterator of (x, y) batches → (x, y, batch_size): every batch but the last of
    one size (they are concatenated; fit then reads the same batches)."""
    xs, ys = [], []
    for item in iterator:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError("fit: an iterator must yield (x, y) batches, got "
                             f"{type(item).__name__}")
        xs.append(np.asarray(item[0]))
        ys.append(np.asarray(item[1]))
    if not xs:
        raise ValueError("fit: the iterator yielded no batches")
    size = len(xs[0])
    for i, b in enumerate(xs[:-1]):
        if len(b) != size:
            raise ValueError(f"fit: batch {i} has {len(b)} rows, batch 0 has {size}: only the "
                             "last batch may be smaller")
    return np.concatenate(xs), np.concatenate(ys), size


def _is_iterator(x):
    return hasattr(x, "__next__") or (hasattr(x, "__iter__") and not hasattr(x, "__len__")
                                      and not hasattr(x, "__array__"))


def _split(x, y, validation_split):
    """Keras' train_validation_split: the last floor(rows · split) rows validate, unshuffled."""
    if isinstance(validation_split, bool) or not isinstance(validation_split, (int, float)) \
            or not 0 <= validation_split < 1:
        raise ValueError(f"validation_split must be a float in [0, 1), got {validation_split!r}")
    split_at = int(math.floor(len(x) * (1.0 - validation_split)))
    if split_at == 0 or split_at == len(x):
        raise ValueError(
            f"Training data contains {len(x)} samples, which is not sufficient to split it into "
            f"a validation and training set as specified by `validation_split={validation_split}`"
            ". Either provide more data, or a different value for the `validation_split` "
            "argument.")
    return x[:split_at], y[:split_at], (x[split_at:], y[split_at:])


def _epoch_steps(batches, steps_per_epoch, initial_epoch, epochs):
    """The steps each epoch runs (the C++ fit's passes: an epoch stops early when its pass runs
    out), for epochs initial_epoch … epochs - 1."""
    per = steps_per_epoch or batches
    out, next_batch = [], 0
    for epoch in range(epochs):
        n = min(per, batches - next_batch)
        next_batch += n
        if next_batch >= batches:
            next_batch = 0
        if epoch >= initial_epoch:
            out.append(n)
    return out


class _FitHooks:
    """The first callback of every fit: adds the metrics' running means to the batch logs (fed
    by the C++ fit with each step's outputs) and to the epoch logs, in Keras' order (loss,
    metrics, val_loss, val_metrics), computes the validation metrics, and prints the progress
    when there are metrics (the C++ progress shows the loss alone)."""

    def __init__(self, model, metrics, validation, batch_size, progress, initial_epoch, steps):
        self.model = model
        self.metrics = _metrics.Metrics(metrics)
        self.validation = validation
        self.batch_size = batch_size
        self.progress = progress
        self.epoch = initial_epoch
        self.first_epoch = initial_epoch
        self.steps = steps  # per epoch, from initial_epoch
        self.done = 0
        self.rows = 0
        self.loss_total = 0.0
        self.updated = False

    def on_train_begin(self, logs=None):
        if self.progress:
            self.progress.start_clock()

    def batch(self, index, loss, y_true, y_pred):
        if index == 0 and self.progress:
            k = self.epoch - self.first_epoch
            self.progress.header(self.epoch, self.steps[k] if k < len(self.steps) else 0)
        self.updated = True
        results = self.metrics.update(y_true, y_pred)
        self.done = index + 1
        self.rows += len(y_true)
        self.loss_total += loss * len(y_true)
        if self.progress:
            self.progress.batch_end(self.done, {"loss": self.loss_total / self.rows, **results})
        return results

    def on_epoch_end(self, epoch, logs):
        self.epoch = epoch + 1
        self.model._ml_epoch = epoch + 1  # what save_training_state records
        if not self.metrics.names:
            return
        if not self.updated:
            raise ValueError("fit: compile(metrics=…) needs the model's outputs, which this "
                             "model's fused loss path does not give")
        ordered = {"loss": logs["loss"], **self.metrics.results()}
        if self.validation is not None:
            ordered["val_loss"] = logs["val_loss"]
            pred = self.model._ml_trainer.predict(self.validation[0], self.batch_size)
            for name in self.metrics.names:
                ordered["val_" + name] = _metrics.mean(name, self.validation[1], pred)
        logs.clear()
        logs.update(ordered)
        if self.progress:
            self.progress.epoch_end(self.done, logs)
        self.metrics.reset()
        self.done, self.rows, self.loss_total = 0, 0, 0.0


def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
        validation_split=0.0, validation_data=None, shuffle=True, initial_epoch=0,
        steps_per_epoch=None, seed=0):
    """keras Model.fit on numpy arrays (or a Python iterator of (x, y) batches): returns a
    History (history["loss"], the compiled metrics, "val_loss", "val_<metric>"; .epoch the
    indices run). The steps are the C++ Trainer's, bit for bit; shuffle draws each pass's
    permutation from `seed` (default 0, the same every run; shuffle="batch" is not supported).
    initial_epoch e runs epochs e … epochs-1 on the batches the uninterrupted run would give
    them; steps_per_epoch runs on through the passes over the rows as Keras does (an epoch ends
    early, with Keras' warning, when its pass runs out). Ctrl-C stops between batches with
    KeyboardInterrupt; the model stays usable."""
    from meshlayout import _training
    if y is None and _is_iterator(x):
        x, y, size = _from_batches(x)
        batch_size = size if batch_size is None else batch_size
    if x is None or y is None:
        raise ValueError("fit: meshlayout needs x and y (numpy arrays) or an iterator of "
                         "(x, y) batches")
    epochs = _count(epochs, "epochs")
    initial_epoch = _count(initial_epoch, "initial_epoch")
    steps_per_epoch = _count(steps_per_epoch, "steps_per_epoch", allow_none=True)
    if steps_per_epoch == 0:
        raise ValueError("steps_per_epoch must be a positive integer or None, got 0")
    if shuffle not in (True, False) and not isinstance(shuffle, (bool, np.bool_)):
        raise ValueError(f"fit: shuffle must be True or False, got {shuffle!r} (meshlayout does "
                         "not shuffle within batches)")
    batch_size = batch_size_of(batch_size)
    level = verbose_level(verbose)
    x = np.asarray(x)
    y = np.asarray(y)
    if validation_split and validation_data is None:
        x, y, validation_data = _split(x, y, validation_split)
    if validation_data is not None:
        if not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2:
            raise ValueError("validation_data must be a tuple (x_val, y_val), got "
                             f"{type(validation_data).__name__}")
        validation_data = (np.asarray(validation_data[0]), np.asarray(validation_data[1]))
    trainer = _training._trainer(self)
    _training._ensure_built(self, x)
    cbs = list(callbacks or [])
    for cb in cbs:  # Keras restores in on_train_begin, before the first epoch is chosen
        if isinstance(cb, _callbacks.BackupAndRestore):
            cb.set_model(self)
            restored = cb._restore(self)
            if restored is not None:
                initial_epoch = restored
    metrics = list(getattr(self, "_ml_metrics", []))
    batches = -(-len(x) // batch_size) if len(x) else 0
    steps = _epoch_steps(batches, steps_per_epoch, initial_epoch, epochs) if batches else []
    if steps_per_epoch and any(n < steps_per_epoch for n in steps):
        warnings.warn("Your input ran out of data; interrupting training. Make sure that your "
                      "dataset or generator can generate at least `steps_per_epoch * epochs` "
                      "batches. (meshlayout: on arrays, the next epoch starts a new pass.)",
                      stacklevel=2)
    history = _callbacks.History()
    params = {"epochs": epochs, "verbose": level, "steps": steps_per_epoch or batches}
    for cb in cbs + [history]:
        if hasattr(cb, "set_model"):
            cb.set_model(self)
        if hasattr(cb, "set_params"):
            cb.set_params(params)
    self.stop_training = False
    progress = None
    if metrics and level:
        progress = _metrics.Progress(level, epochs, _meshlayout._process_index())
    hooks = _FitHooks(self, metrics, validation_data, batch_size, progress, initial_epoch, steps)
    trainer.fit(self, x, y, batch_size, epochs, bool(shuffle), int(seed),
                0 if metrics else level, [hooks] + cbs + [history], validation_data,
                initial_epoch, steps_per_epoch or 0, hooks if metrics else None)
    history.model = self
    history.params = params
    return history

