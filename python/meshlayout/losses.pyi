# Type stubs of meshlayout.losses (python/tests/test_stubs.py checks them against the
# module; keras.losses): the losses the C++ trainer computes.
from typing import Any, Optional, Sequence, Union

__all__ = [
    "CategoricalCrossentropy",
    "Loss",
    "MeanSquaredError",
    "SparseCategoricalCrossentropy",
    "get",
]

class CategoricalCrossentropy(Loss):
    def __init__(self, from_logits: bool = ..., label_smoothing: float = ..., axis: int = ...,
                 reduction: str = ..., name: Optional[str] = ...) -> None: ...

class Loss:
    def __init__(self, from_logits: bool = ..., label_smoothing: float = ...,
                 reduction: str = ..., name: Optional[str] = ...) -> None: ...
    def get_config(self) -> Any: ...

class MeanSquaredError(Loss):
    def __init__(self, reduction: str = ..., name: Optional[str] = ...) -> None: ...

class SparseCategoricalCrossentropy(Loss):
    def __init__(self, from_logits: bool = ..., ignore_class: Any = ..., reduction: str = ...,
                 name: Optional[str] = ...) -> None: ...

def get(identifier: Any) -> Any: ...
