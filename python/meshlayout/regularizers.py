"""meshlayout.regularizers: keras.regularizers' L1, L2 and L1L2 (weight penalties added to
the training loss; `layer.losses` lists them). Layers also take the names "l1", "l2", "l1_l2"
(Keras' defaults: 0.01)."""

__all__ = ["L1", "L1L2", "L2", "Regularizer", "get"]


class Regularizer:
    """Base class: l1 · Σ|w| + l2 · Σ w²."""

    def __init__(self, l1=0.0, l2=0.0):
        for name, value in (("l1", l1), ("l2", l2)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"Invalid value for argument {name}: expected a non-negative "
                                 f"float, received {name}={value!r}")
        self.l1 = float(l1)
        self.l2 = float(l2)

    def get_config(self):
        return {"l1": self.l1, "l2": self.l2}

    def __repr__(self):
        return f"{type(self).__name__}(l1={self.l1}, l2={self.l2})"


class L1(Regularizer):
    def __init__(self, l1=0.01):
        super().__init__(l1=l1)


class L2(Regularizer):
    def __init__(self, l2=0.01):
        super().__init__(l2=l2)


class L1L2(Regularizer):
    def __init__(self, l1=0.0, l2=0.0):
        super().__init__(l1=l1, l2=l2)


_BY_NAME = {"l1": L1, "l2": L2, "l1_l2": lambda: L1L2(l1=0.01, l2=0.01)}


def get(identifier):
    """keras.regularizers.get: None, a name or a Regularizer."""
    if identifier is None or isinstance(identifier, Regularizer):
        return identifier
    if isinstance(identifier, str) and identifier in _BY_NAME:
        return _BY_NAME[identifier]()
    raise ValueError(f"Could not interpret regularizer identifier: {identifier}")


def _pair(identifier):
    r = get(identifier)
    return (r.l1, r.l2)
