# Sequential.add / pop and custom Python layers (issue 29): a Sequential grown by add() equals
# the one built at once (paths, layouts, training bit for bit), pop() and Keras' errors; a
# subclass of meshlayout.layers.Layer composing built-in layers works inside Sequential,
# functional and subclassed models (its attributes tracked for Keras 2 and Keras 3 paths), trains
# as the same layers written flat, survives the user's last reference to it, frees its memory,
# and its own Python math (or add_weight) is refused naming the layer.
import gc

import numpy as np
import pytest

import meshlayout as keras
from meshlayout import layers as L

from fit_data import data, fresh_session  # noqa: F401 (an autouse fixture)


def rules():
    layout_map = keras.LayoutMap(keras.DeviceMesh((2, 4), ["batch", "model"]))
    layout_map["d1.kernel"] = (None, "model")
    layout_map["block.up.kernel"] = (None, "model")
    layout_map["block.down.kernel"] = ("model", None)
    return layout_map


def test_a_sequential_grown_by_add_equals_the_one_built_at_once():
    x, y = data()
    with rules().scope():
        grown = keras.Sequential(name="seq")
    grown.add(keras.Input((4,)))
    assert not grown.built
    grown.add(L.Dense(8, activation="relu", name="d1"))
    assert grown.built  # the input shape is known: built at once, as Keras rebuilds
    grown.add(L.Dense(1, name="d2"))
    keras.clear_session()
    with rules().scope():
        whole = keras.Sequential([keras.Input((4,)), L.Dense(8, activation="relu", name="d1"),
                                  L.Dense(1, name="d2")], name="seq")
    assert [(v.path, v.layout.axes) for v in grown.weights] == \
        [(v.path, v.layout.axes) for v in whole.weights]
    assert grown.weights[0].layout.axes == (None, "model")
    losses = []
    for m in (grown, whole):
        m.compile(optimizer="adam", loss="mse")
        losses.append(m.fit(x, y, batch_size=4, epochs=2, verbose=0).history["loss"])
    assert losses[0] == losses[1]
    assert grown.pop().name == "d2" and [la.name for la in grown.layers] == ["d1"]
    assert grown.predict(x).shape == (16, 8)
    grown.add(L.Dense(2, name="d3"))
    assert grown.predict(x).shape == (16, 2)


def test_add_without_an_input_builds_at_the_first_call():
    m = keras.Sequential()
    m.add(L.Dense(3, name="a"))
    m.add(L.Dense(1, name="b"))
    assert not m.built
    assert m.predict(np.ones((2, 5), np.float32)).shape == (2, 1)
    assert [v.path for v in m.weights][:2] == ["sequential/a/kernel", "sequential/a/bias"]


def test_sequential_add_and_pop_errors_are_keras():
    m = keras.Sequential([keras.Input((4,)), L.Dense(2, name="a")])
    with pytest.raises(ValueError, match="Only instances of `keras.Layer` can be added"):
        m.add("dense")
    with pytest.raises(ValueError, match="Name 'a' is already the name of a layer"):
        m.add(L.Dense(3, name="a"))
    with pytest.raises(ValueError, match="unique names"):
        keras.Sequential([L.Dense(1, name="x"), L.Dense(1, name="x")])
    with pytest.raises(ValueError, match="You cannot add a different Input layer"):
        m.add(keras.Input((3,)))
    assert m.pop().name == "a"
    with pytest.raises(TypeError, match="There are no layers in the model."):
        m.pop()


class Block(L.Layer):
    """A residual MLP block: x + down(up(x))."""

    def __init__(self, units, width=4, **kwargs):
        super().__init__(**kwargs)
        self.up = L.Dense(units, activation="relu", name="up")
        self.down = L.Dense(width, name="down")

    def call(self, x):
        return L.Add(name="residual")([x, self.down(self.up(x))])


def flat_model():
    inputs = keras.Input((4,))
    h = L.Dense(8, activation="relu", name="up")(inputs)
    h = L.Add()([inputs, L.Dense(4, name="down")(h)])
    return keras.Model(inputs, L.Dense(1, name="out")(h), name="flat")


def test_a_custom_layer_in_a_sequential_has_keras_paths_and_trains_as_its_layers_flat():
    x, y = data()
    with rules().scope():
        m = keras.Sequential([keras.Input((4,)), Block(8, name="block"), L.Dense(1, name="out")],
                             name="seq")
    assert [(v.path, v.object_path) for v in m.weights][:2] == [
        ("seq/block/up/kernel", "block.up.kernel"), ("seq/block/up/bias", "block.up.bias")]
    assert m.weights[0].layout.axes == (None, "model")
    assert m.weights[2].layout.axes == ("model", None)
    block = m.layers[0]
    assert isinstance(block, L.Layer) and isinstance(block, Block)
    assert not isinstance(block, keras.Model) and isinstance(m, keras.Model)
    assert isinstance(L.Dense(1), L.Layer) and issubclass(L.Dense, L.Layer)
    flat = flat_model()
    flat(x[:1])
    for a, b in zip(flat.weights, m.weights):
        a.assign(b.numpy())
    losses = []
    for model in (m, flat):
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05), loss="mse")
        losses.append(model.fit(x, y, batch_size=4, epochs=2, shuffle=False,
                                verbose=0).history["loss"])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-6)
    assert losses[0][-1] < losses[0][0]


def test_a_custom_layer_in_functional_and_subclassed_models_outlives_its_python_reference():
    x, y = data()
    inputs = keras.Input((4,))
    func = keras.Model(inputs, L.Dense(1, name="out")(Block(8, name="blk")(inputs)))

    class Outer(keras.Model):
        def __init__(self):
            super().__init__()
            self.block = Block(6, name="inner")
            self.out = L.Dense(1, name="out")

        def call(self, x):
            return self.out(self.block(x))

    sub = Outer()
    seq = keras.Sequential([keras.Input((4,)), Block(5, name="b")])
    gc.collect()  # the Block objects have no Python reference left but their models' own
    assert [v.path for v in sub.weights] == []  # not built yet
    for m in (func, sub, seq):
        m.compile(optimizer="adam", loss="mse")
        target = y if m is not seq else np.repeat(y, 4, axis=1)
        h = m.fit(x, target, batch_size=8, epochs=2, verbose=0)
        assert np.all(np.isfinite(h.history["loss"]))
    assert "outer/inner/up/kernel" in [v.path for v in sub.weights]
    assert "blk/up/kernel" in [v.path for v in func.weights]


def test_custom_python_math_is_refused_naming_the_layer():
    class Doubler(L.Layer):
        def call(self, x):
            return x * 2

    class Numpy(L.Layer):
        def call(self, x):
            return np.tanh(x)

    class Weighted(L.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.w = self.add_weight(shape=(4,))

    with pytest.raises(TypeError, match="Layer 'twice' \\(Doubler.call\\): meshlayout cannot "
                                        "differentiate"):
        keras.Sequential([keras.Input((4,)), Doubler(name="twice")])
    with pytest.raises(TypeError, match="Layer 'np_tanh' \\(Numpy.call\\)"):
        keras.Sequential([keras.Input((4,)), Numpy(name="np_tanh")])
    with pytest.raises(NotImplementedError, match="Layer 'weighted' \\(Weighted\\): add_weight"):
        Weighted(name="weighted")
    with pytest.raises(NotImplementedError, match="does not have a `call\\(\\)` method"):
        keras.Sequential([keras.Input((4,)), L.Layer(name="empty")])

    class NoSuper(L.Layer):
        def __init__(self):
            self.d = L.Dense(1)

    with pytest.raises(RuntimeError, match="subclassing `Layer` and you forgot to call"):
        NoSuper()


def test_a_dropped_model_with_custom_layers_frees_its_memory():
    gc.collect()
    before = {d: m["bytes_live"] for d, m in keras.device_memory().items()}
    x, y = data()
    with rules().scope():
        m = keras.Sequential([keras.Input((4,)), Block(8, name="block"), L.Dense(1, name="out")])
    m.compile(optimizer="adam", loss="mse")
    m.fit(x, y, batch_size=4, verbose=0)
    m.add(L.Dense(1, name="extra"))
    assert any(keras.device_memory()[d]["bytes_live"] > before[d] for d in before)
    del m
    gc.collect()
    assert {d: m["bytes_live"] for d, m in keras.device_memory().items()} == before
