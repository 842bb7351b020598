# Training from Python (issue 29): compile / fit / evaluate / predict through the C++ Trainer —
# the losses equal a C++ program's running the same fit, bit for bit (tests/reference/
# fit_reference.cc); subclassed models train through their traced graph exactly as the same
# Sequential; Python callbacks, validation, metrics, a Python iterator of batches, Ctrl-C,
# save_weights / load_weights, summary(), and Keras' errors.
import os
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

import meshlayout as keras
from meshlayout import layers as L


@pytest.fixture(autouse=True)
def fresh_session():
    keras.clear_session()
    yield


def reference_data(rows=16, width=4):
    i = np.arange(rows)[:, None]
    j = np.arange(width)[None, :]
    x = (((31 * i + 17 * j) % 23) - 11).astype(np.float32) / 8
    y = ((((13 * np.arange(rows)) % 7) - 3).astype(np.float32) / 4)[:, None]
    return x, y


def reference_model():
    mesh = keras.DeviceMesh((2, 4), ["batch", "model"])
    rules = keras.LayoutMap(mesh)
    rules["d1.kernel"] = (None, "model")
    rules["d2.kernel"] = ("model", None)
    with rules.scope():
        return keras.Sequential([keras.Input((4,)), L.Dense(8, activation="relu", name="d1"),
                                 L.Dense(1, name="d2")], name="ref")


REFERENCE = os.path.join(os.path.dirname(keras.__file__), os.pardir, "python_fit_reference")


@pytest.mark.skipif(not os.path.exists(REFERENCE),
                    reason="the C++ reference program is built in the CMake build tree only")
def test_fit_equals_the_cpp_fit_bit_for_bit():
    lines = subprocess.run([REFERENCE], check=True, capture_output=True,
                           text=True).stdout.split("\n")
    cpp_losses = [float.fromhex(s.split()[1]) for s in lines if s.startswith("loss")]
    cpp_pred = [float.fromhex(s.split()[1]) for s in lines if s.startswith("pred")]
    x, y = reference_data()
    model = reference_model()
    model.compile(optimizer="adam", loss="mse")
    history = model.fit(x, y, batch_size=4, epochs=3, shuffle=True, seed=5, verbose=0)
    assert [v.hex() for v in history.history["loss"]] == [v.hex() for v in cpp_losses]
    pred = model.predict(x, batch_size=4)[:, 0].astype(np.float64)
    assert [v.hex() for v in pred] == [v.hex() for v in cpp_pred]


class TwoDense(keras.Model):
    def __init__(self):
        super().__init__()
        self.d1 = L.Dense(8, activation="relu", name="d1")
        self.d2 = L.Dense(1, name="d2")

    def call(self, x):
        return self.d2(self.d1(x))


def test_subclassed_trains_as_the_same_sequential():
    x, y = reference_data()
    sub = TwoDense()
    sub(x[:1])
    seq = keras.Sequential([keras.Input((4,)), L.Dense(8, activation="relu", name="d1"),
                            L.Dense(1, name="d2")])
    for a, b in zip(seq.weights, sub.weights):
        a.assign(b.value)  # same start (initial values are keyed by the paths, which differ)
    results = []
    for m in (sub, seq):
        m.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9), loss="mse")
        results.append(m.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0))
    assert results[0].history["loss"] == results[1].history["loss"]
    assert results[0].history["loss"][-1] < results[0].history["loss"][0]
    np.testing.assert_array_equal(sub.d1.kernel.value, seq.weights[0].value)


def test_functional_with_merge_trains():
    x, y = reference_data()
    inputs = keras.Input((4,))
    a = L.Dense(8, activation="tanh", name="a")(inputs)
    b = L.Dense(8, name="b")(inputs)
    out = L.Dense(1, name="out")(L.Add()([a, b]))
    m = keras.Model(inputs, out)
    m.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01), loss="mean_squared_error")
    h = m.fit(x, y, batch_size=8, epochs=5, verbose=0)
    assert h.history["loss"][-1] < h.history["loss"][0]
    assert m.evaluate(x, y, verbose=0) == pytest.approx(
        float(np.mean((m.predict(x) - y) ** 2)), rel=1e-5)


def test_classification_with_metrics_and_validation():
    rng = np.random.RandomState(0)
    x = rng.randn(32, 4).astype(np.float32)
    labels = (x[:, 0] > 0).astype(np.int32)
    m = keras.Sequential([keras.Input((4,)), L.Dense(2)])
    m.compile(optimizer="adamw", metrics=["accuracy"],
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    h = m.fit(x, labels, batch_size=8, epochs=3, validation_data=(x[:8], labels[:8]), verbose=0)
    assert list(h.history) == ["loss", "accuracy", "val_loss", "val_accuracy"]
    assert len(h.history["val_loss"]) == 3 and h.epoch == [0, 1, 2]
    loss, acc = m.evaluate(x[:8], labels[:8], verbose=0)
    assert loss == h.history["val_loss"][-1] and acc == h.history["val_accuracy"][-1]
    assert m.evaluate(x, labels, return_dict=True, verbose=0).keys() == {"loss", "accuracy"}


def test_validation_split_takes_the_last_rows():
    x, y = reference_data()
    m = reference_model()
    m.compile(optimizer="sgd", loss="mse")
    h = m.fit(x, y, batch_size=4, validation_split=0.25, verbose=0)
    assert h.history["val_loss"][0] == m.evaluate(x[12:], y[12:], batch_size=4, verbose=0)


def test_callbacks_are_called_in_keras_order():
    calls = []

    class Recorder(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            calls.append("begin")

        def on_train_batch_end(self, batch, logs=None):
            calls.append(("batch", batch, round(logs["loss"], 12) == round(logs["loss"], 12)))

        def on_epoch_end(self, epoch, logs=None):
            calls.append(("epoch", epoch, sorted(logs)))

        def on_train_end(self, logs=None):
            calls.append("end")

    x, y = reference_data()
    m = reference_model()
    m.compile(optimizer="sgd", loss="mse")
    rec = Recorder()
    m.fit(x, y, batch_size=8, epochs=2, callbacks=[rec], verbose=0)
    assert calls == ["begin", ("batch", 0, True), ("batch", 1, True), ("epoch", 0, ["loss"]),
                     ("batch", 0, True), ("batch", 1, True), ("epoch", 1, ["loss"]), "end"]
    assert rec.model is m and rec.params["epochs"] == 2


def test_early_stopping_and_stop_training():
    x, y = reference_data()
    m = reference_model()
    m.compile(optimizer=keras.optimizers.SGD(learning_rate=10.0), loss="mse")
    stopper = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: setattr(m, "stop_training", epoch == 1))
    h = m.fit(x, y, batch_size=8, epochs=10, callbacks=[stopper], verbose=0)
    assert len(h.history["loss"]) == 2


def test_a_callback_error_stops_fit_and_the_model_stays_usable():
    class Boom(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                raise KeyError("boom")

    x, y = reference_data()
    m = reference_model()
    m.compile(optimizer="sgd", loss="mse")
    with pytest.raises(KeyError, match="boom"):
        m.fit(x, y, batch_size=4, epochs=3, callbacks=[Boom()], verbose=0)
    assert m.fit(x, y, batch_size=4, verbose=0).history["loss"]
    assert m.predict(x).shape == (16, 1)


def test_ctrl_c_interrupts_a_long_fit_between_batches():
    # No Python code runs per batch (the callback only has on_train_begin): the SIGINT arrives
    # while C++ trains with the GIL released, and fit's check between batches raises it.
    x, y = reference_data()
    m = reference_model()
    m.compile(optimizer="sgd", loss="mse")
    started = threading.Event()

    class Start:
        def on_train_begin(self, logs=None):
            started.set()

    def interrupt():
        started.wait()
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    epochs = 100000
    with pytest.raises(KeyboardInterrupt):
        m.fit(x, y, batch_size=4, epochs=epochs, callbacks=[Start()], verbose=0)
    assert 0 < m.optimizer.iterations < 4 * epochs  # stopped between two steps
    assert np.all(np.isfinite(m.predict(x)))  # usable afterwards
    assert m.fit(x, y, batch_size=4, verbose=0).history["loss"]


def test_fit_on_a_python_iterator_of_batches():
    x, y = reference_data()
    results = []
    for data in ("arrays", "iterator"):
        keras.clear_session()
        m = reference_model()
        m.compile(optimizer="adam", loss="mse")
        if data == "arrays":
            results.append(m.fit(x, y, batch_size=4, shuffle=False, verbose=0).history["loss"])
        else:
            batches = ((x[k:k + 4], y[k:k + 4]) for k in range(0, 16, 4))
            results.append(m.fit(batches, shuffle=False, verbose=0).history["loss"])
    assert results[0] == results[1]


def test_progress_lines_as_keras_prints_them(capsys):
    x, y = reference_data()
    m = reference_model()
    m.compile(optimizer="sgd", loss="mse")
    m.fit(x, y, batch_size=8, epochs=2, verbose=2)
    out = capsys.readouterr().out
    assert "Epoch 1/2" in out and "Epoch 2/2" in out and "2/2 - " in out and "loss: " in out


def test_summary_shows_layouts(capsys):
    m = reference_model()
    m.summary()
    out = capsys.readouterr().out
    assert 'Model: "ref"' in out and "ref/d1/kernel" in out and "layout[None,model]" in out
    lines = []
    m.summary(print_fn=lines.append)
    assert "Total params: 49" in lines[0]


@pytest.mark.parametrize("style", ["path", "object_path"])
def test_save_and_load_weights(tmp_path, style):
    x, y = reference_data()
    m = reference_model()
    path = str(tmp_path / "w.safetensors")
    m.save_weights(path, path_style=style)
    names = keras.open_checkpoint(path).keys() if hasattr(keras.open_checkpoint(path), "keys") \
        else None
    before = m.predict(x)
    m.compile(optimizer="sgd", loss="mse")
    m.fit(x, y, batch_size=4, verbose=0)
    assert not np.array_equal(m.predict(x), before)
    m.load_weights(path, path_style=style)
    np.testing.assert_array_equal(m.predict(x), before)
    del names
    with pytest.raises(FileNotFoundError):
        m.load_weights(str(tmp_path / "missing.safetensors"))
    with pytest.raises(ValueError, match="path_style"):
        m.save_weights(path, path_style="keras2")


def test_optimizers_and_losses_by_object_and_name():
    x, y = reference_data()
    for opt in (keras.optimizers.SGD(), keras.optimizers.Adam(), keras.optimizers.AdamW(),
                keras.optimizers.RMSprop(), keras.optimizers.Adagrad(), keras.optimizers.Lion(),
                "rmsprop", "adam"):
        keras.clear_session()
        m = reference_model()
        m.compile(optimizer=opt, loss=keras.losses.MeanSquaredError())
        assert np.isfinite(m.fit(x, y, batch_size=8, verbose=0).history["loss"][0])
    assert keras.optimizers.get("sgd").name.startswith("sgd")
    assert keras.losses.get("mse").name == "mean_squared_error"


def test_no_device_memory_is_left_after_a_model_is_dropped():
    import gc
    gc.collect()
    before = {d: m["bytes_live"] for d, m in keras.device_memory().items()}
    x, y = reference_data()
    m = reference_model()
    m.compile(optimizer="adam", loss="mse")
    m.fit(x, y, batch_size=4, epochs=2, verbose=0)
    m.predict(x)
    assert any(keras.device_memory()[d]["bytes_live"] > before[d] for d in before)
    with pytest.raises(ValueError):
        m.fit(x, y[:3], verbose=0)  # an error on the way leaks nothing either
    del m
    gc.collect()
    assert {d: m["bytes_live"] for d, m in keras.device_memory().items()} == before


def test_training_errors_are_keras_errors():
    x, y = reference_data()
    m = reference_model()
    with pytest.raises(RuntimeError, match="You must call `compile\\(\\)`"):
        m.fit(x, y)
    with pytest.raises(ValueError, match="Could not interpret optimizer identifier: nope"):
        m.compile(optimizer="nope", loss="mse")
    with pytest.raises(ValueError, match="Could not interpret loss identifier: hinge"):
        m.compile(optimizer="sgd", loss="hinge")
    with pytest.raises(ValueError, match="Could not interpret metric identifier: f1"):
        m.compile(optimizer="sgd", loss="mse", metrics=["f1"])
    with pytest.raises(ValueError, match="beta_1"):
        keras.optimizers.SGD(beta_1=0.5)
    m.compile(optimizer="sgd")
    with pytest.raises(ValueError, match="No loss to compute"):
        m.fit(x, y)
    m.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError):
        m.fit(x, y[:5], verbose=0)  # row counts differ
    with pytest.raises(ValueError, match="0-d"):
        m.fit(x, np.float32(1.0), verbose=0)
    with pytest.raises(ValueError, match="batch_size"):
        m.fit(x, y, batch_size=0)
    with pytest.raises(ValueError, match="verbose"):
        m.fit(x, y, verbose=5)


def test_batch_end_hooks_set_on_the_instance_are_called():
    # fit skips the per-step Python call for callbacks that keep Callback's no-op hook (History,
    # BackupAndRestore); a LambdaCallback's hook (an instance attribute) still runs every step.
    x, y = reference_data()
    m = reference_model()
    m.compile(optimizer="sgd", loss="mse")
    seen = []
    lam = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: seen.append(b))
    m.fit(x, y, batch_size=8, epochs=2, callbacks=[keras.callbacks.Callback(), lam], verbose=0)
    assert seen == [0, 1, 0, 1]
