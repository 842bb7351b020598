# meshlayout.Model / Sequential / Input from Python (issue 29): the three model styles give
# Keras' variable paths — Keras 3 `variable.path` (ModelParallel's key) and Keras 2 object paths
# (LayoutMap.scope()'s key) — as tabulated in reference/keras-semantics.md §C.1 and §C.2 (each
# row a case below), and the layouts the rules give them.
import numpy as np
import pytest

import meshlayout as keras
from meshlayout import distribution as dist
from meshlayout import layers as L


@pytest.fixture(autouse=True)
def fresh_session():
    keras.clear_session()
    yield
    dist.set_distribution(None)


def x_of(*shape, seed=0):
    return np.random.RandomState(seed).randn(*shape).astype(np.float32)


def paths(model):
    return [v.path for v in model.weights]


def object_paths(model):
    return [v.object_path for v in model.weights]


class MyModel(keras.Model):
    def __init__(self, named=True, **kwargs):
        super().__init__(**kwargs)
        self.d1 = L.Dense(4, name="d1") if named else L.Dense(4)
        self.d2 = L.Dense(2, name="d2") if named else L.Dense(2)

    def call(self, x):
        return self.d2(self.d1(x))


def mesh_rules(keys):
    mesh = keras.DeviceMesh((2, 4), ["batch", "model"])
    rules = keras.LayoutMap(mesh)
    for k in keys:
        rules[k] = (None, "model")
    return mesh, rules


# --- §C.1: Keras 3 paths -------------------------------------------------------------------

def test_standalone_dense_at_top_level():
    d = L.Dense(4)
    d.build((None, 3))
    assert paths(d) == ["dense/kernel", "dense/bias"]


def test_subclassed_named_layers():
    m = MyModel()
    m(x_of(2, 3))
    assert m.name == "my_model"
    assert paths(m) == ["my_model/d1/kernel", "my_model/d1/bias", "my_model/d2/kernel",
                        "my_model/d2/bias"]
    assert isinstance(m, keras.Model) and isinstance(m, MyModel)
    assert [layer.name for layer in m.layers] == ["d1", "d2"]


def test_subclassed_unnamed_layers():
    m = MyModel(named=False)
    m(x_of(2, 3))
    assert paths(m) == ["my_model/dense/kernel", "my_model/dense/bias",
                        "my_model/dense_1/kernel", "my_model/dense_1/bias"]


def test_model_names_count_per_class():
    assert MyModel().name == "my_model"
    assert MyModel().name == "my_model_1"
    assert MyModel(name="custom").name == "custom"


def test_functional_paths_omit_the_model_name():
    inputs = keras.Input((3,))
    x = L.Dense(4, name="d1")(inputs)
    outputs = L.Dense(2, name="d2")(x)
    m = keras.Model(inputs, outputs)
    assert isinstance(m, keras.Model)
    assert paths(m) == ["d1/kernel", "d1/bias", "d2/kernel", "d2/bias"]
    assert [layer.name for layer in m.layers] == ["input_layer", "d1", "d2"]
    m2 = keras.Model(inputs=inputs, outputs=outputs, name="named")
    assert m2.name == "named"


def test_functional_test_name_first_dense():
    inputs = keras.Input((3,), batch_size=4)
    m = keras.Model(inputs, L.Dense(2, name="first_dense")(inputs))
    assert paths(m)[0] == "first_dense/kernel"


def test_sequential_paths():
    s = keras.Sequential([keras.Input((3,)), L.Dense(4, name="d1"), L.Dense(2, name="d2")],
                         name="sequential")
    assert paths(s) == ["sequential/d1/kernel", "sequential/d1/bias", "sequential/d2/kernel",
                        "sequential/d2/bias"]
    assert isinstance(s, keras.Model) and isinstance(s, keras.Sequential)


def test_sequential_built_on_first_call_and_auto_names():
    s = keras.Sequential([L.Dense(4), L.Dense(2)])
    assert not s.built
    s(x_of(2, 3))
    assert paths(s) == ["sequential/dense/kernel", "sequential/dense/bias",
                        "sequential/dense_1/kernel", "sequential/dense_1/bias"]


class InnerBlock(keras.Model):
    def __init__(self):
        super().__init__(name="inner_block")
        self.dense = L.Dense(4, name="d1")

    def call(self, x):
        return self.dense(x)


class OuterModel(keras.Model):
    def __init__(self):
        super().__init__(name="outer_model")
        self.block = InnerBlock()

    def call(self, x):
        return self.block(x)


def test_nested_subclassed():
    m = OuterModel()
    m(x_of(2, 3))
    assert paths(m) == ["outer_model/inner_block/d1/kernel", "outer_model/inner_block/d1/bias"]


def test_subclassed_multi_head_attention():
    class AttnModel(keras.Model):
        def __init__(self):
            super().__init__(name="my_model")
            self.mha = L.MultiHeadAttention(2, 4)

        def call(self, x):
            return self.mha(x)

    m = AttnModel()
    m(x_of(1, 3, 8))
    assert "my_model/multi_head_attention/query/kernel" in paths(m)


# --- §C.2: Keras 2 object paths (LayoutMap.scope() keys) ---------------------------------------

def test_object_paths_of_the_three_styles_under_a_scope():
    mesh, rules = mesh_rules(["d1.kernel"])
    with rules.scope():
        sub = MyModel()
        inputs = keras.Input((3,))
        func = keras.Model(inputs, L.Dense(2, name="d2")(L.Dense(4, name="d1")(inputs)))
        seq = keras.Sequential([keras.Input((3,)), L.Dense(4, name="d1"), L.Dense(2, name="d2")])
    sub(x_of(2, 3))
    for m in (sub, func, seq):
        assert object_paths(m) == ["d1.kernel", "d1.bias", "d2.kernel", "d2.bias"], m.name
        kernel = m.weights[0]
        assert kernel.layout.axes == (None, "model") and kernel.layout.device_mesh == mesh
        assert m.weights[2].layout.axes == (None, None)  # unmatched: replicated


def test_object_paths_nested_and_lists():
    class Blocks(keras.Model):
        def __init__(self):
            super().__init__()
            self.blocks = [L.Dense(3), L.Dense(3)]

        def call(self, x):
            for b in self.blocks:
                x = b(x)
            return x

    mesh, rules = mesh_rules(["blocks.1.kernel", "block.dense.kernel"])
    with rules.scope():
        b = Blocks()
        o = OuterModel()
    b(x_of(2, 3))
    o(x_of(2, 3))
    assert object_paths(b) == ["blocks.0.kernel", "blocks.0.bias", "blocks.1.kernel",
                               "blocks.1.bias"]
    assert b.weights[2].layout.axes == (None, "model")
    assert object_paths(o)[0] == "block.dense.kernel"
    assert o.weights[0].layout.axes == (None, "model")


def test_functional_conv2d_and_mha_object_paths():
    mesh, rules = mesh_rules([])
    with rules.scope():  # object paths are final (and used) under a LayoutMap scope
        inputs = keras.Input((5, 5, 2))
        conv = keras.Model(inputs, L.Conv2D(4, 3)(inputs))
        inputs = keras.Input((3, 8))
        mha = keras.Model(inputs, L.MultiHeadAttention(2, 4)(inputs))
    assert object_paths(conv) == ["conv2d.kernel", "conv2d.bias"]
    assert "multi_head_attention._query_dense.kernel" in object_paths(mha)


# --- Keras 3 distributions ----------------------------------------------------------------------

def test_model_parallel_keys_are_keras3_paths():
    mesh = keras.DeviceMesh((2, 4), ["batch", "model"])
    layout_map = keras.LayoutMap(mesh)
    layout_map["my_model/d1/kernel"] = (None, "model")
    layout_map["sequential/d2/kernel"] = ("model", None)
    with dist.ModelParallel(layout_map=layout_map).scope():
        m = MyModel()
        s = keras.Sequential([keras.Input((3,)), L.Dense(4, name="d1"), L.Dense(2, name="d2")])
    m(x_of(2, 3))
    assert m.d1.kernel.layout.axes == (None, "model")
    assert m.d2.kernel.layout.axes == (None, None)
    assert s.weights[2].layout.axes == ("model", None)


def test_data_parallel_replicates_weights():
    with dist.DataParallel().scope():
        m = MyModel()
        m(x_of(8, 3))
    assert all(v.layout.axes == (None,) * len(v.shape) for v in m.weights)
    assert m.d1.kernel.layout.device_mesh.shape == (8,)


def test_sharded_and_replicated_runs_agree():
    x = x_of(8, 3)
    plain = MyModel()
    y_plain = np.asarray(plain(x))
    keras.clear_session()
    mesh, rules = mesh_rules(["d1.kernel", "d2.kernel"])
    with rules.scope():
        sharded = MyModel()
    np.testing.assert_allclose(np.asarray(sharded(x)), y_plain, rtol=1e-5, atol=1e-6)


# --- errors ---------------------------------------------------------------------------------

def test_model_errors():
    class NoSuper(keras.Model):
        def __init__(self):
            self.d = L.Dense(2)

    with pytest.raises(RuntimeError, match="forgot to call `super\\(\\).__init__\\(\\)`"):
        NoSuper()

    class NoCall(keras.Model):
        pass

    with pytest.raises(NotImplementedError, match="does not have a `call\\(\\)` method"):
        NoCall()(x_of(2, 3))
    with pytest.raises(TypeError, match="Unrecognized keyword arguments passed to MyModel"):
        MyModel(foo=1)
    with pytest.raises(ValueError, match="Only instances of `keras.Layer`"):
        keras.Sequential([L.Dense(2), "dense"])
    with pytest.raises(TypeError, match="must be a KerasTensor"):
        keras.Model([np.zeros(3)], L.Dense(2)(keras.Input((3,))))
    other = keras.Input((3,))
    with pytest.raises(ValueError, match="depend on another input"):
        keras.Model(keras.Input((3,)), L.Dense(2)(other))


def test_keras_models_module_names():
    # keras.models.Model / keras.models.Sequential, as Keras scripts spell them
    s = keras.models.Sequential([keras.Input((3,)), L.Dense(2)])
    assert isinstance(s, keras.models.Model) and keras.models.Model is keras.Model
