"""meshlayout.layers: keras.layers' names, constructor arguments and defaults.

    import meshlayout as keras
    inputs = keras.Input((16,))
    x = keras.layers.Dense(32, activation="relu", name="d1")(inputs)
    outputs = keras.layers.Dense(4, name="d2")(x)
    model = keras.Model(inputs, outputs)              # d1/kernel, d1.kernel (Keras 2 key)

Every layer of the C++ library is here with Keras' argument names and defaults; the Keras 2
DTensor layout arguments (`kernel_layout`, `bias_layout`, …: a TensorLayout) are accepted where
the C++ layer has them. Initializers are Keras' names, optionally with arguments
("random_normal(stddev=0.02)"); activations are names ("relu", "gelu", "tanh", "softmax",
"silu"/"swish", "linear" or None); regularizers are "l1", "l2", "l1_l2" or
meshlayout.regularizers.L1/L2/L1L2 objects. Bad arguments raise Keras' error types (ValueError
for bad values, TypeError for unknown keyword arguments).

Calling a layer: on a KerasTensor (from Input) it builds the functional graph; on a numpy array
or Array it runs the forward pass (the input laid out by the model's distribution or LayoutMap,
else the current one, else over the mesh of the layer's weights) and returns an Array
(np.asarray(y) gathers it); on a list of tensors for the merge layers (Add, Multiply,
Concatenate).

Custom layers: a subclass of Layer whose __init__ assigns layers to attributes and whose
call(inputs) composes them, as in Keras; it works inside Sequential, functional and subclassed
models and trains (the graph of its call). Python math of its own on tensors (arithmetic,
numpy functions) or weights of its own (add_weight) raise an error naming the layer: meshlayout
cannot differentiate them. Not in meshlayout: activity regularizers, constraints, masking.
"""

import numpy as np

from meshlayout import _meshlayout
from meshlayout import regularizers as _regularizers
from meshlayout._training import Layer  # keras.layers.Layer: every layer; subclassable

_nn = _meshlayout._nn
KerasTensor = _nn.KerasTensor

__all__ = [
    "Activation", "Add", "BatchNormalization", "Concatenate", "Conv2D", "Dense", "Dropout",
    "Embedding", "EinsumDense", "Flatten", "GatedFeedForward", "Input", "KerasTensor", "LSTM",
    "Layer", "LayerNormalization", "MultiHeadAttention", "Multiply", "PReLU", "RMSNormalization",
    "Reshape", "ReversibleEmbedding", "SeparableConv2D",
]

_ACTIVATIONS = ("linear", "relu", "gelu", "tanh", "softmax", "silu", "swish")


def Input(shape, batch_size=None, dtype=None, name=None):  # noqa: N802  (Keras' name)
    """keras.Input(shape, batch_size=None): a symbolic KerasTensor of shape (batch, *shape)."""
    if dtype not in (None, "float32"):
        raise ValueError(f"Input: dtype {dtype!r} is not supported; meshlayout inputs are float32")
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    batch_size = _int(batch_size, "batch_size", "Input")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"Input: batch_size must be positive, got {batch_size}")
    return _nn.Input(shape, batch_size)


def _common(cls_name, kwargs):
    """Layer's own keyword arguments (name, dtype, trainable); TypeError for any other."""
    name = kwargs.pop("name", None)
    dtype = kwargs.pop("dtype", None)
    trainable = kwargs.pop("trainable", True)
    if kwargs:
        raise TypeError(f"Unrecognized keyword arguments passed to {cls_name}: {kwargs}")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"{cls_name}: name must be a string, got {name!r}")
    if dtype not in (None, "float32", "float64"):
        raise ValueError(f"{cls_name}: dtype {dtype!r} is not supported (float32 or float64)")
    if trainable is not True:
        raise ValueError(f"{cls_name}: trainable=False at construction is not supported; set "
                         "variable.trainable after the layer is built")
    return {"name": name or ""}


def _positive(cls_name, arg, value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or value <= 0:
        raise ValueError(f"Received an invalid value for `{arg}`, expected a positive integer. "
                         f"Received: {arg}={value}")
    return int(value)


def _int(value, arg, what, allow_none=True):
    """An integer argument (int or numpy integer, not bool); None passes when allowed."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what}: `{arg}` must be an integer, got {value!r} "
                        f"(of type {type(value).__name__})")
    return int(value)


def _float(value, arg, what, allow_none=True):
    """A real-number argument (int, float or numpy number, not bool)."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{what}: `{arg}` must be a number, got {value!r} "
                        f"(of type {type(value).__name__})")
    return float(value)


def _ints(value, arg, what):
    """A sequence of integers (a shape); an int alone is refused as Keras refuses it."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{what}: `{arg}` must be a tuple of integers, got {value!r}")
    return [_int(v, arg, what, allow_none=False) for v in value]


def _activation(value):
    if value is None:
        return "linear"
    if isinstance(value, str) and value in _ACTIVATIONS:
        return value
    raise ValueError(f"Could not interpret activation function identifier: {value}")


def _initializer(value):
    if isinstance(value, str):
        try:
            return _nn._check_initializer(value)
        except ValueError as e:
            raise ValueError(f"Could not interpret initializer identifier: {value} ({e})") \
                from None
    raise ValueError(f"Could not interpret initializer identifier: {value!r} (meshlayout takes "
                     f"initializer names: {', '.join(_nn._initializer_names())})")


def _layout(value, arg):
    if value is None or isinstance(value, _meshlayout.TensorLayout):
        return value
    raise ValueError(f"`{arg}` must be a TensorLayout or None, got {value!r}")


def _options(common, **values):
    out = dict(common)
    for k, v in values.items():
        if v is None:
            continue
        if k.endswith("_initializer"):
            v = _initializer(v)
        elif k.endswith("_regularizer"):
            v = _regularizers._pair(v)
        elif k.endswith("_layout"):
            v = _layout(v, k)
        elif k == "activation":
            v = _activation(v)
        out[k] = v
    return out


def _no_extra(cls_name, **unsupported):
    for k, v in unsupported.items():
        if v is not None:
            raise ValueError(f"{cls_name}: `{k}` is not supported by meshlayout (got {v!r})")


def _pair_arg(value, arg, what="Conv2D"):
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value), int(value))
    value = tuple(_ints(value, arg, what))
    if len(value) != 2:
        raise ValueError(f"The `{arg}` argument must be a tuple of 2 integers. Received: "
                         f"{arg}={value}")
    return value


def _padding(value):
    if value not in ("valid", "same"):
        raise ValueError(f"The `padding` argument must be one of 'valid', 'same'. Received: "
                         f"padding={value}")
    return value


class Dense(_nn.Dense):
    """keras.layers.Dense (kernel (in, units), bias (units,)); kernel_layout/bias_layout as
    Keras 2's DTensor Dense."""

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 lora_rank=None, lora_alpha=None, kernel_layout=None, bias_layout=None, **kwargs):
        _no_extra("Dense", activity_regularizer=activity_regularizer,
                  kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
                  lora_rank=lora_rank, lora_alpha=lora_alpha)  # enable_lora(rank) once built
        units = _positive("Dense", "units", units)
        super().__init__(units, _options(
            _common("Dense", kwargs), activation=activation, use_bias=bool(use_bias),
            kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
            kernel_layout=kernel_layout, bias_layout=bias_layout))


class EinsumDense(_nn.EinsumDense):
    """keras.layers.EinsumDense(equation, output_shape, activation=None, bias_axes=None)."""

    def __init__(self, equation, output_shape, activation=None, bias_axes=None,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_layout=None, bias_layout=None, **kwargs):
        if isinstance(output_shape, (int, np.integer)):
            output_shape = (output_shape,)
        output_shape = [-1 if d is None else _int(d, "output_shape", "EinsumDense")
                        for d in output_shape]
        super().__init__(str(equation), output_shape, _options(
            _common("EinsumDense", kwargs), activation=activation, bias_axes=bias_axes,
            kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
            kernel_layout=kernel_layout, bias_layout=bias_layout))


class Embedding(_nn.Embedding):
    """keras.layers.Embedding(input_dim, output_dim): embeddings (input_dim, output_dim)."""

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform",
                 embeddings_regularizer=None, embeddings_constraint=None, mask_zero=False,
                 embeddings_layout=None, **kwargs):
        _no_extra("Embedding", embeddings_regularizer=embeddings_regularizer,
                  embeddings_constraint=embeddings_constraint)
        if mask_zero:
            raise ValueError("Embedding: mask_zero=True is not supported by meshlayout")
        if embeddings_initializer == "uniform":
            embeddings_initializer = "random_uniform"
        super().__init__(_positive("Embedding", "input_dim", input_dim),
                         _positive("Embedding", "output_dim", output_dim),
                         _options(_common("Embedding", kwargs),
                                  embeddings_initializer=embeddings_initializer,
                                  embeddings_layout=embeddings_layout))


class ReversibleEmbedding(_nn.ReversibleEmbedding):
    """keras_hub.layers.ReversibleEmbedding(input_dim, output_dim, tie_weights=True)."""

    def __init__(self, input_dim, output_dim, tie_weights=True, **kwargs):
        common = _common("ReversibleEmbedding", kwargs)
        super().__init__(_positive("ReversibleEmbedding", "input_dim", input_dim),
                         _positive("ReversibleEmbedding", "output_dim", output_dim),
                         bool(tie_weights),
                         common["name"] or _nn._auto_name("reversible_embedding"))


class GatedFeedForward(_nn.GatedFeedForward):
    """A gated MLP (SwiGLU: gate, up, down), as keras-hub's Llama feed-forward."""

    def __init__(self, intermediate_dim, output_dim, activation="silu",
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(_positive("GatedFeedForward", "intermediate_dim", intermediate_dim),
                         _positive("GatedFeedForward", "output_dim", output_dim),
                         dict(_common("GatedFeedForward", kwargs), activation=activation,
                              kernel_initializer=_initializer(kernel_initializer)))


class Activation(_nn.Activation):
    """keras.layers.Activation(activation): "relu", "gelu", "tanh", "softmax", "silu"/"swish",
    "linear" or None; no weights."""

    def __init__(self, activation, **kwargs):
        super().__init__(_activation(activation), _common("Activation", kwargs)["name"])


class Dropout(_nn.Dropout):
    """keras.layers.Dropout(rate, noise_shape=None, seed=None)."""

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        if isinstance(rate, (bool, np.bool_)) or not isinstance(rate, (int, float, np.number)) \
                or not 0 <= rate <= 1:
            raise ValueError("Invalid value received for argument `rate`. Expected a float "
                             f"value between 0 and 1. Received: rate={rate}")
        _no_extra("Dropout", noise_shape=noise_shape)
        super().__init__(float(rate), _options(_common("Dropout", kwargs),
                                               seed=_int(seed, "seed", "Dropout")))


class Reshape(_nn.Reshape):
    """keras.layers.Reshape(target_shape): (batch, …) → (batch, *target_shape)."""

    def __init__(self, target_shape, **kwargs):
        super().__init__(_ints(target_shape, "target_shape", "Reshape"),
                         _common("Reshape", kwargs))


class Flatten(_nn.Flatten):
    """keras.layers.Flatten(): (batch, …) → (batch, product of the rest)."""

    def __init__(self, data_format=None, **kwargs):
        if data_format not in (None, "channels_last"):
            raise ValueError(f"Flatten: data_format {data_format!r} is not supported")
        super().__init__(_common("Flatten", kwargs))


class Add(_nn.Add):
    """keras.layers.Add(): the sum of a list of inputs."""

    def __init__(self, **kwargs):
        super().__init__(_common("Add", kwargs)["name"])


class Multiply(_nn.Multiply):
    """keras.layers.Multiply(): the product of a list of inputs."""

    def __init__(self, **kwargs):
        super().__init__(_common("Multiply", kwargs)["name"])


class Concatenate(_nn.Concatenate):
    """keras.layers.Concatenate(axis=-1)."""

    def __init__(self, axis=-1, **kwargs):
        super().__init__(_int(axis, "axis", "Concatenate", allow_none=False),
                         _common("Concatenate", kwargs)["name"])


class Conv2D(_nn.Conv2D):
    """keras.layers.Conv2D (NHWC): kernel (kh, kw, in, filters), bias (filters,)."""

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, kernel_layout=None,
                 bias_layout=None, **kwargs):
        if data_format not in (None, "channels_last"):
            raise ValueError(f"Conv2D: data_format {data_format!r} is not supported "
                             "(channels_last only)")
        if _pair_arg(dilation_rate, "dilation_rate") != (1, 1) or groups != 1:
            raise ValueError("Conv2D: dilation_rate and groups other than 1 are not supported")
        _no_extra("Conv2D", activity_regularizer=activity_regularizer,
                  kernel_constraint=kernel_constraint, bias_constraint=bias_constraint)
        super().__init__(_positive("Conv2D", "filters", filters), _options(
            _common("Conv2D", kwargs), kernel_size=_pair_arg(kernel_size, "kernel_size"),
            strides=_pair_arg(strides, "strides"), padding=_padding(padding),
            activation=activation, use_bias=bool(use_bias),
            kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
            kernel_layout=kernel_layout, bias_layout=bias_layout))


class SeparableConv2D(_nn.SeparableConv2D):
    """keras.layers.SeparableConv2D (NHWC): depthwise_kernel, pointwise_kernel, bias."""

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), depth_multiplier=1, activation=None, use_bias=True,
                 depthwise_initializer="glorot_uniform", pointwise_initializer="glorot_uniform",
                 bias_initializer="zeros", depthwise_regularizer=None,
                 pointwise_regularizer=None, bias_regularizer=None,
                 depthwise_kernel_layout=None, pointwise_kernel_layout=None, bias_layout=None,
                 **kwargs):
        if data_format not in (None, "channels_last"):
            raise ValueError(f"SeparableConv2D: data_format {data_format!r} is not supported")
        if _pair_arg(dilation_rate, "dilation_rate", "SeparableConv2D") != (1, 1):
            raise ValueError("SeparableConv2D: dilation_rate other than 1 is not supported")
        super().__init__(_positive("SeparableConv2D", "filters", filters), _options(
            _common("SeparableConv2D", kwargs), kernel_size=_pair_arg(kernel_size, "kernel_size", "SeparableConv2D"),
            strides=_pair_arg(strides, "strides", "SeparableConv2D"), padding=_padding(padding),
            depth_multiplier=_positive("SeparableConv2D", "depth_multiplier", depth_multiplier),
            activation=activation, use_bias=bool(use_bias),
            depthwise_initializer=depthwise_initializer,
            pointwise_initializer=pointwise_initializer, bias_initializer=bias_initializer,
            depthwise_regularizer=depthwise_regularizer,
            pointwise_regularizer=pointwise_regularizer, bias_regularizer=bias_regularizer,
            depthwise_kernel_layout=depthwise_kernel_layout,
            pointwise_kernel_layout=pointwise_kernel_layout, bias_layout=bias_layout))


class PReLU(_nn.PReLU):
    """keras.layers.PReLU(alpha_initializer="Zeros", shared_axes=None)."""

    def __init__(self, alpha_initializer="zeros", alpha_regularizer=None, alpha_constraint=None,
                 shared_axes=None, alpha_layout=None, **kwargs):
        _no_extra("PReLU", alpha_constraint=alpha_constraint)
        if isinstance(alpha_initializer, str) and alpha_initializer == "Zeros":
            alpha_initializer = "zeros"
        if isinstance(shared_axes, (int, np.integer)):
            shared_axes = [shared_axes]
        super().__init__(_options(
            _common("PReLU", kwargs), alpha_initializer=alpha_initializer,
            alpha_regularizer=alpha_regularizer,
            shared_axes=None if shared_axes is None else _ints(shared_axes, "shared_axes",
                                                               "PReLU"),
            alpha_layout=alpha_layout))


class LayerNormalization(_nn.LayerNormalization):
    """keras.layers.LayerNormalization(axis=-1, epsilon=1e-3): gamma, beta."""

    def __init__(self, axis=-1, epsilon=1e-3, center=True, scale=True, beta_initializer="zeros",
                 gamma_initializer="ones", beta_layout=None, gamma_layout=None, **kwargs):
        if axis != -1:
            raise ValueError(f"LayerNormalization: axis={axis!r} is not supported (the last axis)")
        super().__init__(_options(
            _common("LayerNormalization", kwargs),
            epsilon=_float(epsilon, "epsilon", "LayerNormalization", allow_none=False), center=bool(center),
            scale=bool(scale), beta_initializer=beta_initializer,
            gamma_initializer=gamma_initializer, beta_layout=beta_layout,
            gamma_layout=gamma_layout))


class RMSNormalization(_nn.RMSNormalization):
    """keras.layers.RMSNormalization(axis=-1, epsilon=1e-6): scale."""

    def __init__(self, axis=-1, epsilon=1e-6, scale_initializer="ones", scale_layout=None,
                 **kwargs):
        if axis != -1:
            raise ValueError(f"RMSNormalization: axis={axis!r} is not supported (the last axis)")
        super().__init__(_options(_common("RMSNormalization", kwargs),
                                  epsilon=_float(epsilon, "epsilon", "RMSNormalization", False),
                                  scale_initializer=scale_initializer, scale_layout=scale_layout))


class BatchNormalization(_nn.BatchNormalization):
    """keras.layers.BatchNormalization(axis=-1, momentum=0.99, epsilon=1e-3)."""

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                 beta_initializer="zeros", gamma_initializer="ones",
                 moving_mean_initializer="zeros", moving_variance_initializer="ones",
                 beta_layout=None, gamma_layout=None, moving_mean_layout=None,
                 moving_variance_layout=None, **kwargs):
        if axis != -1:
            raise ValueError(f"BatchNormalization: axis={axis!r} is not supported (the last axis)")
        super().__init__(_options(
            _common("BatchNormalization", kwargs),
            momentum=_float(momentum, "momentum", "BatchNormalization", allow_none=False),
            epsilon=_float(epsilon, "epsilon", "BatchNormalization", allow_none=False), center=bool(center), scale=bool(scale),
            beta_initializer=beta_initializer, gamma_initializer=gamma_initializer,
            moving_mean_initializer=moving_mean_initializer,
            moving_variance_initializer=moving_variance_initializer, beta_layout=beta_layout,
            gamma_layout=gamma_layout, moving_mean_layout=moving_mean_layout,
            moving_variance_layout=moving_variance_layout))


class LSTM(_nn.LSTM):
    """keras.layers.LSTM(units): lstm_cell kernel, recurrent_kernel, bias (tanh/sigmoid)."""

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal",
                 bias_initializer="zeros", unit_forget_bias=True, return_sequences=False,
                 **kwargs):
        if activation != "tanh" or recurrent_activation != "sigmoid":
            raise ValueError("LSTM: only activation='tanh' and recurrent_activation='sigmoid' "
                             "are supported")
        super().__init__(_positive("LSTM", "units", units), _options(
            _common("LSTM", kwargs), use_bias=bool(use_bias),
            kernel_initializer=kernel_initializer, recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer, unit_forget_bias=bool(unit_forget_bias),
            return_sequences=bool(return_sequences)))


class MultiHeadAttention(_nn.MultiHeadAttention):
    """keras.layers.MultiHeadAttention(num_heads, key_dim) as self-attention: query, key, value,
    attention_output sub-layers (Keras 3 paths multi_head_attention/query/kernel …). Besides
    Keras' arguments: use_causal_mask (fixed at construction), num_key_value_heads (grouped
    query attention), rope_theta (rotary embedding)."""

    def __init__(self, num_heads, key_dim, value_dim=None, dropout=0.0, use_bias=True,
                 output_shape=None, kernel_initializer="glorot_uniform", use_causal_mask=False,
                 num_key_value_heads=None, rope_theta=None, **kwargs):
        if value_dim not in (None, key_dim) or output_shape is not None or dropout:
            raise ValueError("MultiHeadAttention: value_dim, output_shape and dropout are not "
                             "supported by meshlayout")
        super().__init__(_positive("MultiHeadAttention", "num_heads", num_heads),
                         _positive("MultiHeadAttention", "key_dim", key_dim), _options(
                             _common("MultiHeadAttention", kwargs), use_bias=bool(use_bias),
                             kernel_initializer=kernel_initializer,
                             use_causal_mask=bool(use_causal_mask),
                             num_key_value_heads=_int(num_key_value_heads, "num_key_value_heads",
                                                      "MultiHeadAttention"),
                             rope_theta=_float(rope_theta, "rope_theta", "MultiHeadAttention")))
