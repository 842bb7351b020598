"""meshlayout.callbacks: keras.callbacks' Callback (on_train_begin, on_epoch_end,
on_train_batch_end, on_train_end, set_model, set_params), History, LambdaCallback and
EarlyStopping on "loss"/"val_loss", BackupAndRestore (training-state checkpoints each epoch,
a rerun fit resuming bit for bit). fit calls the hooks from its C++ loop with the GIL held only
while they run; a hook that raises stops fit with its exception; setting
`self.model.stop_training = True` ends fit after the epoch."""

__all__ = ["BackupAndRestore", "Callback", "EarlyStopping", "History", "LambdaCallback"]


import os
import shutil


class Callback:
    """keras.callbacks.Callback: override the hooks you need."""

    def __init__(self):
        self.model = None
        self.params = {}

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_begin(self, logs=None):
        pass

    def on_train_batch_end(self, batch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_train_end(self, logs=None):
        pass


class History(Callback):
    """keras.callbacks.History: .history {"loss": [...], "val_loss": [...]}, .epoch."""

    def __init__(self):
        super().__init__()
        self.history = {}
        self.epoch = []

    def on_train_begin(self, logs=None):
        self.epoch = []

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)


class LambdaCallback(Callback):
    """keras.callbacks.LambdaCallback(on_epoch_end=…, on_train_batch_end=…, …)."""

    def __init__(self, on_train_begin=None, on_train_batch_end=None, on_epoch_end=None,
                 on_train_end=None):
        super().__init__()
        for name, fn in (("on_train_begin", on_train_begin),
                         ("on_train_batch_end", on_train_batch_end),
                         ("on_epoch_end", on_epoch_end), ("on_train_end", on_train_end)):
            if fn is not None:
                setattr(self, name, fn)


class EarlyStopping(Callback):
    """keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=0, patience=0)."""

    def __init__(self, monitor="val_loss", min_delta=0, patience=0, verbose=0, mode="auto",
                 baseline=None, restore_best_weights=False, start_from_epoch=0):
        super().__init__()
        if mode not in ("auto", "min"):
            raise ValueError(f"EarlyStopping: mode {mode!r} is not supported (losses: 'min')")
        if restore_best_weights:
            raise ValueError("EarlyStopping: restore_best_weights is not supported")
        self.monitor = monitor
        self.min_delta = abs(min_delta)
        self.patience = patience
        self.baseline = baseline
        self.start_from_epoch = start_from_epoch
        self.stopped_epoch = 0

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.best = float("inf") if self.baseline is None else self.baseline

    def on_epoch_end(self, epoch, logs=None):
        current = (logs or {}).get(self.monitor)
        if current is None or epoch < self.start_from_epoch:
            return
        if current < self.best - self.min_delta:
            self.best = current
            self.wait = 0
            return
        self.wait += 1
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True


class BackupAndRestore(Callback):
    """keras.callbacks.BackupAndRestore(backup_dir, save_freq="epoch", delete_checkpoint=True):
    after every epoch the model's training state (weights, optimizer slots and iterations, the
    epochs done: model.save_training_state) is saved atomically into
    backup_dir/step-<iterations>, the older one removed; a fit started with this callback
    whose backup_dir holds a complete state loads it first and resumes at the epoch after it,
    so an interrupted fit run again ends as the uninterrupted one would, bit for bit (the same
    batches and shuffles: fit's initial_epoch). delete_checkpoint removes backup_dir when fit
    ends normally. save_freq must be "epoch" (meshlayout resumes at epoch boundaries)."""

    def __init__(self, backup_dir, save_freq="epoch", double_checkpoint=False,
                 delete_checkpoint=True):
        super().__init__()
        if not backup_dir:
            raise ValueError("Empty `backup_dir` argument passed")
        if save_freq != "epoch":
            raise ValueError(f"BackupAndRestore: save_freq={save_freq!r} is not supported by "
                             "meshlayout (it resumes at epoch boundaries): use 'epoch'")
        self.backup_dir = os.fspath(backup_dir)
        self.save_freq = save_freq
        self.double_checkpoint = double_checkpoint
        self.delete_checkpoint = delete_checkpoint

    def _restore(self, model):
        """Called by fit before training: the epoch to resume at, or None (nothing saved)."""
        from meshlayout import _meshlayout
        latest = _meshlayout._nn._latest_training_state(self.backup_dir)
        if not latest:
            return None
        return model.load_training_state(latest)["epoch"]

    def on_epoch_end(self, epoch, logs=None):
        from meshlayout import _meshlayout
        directory = os.path.join(self.backup_dir,
                                 f"step-{self.model.optimizer.iterations:08d}")
        os.makedirs(self.backup_dir, exist_ok=True)
        self.model.save_training_state(directory)
        if _meshlayout._process_index() != 0:
            return
        keep = 2 if self.double_checkpoint else 1
        states = sorted(n for n in os.listdir(self.backup_dir) if n.startswith("step-"))
        for name in states[:-keep]:
            shutil.rmtree(os.path.join(self.backup_dir, name), ignore_errors=True)

    def on_train_end(self, logs=None):
        from meshlayout import _meshlayout
        if self.delete_checkpoint and _meshlayout._process_index() == 0:
            shutil.rmtree(self.backup_dir, ignore_errors=True)
