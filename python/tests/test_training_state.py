# Training-state checkpoints from Python (issue 29): model.save_training_state /
# load_training_state (weights + optimizer slots and iterations + the epochs done, one atomic
# directory) and keras.callbacks.BackupAndRestore: a fit interrupted after an epoch and run again
# with the same callback resumes where it stopped and ends with the uninterrupted run's history
# and weights, bit for bit (shuffled, Adam); the state loads onto another mesh; refusals.
import os

import numpy as np
import pytest

import meshlayout as keras
from meshlayout import layers as L

from fit_data import data, fresh_session  # noqa: F401 (an autouse fixture)


def model(mesh_shape=(2, 4)):
    rules = keras.LayoutMap(keras.DeviceMesh(mesh_shape, ["batch", "model"]))
    rules["d1.kernel"] = (None, "model")
    rules["d2.kernel"] = ("model", None)
    with rules.scope():
        m = keras.Sequential([keras.Input((4,)), L.Dense(8, activation="relu", name="d1"),
                              L.Dense(1, name="d2")], name="state")
    m.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01), loss="mse", metrics=["mae"])
    return m


def weights(m):
    return [v.numpy() for v in m.weights]


class StopAfter(keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            raise KeyboardInterrupt("the machine went away")


def test_backup_and_restore_resumes_an_interrupted_fit_bit_for_bit(tmp_path):
    x, y = data()
    fit = dict(batch_size=4, epochs=4, shuffle=True, seed=7, verbose=0)
    whole = model()
    full = whole.fit(x, y, **fit)
    backup = str(tmp_path / "backup")
    keras.clear_session()
    first = model()
    with pytest.raises(KeyboardInterrupt):
        # BackupAndRestore runs before StopAfter: epoch 1's state is saved, then the run dies.
        first.fit(x, y, callbacks=[keras.callbacks.BackupAndRestore(backup), StopAfter(1)], **fit)
    assert os.listdir(backup) == ["step-00000008"]  # the older state removed
    keras.clear_session()
    second = model()  # a fresh process would build the same model again
    rest = second.fit(x, y, callbacks=[keras.callbacks.BackupAndRestore(backup)], **fit)
    assert rest.epoch == [2, 3]
    assert rest.history["loss"] == full.history["loss"][2:]
    assert rest.history["mae"] == full.history["mae"][2:]
    assert second.optimizer.iterations == whole.optimizer.iterations == 16
    for a, b in zip(weights(second), weights(whole)):
        np.testing.assert_array_equal(a, b)
    assert not os.path.exists(backup)  # delete_checkpoint: removed when fit ends normally


def test_save_and_load_training_state_onto_another_mesh(tmp_path):
    x, y = data()
    a = model()
    a.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    state = str(tmp_path / "state")
    a.save_training_state(state)
    assert sorted(os.listdir(state)) == ["meshlayout_save.json", "model.safetensors",
                                         "optimizer.safetensors"]
    after = a.fit(x, y, batch_size=4, epochs=2, initial_epoch=1, shuffle=False, verbose=0)
    keras.clear_session()
    b = model(mesh_shape=(4, 2))  # another mesh: every device reads its own box
    assert b.load_training_state(state) == {"iterations": 4, "epoch": 1}
    again = b.fit(x, y, batch_size=4, epochs=2, initial_epoch=1, shuffle=False, verbose=0)
    np.testing.assert_allclose(again.history["loss"], after.history["loss"], rtol=1e-6)
    for wa, wb in zip(weights(a), weights(b)):
        np.testing.assert_allclose(wa, wb, rtol=1e-5, atol=1e-7)


def test_training_state_refusals(tmp_path):
    x, y = data()
    m = model()
    with pytest.raises(FileNotFoundError):
        m.load_training_state(str(tmp_path / "missing"))
    m.fit(x, y, batch_size=8, verbose=0)
    state = str(tmp_path / "s")
    m.save_training_state(state)
    with pytest.raises(ValueError):
        m.save_training_state(state)  # not a new or empty directory
    keras.clear_session()
    sgd = model()
    sgd.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match="another optimizer"):
        sgd.load_training_state(state)
    weights_only = str(tmp_path / "w")
    os.makedirs(weights_only)
    sgd.save_weights(os.path.join(weights_only, "model.safetensors"))
    with pytest.raises(OSError, match="did not finish"):
        sgd.load_training_state(weights_only)
    with pytest.raises(ValueError, match="save_freq"):
        keras.callbacks.BackupAndRestore(str(tmp_path), save_freq=10)
    uncompiled = keras.Sequential([keras.Input((4,)), L.Dense(1)])
    with pytest.raises(RuntimeError, match="compile"):
        uncompiled.save_training_state(str(tmp_path / "u"))
