"""meshlayout.Model, Sequential and the training methods (compile, fit, evaluate, predict,
summary, save_weights, load_weights) of every model: subclassed, functional, Sequential.

    class MyModel(meshlayout.Model):
        def __init__(self):
            super().__init__()
            self.d1 = meshlayout.layers.Dense(16, name="d1")   # tracked: object path d1.kernel
            self.d2 = meshlayout.layers.Dense(1, name="d2")
        def call(self, x):
            return self.d2(self.d1(x))

A subclass's attributes holding layers (or lists of layers) are tracked as Keras tracks them
(object paths "d1.kernel", "blocks.0.kernel"; Keras 3 paths "my_model/d1/kernel"). call() runs
in Python on KerasTensors and composes layers (arithmetic on tensors is not available: use the
merge layers); the model trains through the graph of its call, traced once.
"""

import os

import numpy as np

from meshlayout import _fit
from meshlayout import _meshlayout
from meshlayout import _metrics
from meshlayout import losses as _losses
from meshlayout import optimizers as _optimizers

_nn = _meshlayout._nn
_CppModel = _nn.Model


class _ModelType(type(_CppModel)):
    """isinstance(x, meshlayout.Model) holds for every model: functional and Sequential ones
    are C++ objects, not instances of the Python subclass (a custom Layer is not a Model);
    isinstance(x, meshlayout.layers.Layer) holds for every layer, built-in ones included."""

    def __instancecheck__(cls, obj):
        if cls is Model:
            return isinstance(obj, _CppModel) and not type.__instancecheck__(Layer, obj)
        if cls is Layer:
            return isinstance(obj, _nn.Layer)
        return super().__instancecheck__(obj)

    def __subclasscheck__(cls, sub):
        if cls is Layer:
            return issubclass(sub, _nn.Layer)
        return super().__subclasscheck__(sub)

    def __dir__(cls):
        hidden = set(getattr(cls, "_ml_hidden", ()))
        return [n for n in type.__dir__(cls) if n not in hidden]


class _ModelOnly:
    """A Model method a custom Layer does not have (Keras' Layer has no fit, compile, …)."""

    def __init__(self, name):
        self.name = name

    def __get__(self, obj, objtype=None):
        raise AttributeError(f"'{(objtype or type(obj)).__name__}' object has no attribute "
                             f"'{self.name}' (a Model's, not a Layer's)")


class _Composite(_CppModel, metaclass=_ModelType):
    """What a subclassed Model and a custom Layer share: the C++ model whose call() is the
    Python method, and attributes holding layers tracked as Keras tracks them."""

    _ml_kind = "Model"

    def __init__(self, name=None, **kwargs):
        for k in ("trainable", "dtype"):
            kwargs.pop(k, None)
        if kwargs:
            raise TypeError(f"Unrecognized keyword arguments passed to {type(self).__name__}: "
                            f"{kwargs}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{self._ml_kind} name must be a string, got {name!r}")
        _CppModel.__init__(self, name or "", _nn._to_snake_case(type(self).__name__))
        self.__dict__["_ml_initialized"] = True

    def __setattr__(self, attr, value):
        layers = None
        if isinstance(value, _nn.Layer):
            layers = [(attr, value)]
        elif isinstance(value, (list, tuple)) and value and \
                all(isinstance(v, _nn.Layer) for v in value):
            layers = [(f"{attr}.{i}", v) for i, v in enumerate(value)]
        if layers:
            if not self.__dict__.get("_ml_initialized"):
                # The C++ part is constructed first, so the object stays safe to look at.
                _Composite.__init__(self)
                raise RuntimeError(
                    f"It looks like you are subclassing `{self._ml_kind}` and you forgot to "
                    "call `super().__init__()`. Always start with this line.")
            for a, layer in layers:
                self._track(a, layer)
        super().__setattr__(attr, value)

    def call(self, inputs):
        raise NotImplementedError(
            f"{self._ml_kind} {self.name} does not have a `call()` method implemented.")

    def __call__(self, inputs, training=None):
        out = _CppModel.__call__(self, inputs, training=training)
        if isinstance(out, _nn.KerasTensor):  # a graph's node: it keeps this object alive
            out = _nn._owned_output(out, self)
        return out


class Model(_Composite):
    """keras.Model: Model(inputs, outputs, name=None) builds a functional model; a subclass
    (super().__init__(name=None)) defines call(self, inputs)."""

    def __new__(cls, *args, **kwargs):
        if cls is Model and (args or "inputs" in kwargs or "outputs" in kwargs):
            return _functional(*args, **kwargs)
        return _CppModel.__new__(cls)


class Layer(_Composite):
    """keras.layers.Layer subclassed in Python: __init__ assigns layers to attributes (tracked:
    Keras 3 paths "sequential/my_block/dense/kernel", Keras 2 keys "my_block.dense.kernel"),
    call(inputs) composes them (and the merge layers); it works inside Sequential, functional
    and subclassed models and trains through the graph of its call. Math of its own on tensors
    (arithmetic, numpy) and weights of its own (add_weight) are refused, naming the layer:
    meshlayout cannot differentiate them. isinstance(x, Layer) holds for every layer."""

    _ml_kind = "Layer"
    _ml_hidden = ("compile", "fit", "evaluate", "predict", "summary", "save_weights",
                  "load_weights", "compiled", "optimizer", "loss", "stop_training", "layers",
                  "save_training_state", "load_training_state")

    def add_weight(self, *args, **kwargs):
        raise NotImplementedError(
            f"Layer {self.name!r} ({type(self).__name__}): add_weight is not supported: meshlayout "
            "trains only the weights of its built-in layers, whose backward it knows; create "
            "them as attributes (e.g. self.dense = meshlayout.layers.Dense(...)) and compose "
            "them in call()")


for _name in Layer._ml_hidden:
    setattr(Layer, _name, _ModelOnly(_name))


def _functional(inputs=None, outputs=None, name=None, **kwargs):
    kwargs.pop("trainable", None)
    if kwargs:
        raise TypeError(f"Unrecognized keyword arguments passed to Model: {kwargs}")
    if not isinstance(outputs, _nn.KerasTensor):
        if isinstance(outputs, (list, tuple)) and len(outputs) == 1:
            outputs = outputs[0]
        else:
            raise ValueError("Model(inputs, outputs): meshlayout's functional models have one "
                             f"output KerasTensor, got {outputs!r}")
    if isinstance(inputs, dict):
        raise ValueError("Model(inputs, outputs): inputs as a dict are not supported")
    return _nn._functional(inputs, outputs, name or "")


class Sequential(_nn.Sequential):
    """keras.Sequential(layers=None, name=None): an Input (or layers[0] given input_shape) as
    the first element builds it at once; otherwise it is built by its first call or fit.
    add(layer) / pop() as Keras: a layer added to a built model (or one whose Input is known)
    is built at once, under the LayoutMap or distribution the model was created in."""

    def __init__(self, layers=None, trainable=True, name=None):
        layers = list(layers or [])
        input_shape = None
        if layers and isinstance(layers[0], _nn.KerasTensor):
            input_shape = list(layers.pop(0).shape[1:])
        names = set()
        for layer in layers:
            _check_addable(layer)
            if layer.name in names:
                _not_unique(layer)
            names.add(layer.name)
        try:
            super().__init__(layers, name or "", input_shape)
        except BaseException:
            # A layer could not build: the object (kept by the traceback) gets an empty C++
            # model, so that looking at it afterwards is safe.
            super().__init__([], name or "", None)
            raise
        self._ml_input_shape = input_shape

    def add(self, layer, rebuild=True):
        """keras Sequential.add(layer): a layer, or an Input (the model's input shape, first)."""
        if isinstance(layer, _nn.KerasTensor):
            if self.layers or getattr(self, "_ml_input_shape", None) is not None:
                raise ValueError(
                    f"Sequential model '{self.name}' has already been configured to use input "
                    f"shape {self._ml_input_shape or 'of its layers'}. You cannot add a "
                    "different Input layer to it.")
            self._ml_input_shape = list(layer.shape[1:])
            return
        _check_addable(layer)
        self._add(layer)
        shape = getattr(self, "_ml_input_shape", None)
        if rebuild and not self.built and shape is not None:
            self.build((None, *shape))

    def pop(self, rebuild=True):
        """keras Sequential.pop(): removes and returns the last layer."""
        if not self.layers:
            raise TypeError("There are no layers in the model.")
        return self._pop()


def _check_addable(layer):
    if not isinstance(layer, _nn.Layer):
        raise ValueError("Only instances of `keras.Layer` can be added to a Sequential "
                         f"model. Received: {layer} (of type {type(layer)})")


def _not_unique(layer):
    raise ValueError("All layers added to a Sequential model should have unique names. Name "
                     f"'{layer.name}' is already the name of a layer in this model. Update the "
                     "`name` argument to pass a unique name.")


def build(self, input_shape):
    """keras Model.build(input_shape): traces the model on a symbolic input of that shape (the
    batch dimension may be None), creating and laying out its variables."""
    if self.built:
        return
    shape = list(input_shape)
    if not shape:
        raise ValueError(f"build: input_shape must include the batch dimension, got {input_shape}")
    self(_nn.Input(shape[1:], None))


# --- the training methods of every model ------------------------------------------------------

def compile(self, optimizer="rmsprop", loss=None, metrics=None, loss_weights=None,  # noqa: A001
            weighted_metrics=None, run_eagerly=False, steps_per_execution=1, jit_compile="auto",
            auto_scale_loss=True):
    """keras Model.compile(optimizer, loss, metrics): optimizer by name or a
    meshlayout.optimizers object, loss by name or a meshlayout.losses object. metrics: "mse",
    "mae", "accuracy", "binary_accuracy", "sparse_categorical_accuracy", … (_metrics.KINDS):
    fit shows and records their running means over each epoch (and val_<metric> on the
    validation data), evaluate() returns them after the loss."""
    if loss_weights is not None or weighted_metrics is not None:
        raise ValueError("compile: loss_weights and weighted_metrics are not supported")
    self._ml_optimizer = _optimizers.get(optimizer)
    self._ml_loss = None if loss is None else _losses.get(loss)
    self._ml_metrics = [_metrics.check_name(m) for m in (metrics or [])]
    self._ml_trainer = None
    self.optimizer = self._ml_optimizer
    self.loss = self._ml_loss
    self.compiled = True


def _trainer(self):
    if not getattr(self, "compiled", False):
        raise RuntimeError("You must call `compile()` before using the model.")
    if self._ml_loss is None:
        raise ValueError("No loss to compute. Provide a `loss` argument in `compile()`.")
    if self._ml_trainer is None:
        self._ml_trainer = _nn._Trainer(self, self._ml_optimizer._cpp, self._ml_loss._keras_name,
                                        self._ml_loss.from_logits,
                                        self._ml_loss.label_smoothing)
    return self._ml_trainer


def _ensure_built(self, x):
    """Keras builds an unbuilt model on the first batch: a forward pass on one row."""
    if not self.built:
        self(np.asarray(x)[:1])


def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", return_dict=False):
    """keras Model.evaluate: the loss (a batch-weighted mean, as Keras), then each compiled
    metric ([loss, m1, …] with metrics; a dict with return_dict)."""
    batch_size = _fit.batch_size_of(batch_size)
    trainer = _trainer(self)
    _ensure_built(self, x)
    x = np.asarray(x)
    y = np.asarray(y)
    loss = trainer.evaluate(x, y, batch_size, _fit.verbose_level(verbose))
    metrics = getattr(self, "_ml_metrics", [])
    values = {"loss": loss}
    if metrics:
        pred = trainer.predict(x, batch_size)
        for m in metrics:
            values[m] = _metrics.mean(m, y, pred)
    if return_dict:
        return values
    return loss if not metrics else list(values.values())


def predict(self, x, batch_size=None, verbose="auto"):
    """keras Model.predict: the outputs of every batch, concatenated, as a numpy array."""
    batch_size = _fit.batch_size_of(batch_size)
    x = np.asarray(x)
    _ensure_built(self, x)
    trainer = getattr(self, "_ml_predictor", None)
    if getattr(self, "compiled", False) and self._ml_loss is not None:
        trainer = _trainer(self)
    if trainer is None:  # predict needs no optimizer state: an SGD with a fixed name
        trainer = _nn._Trainer(self, _nn._make_optimizer("sgd", {"name": "predict_sgd"}),
                               "mean_squared_error", False, 0.0)
        self._ml_predictor = trainer
    return trainer.predict(x, batch_size)


def summary(self, line_length=None, positions=None, print_fn=None, expand_nested=False,
            show_trainable=False, layer_range=None):
    """keras Model.summary: prints the C++ summary (one row per variable with its layout and
    bytes per device, Keras' totals, the DTensor lines) through print_fn (default print)."""
    text = _cpp_summary(self)
    (print_fn or print)(text)


def save_weights(self, filepath, overwrite=True, path_style="path"):
    """Saves every variable to a safetensors file, named by its Keras 3 path
    ("my_model/d1/kernel"; path_style="object_path": Keras 2's "d1.kernel"). Each process
    writes only its shards' boxes."""
    import os
    if not overwrite and os.path.exists(filepath):
        raise ValueError(f"save_weights: {filepath} exists and overwrite=False")
    _nn._save_weights(self, str(filepath), _path_style(path_style))


def load_weights(self, filepath, skip_mismatch=False, path_style="path"):
    """Loads the variables save_weights saved (each device reads its box); skip_mismatch
    leaves variables the file lacks as they are and ignores extra tensors."""
    _nn._load_weights(self, str(filepath), _path_style(path_style), bool(skip_mismatch))


def save_training_state(self, directory):
    """Saves the training state of a compiled, built model into `directory` (new or empty),
    atomically: its weights (model.safetensors, Keras 3 paths), its optimizer's slots and
    iterations (optimizer.safetensors) and the epochs fit has finished (train/training_state.h's
    layout; each process writes only its shards' boxes)."""
    _trainer(self)
    _nn._save_training_state(self, self._ml_optimizer._cpp, os.fspath(directory),
                             int(getattr(self, "_ml_epoch", 0)))


def load_training_state(self, directory):
    """Loads a state save_training_state wrote (any mesh: each device reads its box) into this
    compiled, built model and its optimizer; returns {"iterations", "epoch"}: resume with
    fit(…, initial_epoch=state["epoch"]) to continue the saved run bit for bit. An incomplete
    save (an interrupted one) or another optimizer's state is refused."""
    _trainer(self)
    if not self.built:
        raise ValueError(f"load_training_state: model {self.name!r} is not built yet: call it on "
                         "a batch or model.build(input_shape) first")
    state = _nn._load_training_state(self, self._ml_optimizer._cpp, os.fspath(directory))
    self._ml_epoch = state["epoch"]
    return state


def _path_style(style):
    if style not in ("path", "object_path"):
        raise ValueError(f"path_style must be 'path' (Keras 3) or 'object_path' (Keras 2), got "
                         f"{style!r}")
    return style == "path"


_cpp_summary = _CppModel.summary
fit = _fit.fit
for _f in (compile, fit, evaluate, predict, summary, save_weights, load_weights, build,
           save_training_state, load_training_state):
    setattr(_CppModel, _f.__name__, _f)
_CppModel.compiled = False
_CppModel.optimizer = None
_CppModel.loss = None
_CppModel.stop_training = False
del _f
