# Model.fit's Keras options beyond the basics (issue 29): compile(metrics=[…]) as running means
# over each epoch (in the batch logs, History, val_<metric>, the progress line), Keras' metric
# kinds ("accuracy" resolved from the shapes), initial_epoch (a fit resumed at epoch e equals
# the uninterrupted run bit for bit), steps_per_epoch (the batches run on through the passes,
# Keras' "ran out of data" warning), validation_split and shuffle's refusals.
import warnings

import numpy as np
import pytest

import meshlayout as keras
from meshlayout import _metrics
from meshlayout import layers as L

from fit_data import data, fresh_session  # noqa: F401 (an autouse fixture)


def model(learning_rate=0.05, metrics=("mae", "mse")):
    mesh = keras.DeviceMesh((2, 4), ["batch", "model"])
    rules = keras.LayoutMap(mesh)
    rules["d1.kernel"] = (None, "model")
    with rules.scope():
        m = keras.Sequential([keras.Input((4,)), L.Dense(8, activation="relu", name="d1"),
                              L.Dense(1, name="d2")], name="fit_model")
    m.compile(optimizer=keras.optimizers.SGD(learning_rate=learning_rate), loss="mse",
              metrics=list(metrics))
    return m


class Batches(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.logs = []

    def on_train_batch_end(self, batch, logs=None):
        self.logs.append(dict(logs))


def test_metrics_are_running_means_of_the_epochs_batches():
    # Learning rate 0: every step's outputs are predict()'s, so the running means are known.
    x, y = data()
    m = model(learning_rate=0.0)
    pred = m.predict(x).astype(np.float64)
    rec = Batches()
    h = m.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0, callbacks=[rec],
              validation_data=(x[:6], y[:6]))
    assert list(h.history) == ["loss", "mae", "mse", "val_loss", "val_mae", "val_mse"]
    err = np.abs(pred - y)[:, 0]
    for k, logs in enumerate(rec.logs[:4]):
        assert logs["mae"] == pytest.approx(err[:4 * (k + 1)].mean(), rel=1e-12)
    assert rec.logs[4]["mae"] == pytest.approx(err[:4].mean(), rel=1e-12)  # reset each epoch
    assert h.history["mae"] == [pytest.approx(err.mean(), rel=1e-12)] * 2
    assert h.history["mse"][0] == pytest.approx((err ** 2).mean(), rel=1e-12)
    assert h.history["mse"][0] == pytest.approx(h.history["loss"][0], rel=1e-6)
    assert h.history["val_mae"][0] == pytest.approx(err[:6].mean(), rel=1e-12)
    loss, mae, mse = m.evaluate(x, y, verbose=0)
    assert mae == pytest.approx(err.mean(), rel=1e-12)


def test_metrics_are_computed_on_each_steps_outputs_before_its_update():
    x, y = data()
    m = model(learning_rate=0.1, metrics=["mae"])
    h = m.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    # One step an epoch: epoch 1's mae is the model after epoch 0's update, on all rows.
    after_one = model(learning_rate=0.1, metrics=["mae"])
    after_one.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    want = float(np.mean(np.abs(after_one.predict(x).astype(np.float64) - y)))
    assert h.history["mae"][1] == pytest.approx(want, rel=1e-12)
    assert h.history["mae"][0] != h.history["mae"][1]


def test_the_progress_line_shows_the_metrics(capsys):
    x, y = data()
    m = model(metrics=["mae"])
    m.fit(x, y, batch_size=8, epochs=2, verbose=2, validation_split=0.25)
    out = capsys.readouterr().out
    assert out.count("Epoch 1/2\n") == 1 and "Epoch 2/2" in out
    line = [ln for ln in out.splitlines() if ln.startswith("2/2 - ")][0]
    assert line.index(" - loss: ") < line.index(" - mae: ") < line.index(" - val_loss: ") \
        < line.index(" - val_mae: ")
    m.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert capsys.readouterr().out == ""


def test_accuracy_kinds_as_keras_resolves_them():
    sparse = _metrics.per_sample("accuracy", np.array([1, 0, 2]),
                                 np.array([[0, 1, 0], [1, 0, 0], [1, 0, 0]], np.float32))
    assert sparse.tolist() == [1, 1, 0]
    column = _metrics.per_sample("accuracy", np.array([[1], [0]]),
                                 np.array([[0, 1], [0, 1]], np.float32))
    assert column.tolist() == [1, 0]
    onehot = _metrics.per_sample("acc", np.array([[0, 1], [1, 0]]),
                                 np.array([[0.2, 0.8], [0.1, 0.9]], np.float32))
    assert onehot.tolist() == [1, 0]
    binary = _metrics.per_sample("accuracy", np.array([[1], [0], [1]]),
                                 np.array([[0.7], [0.6], [0.2]], np.float32))
    assert binary.tolist() == [1, 0, 0]
    # Sequences: each sample's mean over its positions, as Keras' Mean reduces them.
    seq = _metrics.per_sample("sparse_categorical_accuracy", np.array([[1, 1], [0, 1]]),
                              np.array([[[0, 1], [1, 0]], [[1, 0], [0, 1]]], np.float32))
    assert seq.tolist() == [0.5, 1.0]
    assert _metrics.per_sample("mse", np.array([[1.0, 2.0]]), np.array([[2.0, 4.0]])).tolist() \
        == [2.5]
    with pytest.raises(ValueError, match="Could not interpret metric identifier: auc"):
        _metrics.check_name("auc")


def test_sparse_accuracy_rises_while_training():
    rng = np.random.RandomState(0)
    x = rng.randn(64, 4).astype(np.float32)
    labels = (x[:, 0] > 0).astype(np.int32)
    m = keras.Sequential([keras.Input((4,)), L.Dense(2)])
    m.compile(optimizer=keras.optimizers.Adam(learning_rate=0.05),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["sparse_categorical_accuracy"])
    h = m.fit(x, labels, batch_size=16, epochs=8, verbose=0)
    acc = h.history["sparse_categorical_accuracy"]
    assert acc[-1] > acc[0] and acc[-1] >= 0.9
    assert all(v * 64 == round(v * 64) for v in acc)  # fractions of the 64 rows


def test_initial_epoch_resumes_the_uninterrupted_run_bit_for_bit():
    x, y = data()
    whole = model()
    full = whole.fit(x, y, batch_size=4, epochs=4, shuffle=True, seed=3, verbose=0)
    split = model()
    first = split.fit(x, y, batch_size=4, epochs=2, shuffle=True, seed=3, verbose=0)
    rest = split.fit(x, y, batch_size=4, epochs=4, initial_epoch=2, shuffle=True, seed=3,
                     verbose=0)
    assert rest.epoch == [2, 3] and first.epoch == [0, 1]
    for key in ("loss", "mae", "mse"):
        assert first.history[key] + rest.history[key] == full.history[key]
    for a, b in zip(whole.weights, split.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert split.fit(x, y, epochs=2, initial_epoch=2, verbose=0).history == {}


def test_initial_epoch_in_the_progress(capsys):
    x, y = data()
    model(metrics=[]).fit(x, y, batch_size=8, epochs=3, initial_epoch=1, verbose=2)
    out = capsys.readouterr().out
    assert "Epoch 1/3" not in out and "Epoch 2/3" in out and "Epoch 3/3" in out


def test_steps_per_epoch_runs_on_through_the_passes():
    x, y = data()  # 16 rows, batches of 4: 4 batches a pass
    plain, stepped = model(), model()
    a, b = Batches(), Batches()
    plain.fit(x, y, batch_size=4, epochs=2, seed=1, verbose=0, callbacks=[a])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        h = stepped.fit(x, y, batch_size=4, epochs=4, steps_per_epoch=2, seed=1, verbose=0,
                        callbacks=[b])
    assert len(h.history["loss"]) == 4
    assert [lg["loss"] for lg in b.logs] == [lg["loss"] for lg in a.logs]
    with pytest.warns(UserWarning, match="ran out of data"):
        h = model().fit(x, y, batch_size=4, epochs=3, steps_per_epoch=3, verbose=0)
    assert len(h.history["loss"]) == 3


def test_bad_fit_options_are_keras_errors():
    x, y = data()
    m = model()
    with pytest.raises(ValueError, match="not sufficient to split"):
        m.fit(x[:1], y[:1], validation_split=0.5, verbose=0)
    with pytest.raises(ValueError, match="validation_split"):
        m.fit(x, y, validation_split=1.5, verbose=0)
    with pytest.raises(ValueError, match="shuffle"):
        m.fit(x, y, shuffle="batch", verbose=0)
    with pytest.raises(ValueError, match="initial_epoch"):
        m.fit(x, y, initial_epoch=-1, verbose=0)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        m.fit(x, y, steps_per_epoch=0, verbose=0)
    with pytest.raises(ValueError, match="validation_data"):
        m.fit(x, y, validation_data=x, verbose=0)
    assert m.optimizer.iterations == 0
