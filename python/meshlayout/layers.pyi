# Type stubs of meshlayout.layers (python/tests/test_stubs.py checks them against the
# module; keras.layers): every layer with Keras' constructor arguments.
from typing import Any, Optional, Sequence, Union

from meshlayout import TensorLayout, Variable

__all__ = [
    "Activation",
    "Add",
    "BatchNormalization",
    "Concatenate",
    "Conv2D",
    "Dense",
    "Dropout",
    "Embedding",
    "EinsumDense",
    "Flatten",
    "GatedFeedForward",
    "Input",
    "KerasTensor",
    "LSTM",
    "Layer",
    "LayerNormalization",
    "MultiHeadAttention",
    "Multiply",
    "PReLU",
    "RMSNormalization",
    "Reshape",
    "ReversibleEmbedding",
    "SeparableConv2D",
]

class Activation(Layer):
    def __init__(self, activation: Optional[str], **kwargs: Any) -> None: ...

class Add(Layer):
    def __init__(self, **kwargs: Any) -> None: ...

class BatchNormalization(Layer):
    def __init__(self, axis: int = ..., momentum: float = ..., epsilon: float = ...,
                 center: bool = ..., scale: bool = ..., beta_initializer: Any = ...,
                 gamma_initializer: Any = ..., moving_mean_initializer: Any = ...,
                 moving_variance_initializer: Any = ..., beta_layout: Any = ...,
                 gamma_layout: Any = ..., moving_mean_layout: Any = ...,
                 moving_variance_layout: Any = ..., **kwargs: Any) -> None: ...

class Concatenate(Layer):
    def __init__(self, axis: int = ..., **kwargs: Any) -> None: ...
    @property
    def axis(self) -> Any: ...

class Conv2D(Layer):
    def __init__(self, filters: int, kernel_size: Union[int, Sequence[int]], strides: Union[int,
                 Sequence[int]] = ..., padding: str = ..., data_format: Any = ...,
                 dilation_rate: Any = ..., groups: Any = ..., activation: Optional[str] = ...,
                 use_bias: bool = ..., kernel_initializer: str = ..., bias_initializer: str = ...,
                 kernel_regularizer: Any = ..., bias_regularizer: Any = ...,
                 activity_regularizer: Any = ..., kernel_constraint: Any = ...,
                 bias_constraint: Any = ..., kernel_layout: Optional[TensorLayout] = ...,
                 bias_layout: Optional[TensorLayout] = ..., **kwargs: Any) -> None: ...

class Dense(Layer):
    def __init__(self, units: int, activation: Optional[str] = ..., use_bias: bool = ...,
                 kernel_initializer: str = ..., bias_initializer: str = ...,
                 kernel_regularizer: Any = ..., bias_regularizer: Any = ...,
                 activity_regularizer: Any = ..., kernel_constraint: Any = ...,
                 bias_constraint: Any = ..., lora_rank: Any = ..., lora_alpha: Any = ...,
                 kernel_layout: Optional[TensorLayout] = ...,
                 bias_layout: Optional[TensorLayout] = ..., **kwargs: Any) -> None: ...
    @property
    def units(self) -> Any: ...

class Dropout(Layer):
    def __init__(self, rate: float, noise_shape: Any = ..., seed: Optional[int] = ...,
                 **kwargs: Any) -> None: ...

class EinsumDense(Layer):
    def __init__(self, equation: str, output_shape: Any, activation: Optional[str] = ...,
                 bias_axes: Any = ..., kernel_initializer: str = ..., bias_initializer: str = ...,
                 kernel_layout: Optional[TensorLayout] = ...,
                 bias_layout: Optional[TensorLayout] = ..., **kwargs: Any) -> None: ...

class Embedding(Layer):
    def __init__(self, input_dim: int, output_dim: int, embeddings_initializer: Any = ...,
                 embeddings_regularizer: Any = ..., embeddings_constraint: Any = ...,
                 mask_zero: Any = ..., embeddings_layout: Any = ..., **kwargs: Any) -> None: ...

class Flatten(Layer):
    def __init__(self, data_format: Any = ..., **kwargs: Any) -> None: ...

class GatedFeedForward(Layer):
    def __init__(self, intermediate_dim: int, output_dim: int, activation: Optional[str] = ...,
                 kernel_initializer: str = ..., **kwargs: Any) -> None: ...

def Input(shape: Union[int, Sequence[Optional[int]]], batch_size: Optional[int] = ...,
          dtype: Any = ..., name: Optional[str] = ...) -> Any: ...

class KerasTensor:
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def ndim(self) -> int: ...
    @property
    def symbolic(self) -> bool: ...
    @property
    def value(self) -> Any: ...

class LSTM(Layer):
    def __init__(self, units: int, activation: Optional[str] = ...,
                 recurrent_activation: Any = ..., use_bias: bool = ...,
                 kernel_initializer: str = ..., recurrent_initializer: Any = ...,
                 bias_initializer: str = ..., unit_forget_bias: Any = ...,
                 return_sequences: bool = ..., **kwargs: Any) -> None: ...

class Layer:
    @property
    def name(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def built(self) -> bool: ...
    @property
    def dtype(self) -> str: ...
    @property
    def weights(self) -> list[Variable]: ...
    @property
    def variables(self) -> list[Variable]: ...
    @property
    def trainable_weights(self) -> list[Variable]: ...
    @property
    def non_trainable_weights(self) -> list[Variable]: ...
    @property
    def losses(self) -> list[float]: ...
    def __call__(self, inputs: Any, training: Optional[bool] = ...) -> Any: ...
    def build(self, input_shape: Sequence[Optional[int]]) -> None: ...
    def compute_output_shape(self, input_shape: Sequence[Optional[int]]) -> tuple[int, ...]: ...
    def enable_lora(self, rank: int, lora_alpha: Optional[float] = ...) -> None: ...
    def __getattr__(self, name: str) -> Any: ...
    # A subclass (a custom layer): __init__ assigns layers to attributes, call composes them.
    def __init__(self, name: Optional[str] = ..., **kwargs: Any) -> None: ...
    def call(self, inputs: Any) -> Any: ...
    def add_weight(self, *args: Any, **kwargs: Any) -> Any: ...

class LayerNormalization(Layer):
    def __init__(self, axis: int = ..., epsilon: float = ..., center: bool = ...,
                 scale: bool = ..., beta_initializer: Any = ..., gamma_initializer: Any = ...,
                 beta_layout: Any = ..., gamma_layout: Any = ..., **kwargs: Any) -> None: ...

class MultiHeadAttention(Layer):
    def __init__(self, num_heads: int, key_dim: int, value_dim: Any = ..., dropout: Any = ...,
                 use_bias: bool = ..., output_shape: Any = ..., kernel_initializer: str = ...,
                 use_causal_mask: bool = ..., num_key_value_heads: Optional[int] = ...,
                 rope_theta: Optional[float] = ..., **kwargs: Any) -> None: ...

class Multiply(Layer):
    def __init__(self, **kwargs: Any) -> None: ...

class PReLU(Layer):
    def __init__(self, alpha_initializer: Any = ..., alpha_regularizer: Any = ...,
                 alpha_constraint: Any = ..., shared_axes: Any = ..., alpha_layout: Any = ...,
                 **kwargs: Any) -> None: ...

class RMSNormalization(Layer):
    def __init__(self, axis: int = ..., epsilon: float = ..., scale_initializer: Any = ...,
                 scale_layout: Any = ..., **kwargs: Any) -> None: ...

class Reshape(Layer):
    def __init__(self, target_shape: Sequence[int], **kwargs: Any) -> None: ...

class ReversibleEmbedding(Layer):
    def __init__(self, input_dim: int, output_dim: int, tie_weights: bool = ..., **kwargs: Any) -> None: ...
    @property
    def tie_weights(self) -> Any: ...

class SeparableConv2D(Layer):
    def __init__(self, filters: int, kernel_size: Union[int, Sequence[int]], strides: Union[int,
                 Sequence[int]] = ..., padding: str = ..., data_format: Any = ...,
                 dilation_rate: Any = ..., depth_multiplier: int = ...,
                 activation: Optional[str] = ..., use_bias: bool = ...,
                 depthwise_initializer: Any = ..., pointwise_initializer: Any = ...,
                 bias_initializer: str = ..., depthwise_regularizer: Any = ...,
                 pointwise_regularizer: Any = ..., bias_regularizer: Any = ...,
                 depthwise_kernel_layout: Any = ..., pointwise_kernel_layout: Any = ...,
                 bias_layout: Optional[TensorLayout] = ..., **kwargs: Any) -> None: ...
