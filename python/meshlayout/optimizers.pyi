# Type stubs of meshlayout.optimizers (python/tests/test_stubs.py checks them against the
# module; keras.optimizers): the C++ optimizers by Keras' names.
from typing import Any, Optional, Sequence, Union

from meshlayout import Variable

__all__ = [
    "Adafactor",
    "Adagrad",
    "Adam",
    "AdamW",
    "Lion",
    "Optimizer",
    "RMSprop",
    "SGD",
    "get",
]

class Adafactor(Optimizer):
    def __init__(self, learning_rate: float = ..., name: Optional[str] = ..., **kwargs: Any) -> None: ...

class Adagrad(Optimizer):
    def __init__(self, learning_rate: float = ..., initial_accumulator_value: float = ...,
                 epsilon: float = ..., weight_decay: Optional[float] = ...,
                 clipnorm: Optional[float] = ..., clipvalue: Optional[float] = ...,
                 global_clipnorm: Optional[float] = ..., name: Optional[str] = ..., **kwargs: Any) -> None: ...

class Adam(Optimizer):
    def __init__(self, learning_rate: float = ..., beta_1: float = ..., beta_2: float = ...,
                 epsilon: float = ..., amsgrad: bool = ..., weight_decay: Optional[float] = ...,
                 clipnorm: Optional[float] = ..., clipvalue: Optional[float] = ...,
                 global_clipnorm: Optional[float] = ..., name: Optional[str] = ..., **kwargs: Any) -> None: ...

class AdamW(Optimizer):
    def __init__(self, learning_rate: float = ..., weight_decay: Optional[float] = ...,
                 beta_1: float = ..., beta_2: float = ..., epsilon: float = ...,
                 amsgrad: bool = ..., clipnorm: Optional[float] = ...,
                 clipvalue: Optional[float] = ..., global_clipnorm: Optional[float] = ...,
                 name: Optional[str] = ..., **kwargs: Any) -> None: ...

class Lion(Optimizer):
    def __init__(self, learning_rate: float = ..., beta_1: float = ..., beta_2: float = ...,
                 weight_decay: Optional[float] = ..., clipnorm: Optional[float] = ...,
                 clipvalue: Optional[float] = ..., global_clipnorm: Optional[float] = ...,
                 name: Optional[str] = ..., **kwargs: Any) -> None: ...

class Optimizer:
    def __init__(self, **kwargs: Any) -> None: ...
    def get_config(self) -> Any: ...
    @property
    def iterations(self) -> Any: ...
    @property
    def learning_rate(self) -> Any: ...
    @property
    def name(self) -> Any: ...
    @property
    def variables(self) -> Any: ...

class RMSprop(Optimizer):
    def __init__(self, learning_rate: float = ..., rho: float = ..., momentum: float = ...,
                 epsilon: float = ..., centered: bool = ..., weight_decay: Optional[float] = ...,
                 clipnorm: Optional[float] = ..., clipvalue: Optional[float] = ...,
                 global_clipnorm: Optional[float] = ..., name: Optional[str] = ..., **kwargs: Any) -> None: ...

class SGD(Optimizer):
    def __init__(self, learning_rate: float = ..., momentum: float = ..., nesterov: bool = ...,
                 weight_decay: Optional[float] = ..., clipnorm: Optional[float] = ...,
                 clipvalue: Optional[float] = ..., global_clipnorm: Optional[float] = ...,
                 name: Optional[str] = ..., **kwargs: Any) -> None: ...

def get(identifier: Any) -> Any: ...
