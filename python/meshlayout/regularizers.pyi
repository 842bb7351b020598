# Type stubs of meshlayout.regularizers (python/tests/test_stubs.py checks them against the
# module; keras.regularizers): L1, L2, L1L2.
from typing import Any, Optional, Sequence, Union

__all__ = [
    "L1",
    "L1L2",
    "L2",
    "Regularizer",
    "get",
]

class L1(Regularizer):
    def __init__(self, l1: float = ...) -> None: ...

class L1L2(Regularizer):
    def __init__(self, l1: float = ..., l2: float = ...) -> None: ...

class L2(Regularizer):
    def __init__(self, l2: float = ...) -> None: ...

class Regularizer:
    def __init__(self, l1: float = ..., l2: float = ...) -> None: ...
    def get_config(self) -> Any: ...

def get(identifier: Any) -> Any: ...
