"""meshlayout.losses: the keras.losses the C++ trainer computes (train/losses.h):
MeanSquaredError ("mse", "mean_squared_error"), CategoricalCrossentropy
("categorical_crossentropy"; from_logits, label_smoothing), SparseCategoricalCrossentropy
("sparse_categorical_crossentropy"; from_logits), and get(). Each reduces with Keras'
"sum_over_batch_size"."""

from meshlayout import _meshlayout

_nn = _meshlayout._nn

__all__ = ["CategoricalCrossentropy", "Loss", "MeanSquaredError",
           "SparseCategoricalCrossentropy", "get"]


class Loss:
    """Base class: a Keras loss name with its arguments (checked by the C++ registry)."""

    _keras_name = None

    def __init__(self, from_logits=False, label_smoothing=0.0, reduction="sum_over_batch_size",
                 name=None):
        if reduction != "sum_over_batch_size":
            raise ValueError(f"{type(self).__name__}: reduction {reduction!r} is not supported "
                             "(meshlayout reduces with 'sum_over_batch_size')")
        self.from_logits = bool(from_logits)
        self.label_smoothing = float(label_smoothing)
        self.name = _nn._check_loss(self._keras_name, self.from_logits, self.label_smoothing)
        if name is not None:
            self.name = name

    def get_config(self):
        return {"name": self.name, "from_logits": self.from_logits,
                "label_smoothing": self.label_smoothing}

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name}>"


class MeanSquaredError(Loss):
    """keras.losses.MeanSquaredError(): mean((y_pred − y_true)²)."""
    _keras_name = "mean_squared_error"

    def __init__(self, reduction="sum_over_batch_size", name="mean_squared_error"):
        super().__init__(reduction=reduction, name=name)


class CategoricalCrossentropy(Loss):
    """keras.losses.CategoricalCrossentropy(from_logits=False, label_smoothing=0.0)."""
    _keras_name = "categorical_crossentropy"

    def __init__(self, from_logits=False, label_smoothing=0.0, axis=-1,
                 reduction="sum_over_batch_size", name="categorical_crossentropy"):
        if axis != -1:
            raise ValueError(f"CategoricalCrossentropy: axis={axis!r} is not supported")
        super().__init__(from_logits=from_logits, label_smoothing=label_smoothing,
                         reduction=reduction, name=name)


class SparseCategoricalCrossentropy(Loss):
    """keras.losses.SparseCategoricalCrossentropy(from_logits=False)."""
    _keras_name = "sparse_categorical_crossentropy"

    def __init__(self, from_logits=False, ignore_class=None, reduction="sum_over_batch_size",
                 name="sparse_categorical_crossentropy"):
        if ignore_class is not None:
            raise ValueError("SparseCategoricalCrossentropy: ignore_class is not supported")
        super().__init__(from_logits=from_logits, reduction=reduction, name=name)


_CLASSES = {"mse": MeanSquaredError, "mean_squared_error": MeanSquaredError,
            "categorical_crossentropy": CategoricalCrossentropy,
            "sparse_categorical_crossentropy": SparseCategoricalCrossentropy}


def get(identifier):
    """keras.losses.get: a Loss, or a name → a new one with Keras' defaults."""
    if isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, str) and identifier in _CLASSES:
        return _CLASSES[identifier]()
    raise ValueError(f"Could not interpret loss identifier: {identifier} (expected one of "
                     f"{', '.join(_nn._loss_names())} or a meshlayout.losses.Loss)")
