"""meshlayout.optimizers: keras.optimizers' classes, names and arguments, on the C++ optimizers
(train/optimizer.h's registry): SGD, Adam, AdamW, RMSprop, Adagrad, Lion, Adafactor, and
get(name). An optimizer is named as Keras names it ("adam", "adam_1", …) when constructed; its
variables (iteration, learning_rate, slots such as adam/dense_kernel_momentum) exist once a
model's fit builds it. Bad arguments raise ValueError with the C++ message (an argument the
optimizer does not take, a value out of range)."""

from meshlayout import _meshlayout

_nn = _meshlayout._nn

__all__ = ["Adafactor", "Adagrad", "Adam", "AdamW", "Lion", "Optimizer", "RMSprop", "SGD", "get"]


class Optimizer:
    """Base class: holds the C++ optimizer (made by name with the given arguments)."""

    _keras_name = None

    def __init__(self, **kwargs):
        self._cpp = _nn._make_optimizer(self._keras_name, kwargs)
        self._config = dict(kwargs)

    @property
    def name(self):
        return self._cpp.name

    @property
    def learning_rate(self):
        return self._cpp.learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        self._cpp.learning_rate = float(value)

    @property
    def iterations(self):
        return self._cpp.iterations

    @property
    def variables(self):
        return self._cpp.variables

    def get_config(self):
        return dict(self._config, name=self.name)

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name} learning_rate={self.learning_rate}>"


class SGD(Optimizer):
    """keras.optimizers.SGD(learning_rate=0.01, momentum=0.0, nesterov=False, …)."""
    _keras_name = "sgd"

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, weight_decay=None,
                 clipnorm=None, clipvalue=None, global_clipnorm=None, name=None, **kwargs):
        super().__init__(learning_rate=learning_rate, momentum=momentum, nesterov=nesterov,
                         weight_decay=weight_decay, clipnorm=clipnorm, clipvalue=clipvalue,
                         global_clipnorm=global_clipnorm, name=name, **kwargs)


class Adam(Optimizer):
    """keras.optimizers.Adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, …)."""
    _keras_name = "adam"

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 amsgrad=False, weight_decay=None, clipnorm=None, clipvalue=None,
                 global_clipnorm=None, name=None, **kwargs):
        super().__init__(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2,
                         epsilon=epsilon, amsgrad=amsgrad, weight_decay=weight_decay,
                         clipnorm=clipnorm, clipvalue=clipvalue, global_clipnorm=global_clipnorm,
                         name=name, **kwargs)


class AdamW(Optimizer):
    """keras.optimizers.AdamW(learning_rate=0.001, weight_decay=0.004, beta_1=0.9, …)."""
    _keras_name = "adamw"

    def __init__(self, learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-7, amsgrad=False, clipnorm=None, clipvalue=None,
                 global_clipnorm=None, name=None, **kwargs):
        super().__init__(learning_rate=learning_rate, weight_decay=weight_decay, beta_1=beta_1,
                         beta_2=beta_2, epsilon=epsilon, amsgrad=amsgrad, clipnorm=clipnorm,
                         clipvalue=clipvalue, global_clipnorm=global_clipnorm, name=name,
                         **kwargs)


class RMSprop(Optimizer):
    """keras.optimizers.RMSprop(learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, …)."""
    _keras_name = "rmsprop"

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False,
                 weight_decay=None, clipnorm=None, clipvalue=None, global_clipnorm=None,
                 name=None, **kwargs):
        super().__init__(learning_rate=learning_rate, rho=rho, momentum=momentum,
                         epsilon=epsilon, centered=centered, weight_decay=weight_decay,
                         clipnorm=clipnorm, clipvalue=clipvalue, global_clipnorm=global_clipnorm,
                         name=name, **kwargs)


class Adagrad(Optimizer):
    """keras.optimizers.Adagrad(learning_rate=0.001, initial_accumulator_value=0.1, …)."""
    _keras_name = "adagrad"

    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7,
                 weight_decay=None, clipnorm=None, clipvalue=None, global_clipnorm=None,
                 name=None, **kwargs):
        super().__init__(learning_rate=learning_rate,
                         initial_accumulator_value=initial_accumulator_value, epsilon=epsilon,
                         weight_decay=weight_decay, clipnorm=clipnorm, clipvalue=clipvalue,
                         global_clipnorm=global_clipnorm, name=name, **kwargs)


class Lion(Optimizer):
    """keras.optimizers.Lion(learning_rate=0.001, beta_1=0.9, beta_2=0.99, …)."""
    _keras_name = "lion"

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.99, weight_decay=None,
                 clipnorm=None, clipvalue=None, global_clipnorm=None, name=None, **kwargs):
        super().__init__(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2,
                         weight_decay=weight_decay, clipnorm=clipnorm, clipvalue=clipvalue,
                         global_clipnorm=global_clipnorm, name=name, **kwargs)


class Adafactor(Optimizer):
    """keras.optimizers.Adafactor(learning_rate=0.001, …): Keras' arguments by name."""
    _keras_name = "adafactor"

    def __init__(self, learning_rate=0.001, name=None, **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)


_CLASSES = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop, "adagrad": Adagrad,
            "lion": Lion, "adafactor": Adafactor}


def get(identifier):
    """keras.optimizers.get: an Optimizer, or a name (case-insensitive) → a new one."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str) and identifier.lower() in _CLASSES:
        return _CLASSES[identifier.lower()]()
    raise ValueError(f"Could not interpret optimizer identifier: {identifier} (expected one of "
                     f"{', '.join(sorted(_CLASSES))} or an Optimizer)")
