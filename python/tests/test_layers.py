# meshlayout.layers from Python (issue 29): every layer the C++ library has, with Keras'
# constructor arguments and defaults, called on numpy arrays, KerasTensors and lists of them;
# Keras' weight names and shapes; Keras' error types and messages for bad arguments.
import numpy as np
import pytest

import meshlayout as keras
from meshlayout import layers as L


@pytest.fixture(autouse=True)
def fresh_session():
    keras.clear_session()  # automatic names start again at dense, dense_1, …
    yield


def x_of(*shape, seed=0):
    return np.random.RandomState(seed).randn(*shape).astype(np.float32)


# (layer factory, input shape, output shape, {weight path: shape}) — Keras 3 paths of a layer
# built at top level (keras-semantics.md §C.1).
CASES = [
    (lambda: L.Dense(4), (2, 3), (2, 4), {"dense/kernel": (3, 4), "dense/bias": (4,)}),
    (lambda: L.Dense(4, use_bias=False, activation="relu"), (2, 3), (2, 4),
     {"dense/kernel": (3, 4)}),
    (lambda: L.EinsumDense("ab,bc->ac", (5,), bias_axes="c"), (2, 3), (2, 5),
     {"einsum_dense/kernel": (3, 5), "einsum_dense/bias": (5,)}),
    (lambda: L.Conv2D(4, 3), (1, 5, 5, 2), (1, 3, 3, 4),
     {"conv2d/kernel": (3, 3, 2, 4), "conv2d/bias": (4,)}),
    (lambda: L.Conv2D(4, (3, 3), padding="same", strides=2), (1, 6, 6, 2), (1, 3, 3, 4),
     {"conv2d/kernel": (3, 3, 2, 4), "conv2d/bias": (4,)}),
    (lambda: L.SeparableConv2D(4, 3), (1, 5, 5, 2), (1, 3, 3, 4),
     {"separable_conv2d/depthwise_kernel": (3, 3, 2, 1),
      "separable_conv2d/pointwise_kernel": (1, 1, 2, 4), "separable_conv2d/bias": (4,)}),
    (lambda: L.LayerNormalization(), (2, 3), (2, 3),
     {"layer_normalization/gamma": (3,), "layer_normalization/beta": (3,)}),
    (lambda: L.RMSNormalization(), (2, 3), (2, 3), {"rms_normalization/scale": (3,)}),
    (lambda: L.BatchNormalization(), (2, 3), (2, 3),
     {"batch_normalization/gamma": (3,), "batch_normalization/beta": (3,),
      "batch_normalization/moving_mean": (3,), "batch_normalization/moving_variance": (3,)}),
    (lambda: L.PReLU(), (2, 3), (2, 3), {"p_re_lu/alpha": (3,)}),
    (lambda: L.LSTM(4), (2, 5, 3), (2, 4),
     {"lstm/lstm_cell/kernel": (3, 16), "lstm/lstm_cell/recurrent_kernel": (4, 16),
      "lstm/lstm_cell/bias": (16,)}),
    (lambda: L.LSTM(4, return_sequences=True), (2, 5, 3), (2, 5, 4),
     {"lstm/lstm_cell/kernel": (3, 16), "lstm/lstm_cell/recurrent_kernel": (4, 16),
      "lstm/lstm_cell/bias": (16,)}),
    (lambda: L.MultiHeadAttention(2, 4), (2, 5, 8), (2, 5, 8),
     {"multi_head_attention/query/kernel": (8, 2, 4), "multi_head_attention/query/bias": (2, 4),
      "multi_head_attention/key/kernel": (8, 2, 4), "multi_head_attention/key/bias": (2, 4),
      "multi_head_attention/value/kernel": (8, 2, 4), "multi_head_attention/value/bias": (2, 4),
      "multi_head_attention/attention_output/kernel": (2, 4, 8),
      "multi_head_attention/attention_output/bias": (8,)}),
    (lambda: L.GatedFeedForward(6, 3), (2, 3), (2, 3),
     {"gated_feed_forward/gate/kernel": (3, 6), "gated_feed_forward/up/kernel": (3, 6),
      "gated_feed_forward/down/kernel": (6, 3)}),
    (lambda: L.Dropout(0.5), (2, 3), (2, 3), {}),
    (lambda: L.Activation("relu"), (2, 3), (2, 3), {}),
    (lambda: L.Reshape((3, 2)), (2, 6), (2, 3, 2), {}),
    (lambda: L.Flatten(), (2, 3, 2), (2, 6), {}),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_every_layer_builds_and_runs_with_keras_paths(case):
    make, in_shape, out_shape, weights = CASES[case]
    layer = make()
    x = x_of(*in_shape)
    y = np.asarray(layer(x))
    assert y.shape == out_shape and np.all(np.isfinite(y))
    assert {v.path: v.shape for v in layer.weights} == weights
    assert layer.built
    assert layer.compute_output_shape(in_shape) == out_shape


def test_embedding_and_reversible_embedding():
    e = L.Embedding(10, 4)
    y = np.asarray(e(np.array([[1, 2], [3, 9]], np.int32)))
    assert y.shape == (2, 2, 4)
    np.testing.assert_array_equal(y[0, 0], e.embeddings.value[1])
    assert e.embeddings.path == "embedding/embeddings"
    r = L.ReversibleEmbedding(10, 4, tie_weights=False)
    r(np.array([[1, 2]], np.int32))
    assert [v.path for v in r.weights] == ["reversible_embedding/embeddings",
                                           "reversible_embedding/reverse_embeddings"]


def test_dense_computes_x_at_kernel_plus_bias():
    d = L.Dense(3, activation="relu", bias_initializer="ones")
    x = x_of(4, 5)
    y = np.asarray(d(x))
    np.testing.assert_allclose(y, np.maximum(x @ d.kernel.value + 1, 0), rtol=1e-5, atol=1e-6)
    assert d.units == 3 and d.name == "dense"
    assert L.Dense(3).name == "dense_1"  # Keras' automatic names
    assert L.Dense(3, name="mine").name == "mine"


def test_activation_layer():
    x = x_of(3, 4)
    a = L.Activation("tanh")
    assert a.name == "activation"
    np.testing.assert_allclose(np.asarray(a(x)), np.tanh(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(L.Activation(None)(x)), x)
    with pytest.raises(ValueError, match="Could not interpret activation function identifier"):
        L.Activation("nope")
    # trains inside a model (its backward is C++'s)
    m = keras.Sequential([keras.Input((4,)), L.Dense(3), L.Activation("silu"), L.Dense(1)])
    m.compile(optimizer="sgd", loss="mse")
    h = m.fit(x, x[:, :1], batch_size=3, epochs=2, verbose=0)
    assert np.all(np.isfinite(h.history["loss"]))


def test_merge_layers_take_lists():
    a, b = x_of(2, 3), x_of(2, 3, seed=1)
    np.testing.assert_allclose(np.asarray(L.Add()([a, b])), a + b, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(L.Multiply()([a, b])), a * b, rtol=1e-6)
    assert np.asarray(L.Concatenate()([a, b])).shape == (2, 6)
    assert np.asarray(L.Concatenate(axis=0)([a, b])).shape == (4, 3)
    i1, i2 = keras.Input((3,)), keras.Input((3,))
    assert L.Add()([i1, i2]).shape == (1, 3)


def test_dropout_follows_training():
    d = L.Dropout(0.5, seed=3)
    x = np.ones((4, 64), np.float32)
    np.testing.assert_array_equal(np.asarray(d(x)), x)          # inference: identity
    y = np.asarray(d(x, training=True))
    assert set(np.unique(y)) <= {0.0, 2.0} and 0 < (y == 0).sum() < y.size
    np.testing.assert_array_equal(np.asarray(d(x)), x)          # back to inference


def test_attributes_weights_and_sublayers_by_name():
    mha = L.MultiHeadAttention(2, 4)
    mha(x_of(1, 3, 8))
    # Keras' attribute names (Keras 2 object paths mha._query_dense.kernel)
    assert mha._query_dense.kernel.path == "multi_head_attention/query/kernel"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        mha.nope  # noqa: B018
    d = L.Dense(2)
    d(x_of(1, 3))
    assert [v.name for v in d.trainable_weights] == ["kernel", "bias"]
    assert d.non_trainable_weights == []
    d.kernel.trainable = False
    assert [v.name for v in d.trainable_weights] == ["bias"]


def test_variable_value_assign_and_repr():
    d = L.Dense(2)
    d.build((None, 3))
    v = d.kernel
    assert v.shape == (3, 2) and v.dtype == "float32" and not v.is_lazy
    new = np.arange(6, dtype=np.float32).reshape(3, 2)
    v.assign(new)
    np.testing.assert_array_equal(v.value, new)
    np.testing.assert_array_equal(np.asarray(v), new)
    assert "path=dense/kernel" in repr(v)
    with pytest.raises(ValueError):
        v.assign(np.zeros((2, 2), np.float32))


def test_lora_on_dense():
    d = L.Dense(4)
    d(x_of(2, 3))
    d.enable_lora(2)
    assert "dense/lora_kernel_a" in [v.path for v in d.weights]
    assert not d.kernel.trainable
    with pytest.raises(ValueError, match="no LoRA"):
        L.LayerNormalization().enable_lora(2)


def test_regularizers_add_losses():
    d = L.Dense(2, kernel_regularizer=keras.regularizers.L2(0.5), kernel_initializer="ones")
    d.build((None, 3))
    assert d.losses == pytest.approx([0.5 * 6])
    d2 = L.Dense(2, kernel_regularizer="l1", kernel_initializer="ones")
    d2.build((None, 3))
    assert d2.losses == pytest.approx([0.01 * 6])


def test_initializer_strings():
    d = L.Dense(2, kernel_initializer="random_normal(stddev=0.5, seed=1)")
    d.build((None, 300))
    assert 0.4 < float(np.std(d.kernel.value)) < 0.6
    assert np.all(np.asarray(L.Dense(2, kernel_initializer="zeros")(x_of(1, 2))) == 0)


# Keras' error types and wording for bad constructor arguments (not pybind11's TypeError).
@pytest.mark.parametrize("make, error, match", [
    (lambda: L.Dense(0), ValueError, "expected a positive integer. Received: units=0"),
    (lambda: L.Dense(-3), ValueError, "Received: units=-3"),
    (lambda: L.Dense("4"), ValueError, "units"),
    (lambda: L.Dense(4, foo=1), TypeError, "Unrecognized keyword arguments passed to Dense"),
    (lambda: L.Dense(4, activation="nope"), ValueError,
     "Could not interpret activation function identifier: nope"),
    (lambda: L.Dense(4, kernel_initializer="nope"), ValueError,
     "Could not interpret initializer identifier: nope"),
    (lambda: L.Dense(4, kernel_regularizer="l3"), ValueError,
     "Could not interpret regularizer identifier: l3"),
    (lambda: L.Dense(4, kernel_layout=(None, "model")), ValueError, "TensorLayout"),
    (lambda: L.Dense(4, name="a/b"), ValueError, "/"),
    (lambda: L.Dropout(1.5), ValueError, "Expected a float value between 0 and 1"),
    (lambda: L.Conv2D(4, 3, padding="full"), ValueError, "padding"),
    (lambda: L.Conv2D(4, (3, 3, 3)), ValueError, "kernel_size"),
    (lambda: L.Embedding(0, 4), ValueError, "input_dim"),
    (lambda: L.LSTM(4, activation="relu"), ValueError, "tanh"),
    (lambda: keras.regularizers.L2(-1.0), ValueError, "l2"),
    # wrong types: TypeError naming the argument (never pybind11's "incompatible arguments")
    (lambda: L.Dropout(0.5, seed="x"), TypeError, "Dropout: `seed` must be an integer"),
    (lambda: L.MultiHeadAttention(2, 4, num_key_value_heads="x"), TypeError,
     "num_key_value_heads"),
    (lambda: L.LayerNormalization(epsilon="x"), TypeError, "`epsilon` must be a number"),
    (lambda: L.PReLU(shared_axes="x"), TypeError, "shared_axes"),
    (lambda: L.Reshape(3), TypeError, "Reshape: `target_shape` must be a tuple of integers"),
    (lambda: L.Conv2D(2, "x"), TypeError, "Conv2D: `kernel_size`"),
    (lambda: L.Concatenate(axis="x"), TypeError, "axis"),
    (lambda: keras.Input((3,), batch_size="x"), TypeError, "batch_size"),
    (lambda: keras.Input("abc"), TypeError, "Input shape must be a tuple of integers"),
    (lambda: L.Dense(2).build("x"), TypeError, "input_shape must be a tuple of integers"),
    (lambda: L.Dense(2).enable_lora("x"), TypeError, "rank must be an integer"),
    (lambda: keras.optimizers.Adam(learning_rate="x"), TypeError,
     "learning_rate must be a number"),
    (lambda: keras.optimizers.SGD(nesterov=1), TypeError, "nesterov must be a bool"),
])
def test_bad_arguments_raise_keras_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_bad_inputs_name_the_problem():
    d = L.Dense(2)
    with pytest.raises(ValueError, match="0-d"):
        d(np.float32(3.0))
    with pytest.raises(TypeError, match="expects a KerasTensor, a numpy array"):
        d("text")
    with pytest.raises(ValueError, match="dtype"):
        d(np.array([["a", "b"]]))
    d(x_of(2, 3))
    with pytest.raises(ValueError):
        d(x_of(2, 5))  # the kernel is (3, 2)
    with pytest.raises(ValueError, match="None is only allowed for the batch"):
        keras.Input((None, 3))


def test_custom_python_layers_subclass_layer():
    # Custom layers composing built-in ones (test_custom_layers.py covers them in models).
    class MyLayer(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2, name="inner")

        def call(self, x):
            return self.dense(x)

    layer = MyLayer()
    assert layer.name == "my_layer" and isinstance(layer, keras.layers.Layer)
    assert np.asarray(layer(np.ones((3, 4), np.float32))).shape == (3, 2)