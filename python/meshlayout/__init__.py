"""meshlayout: Keras' distribution API on meshlayout's virtual CPU devices.

The names and semantics are keras.distribution's (Keras 3):

    import numpy as np
    import meshlayout as ml

    mesh = ml.DeviceMesh((2, 4), ["batch", "model"])       # devices = ml.list_devices()
    layout_map = ml.LayoutMap(mesh)
    layout_map["dense.*kernel"] = (None, "model")            # the tuple shortcut
    layout_map["dense_1.kernel"]                             # TensorLayout, mesh filled in
    x = ml.distribute_tensor(np.ones((8, 6), np.float32), ml.TensorLayout(("batch", None), mesh))
    np.asarray(x)                                            # gathers
    x.addressable_shards[0].data                             # one device's shard, no copy

Errors are Python's: ValueError (bad mesh, layout, key, shape), KeyError (missing key or
tensor), OSError (files), MemoryError (a device over its budget), with meshlayout's messages.
An input numpy cannot convert raises numpy's own error (MemoryError, what an __array__
raised), or for a ValueError/TypeError (a ragged list) the same type naming what was passed.
"""

import collections.abc
import json

from meshlayout._meshlayout import (  # noqa: F401  (re-exported)
    Array,
    Checkpoint,
    DeviceMesh,
    Shard,
    TensorLayout,
    _LayoutMap,
    current_layout_map,
    device_memory,
    distribute_tensor,
    get_device_count,
    list_devices,
    load,
    open_checkpoint,
    save,
)

__all__ = [
    "Array", "Checkpoint", "DeviceMesh", "LayoutMap", "Shard", "TensorLayout",
    "current_layout_map", "device_memory", "distribute_tensor", "get_device_count",
    "list_devices", "load", "memory_plan", "open_checkpoint", "plan", "save",
    "distribution",  # the submodule meshlayout.distribution (keras.distribution's names)
    # layers, models and training (Keras' names): meshlayout.layers, .optimizers, .losses, …
    "Input", "Layer", "Model", "Sequential", "Variable", "callbacks", "clear_session", "layers", "losses",
    "optimizers", "regularizers",
]


class LayoutMap(_LayoutMap):
    """A dict-like map from regex keys to TensorLayouts (keras.distribution.LayoutMap).

    LayoutMap(device_mesh=None, mode="search"): `mode` is "search" (Keras 3.0-3.13, the
    default), "fullmatch" (Keras >= 3.14) or "first" (Keras 2: first rule in insertion order).
    A lookup returns the stored TensorLayout object, or None when no key matches; several
    matching keys raise Keras' ValueError. Lookups run in C++ (one RE2 pass for all rules).
    Besides the MutableMapping methods: explain(path), unused_rules(paths), scope().

    `with layout_map.scope():` makes the map the thread's current one (current_layout_map(),
    and what the C++ model code reads). Scopes are per thread and may be exited in any order:
    the current map is always the innermost one still open. A scope is exited on the thread
    that entered it (elsewhere: RuntimeError); one left open closes when its thread ends or
    the interpreter exits.
    """

    __slots__ = ()


# collections.abc.MutableMapping: isinstance() holds, and the mixin methods are the standard
# library's own, so get/pop/setdefault/__contains__/update behave exactly as on Keras' map
# (which inherits them too): get() returns None rather than the default when nothing
# matches, `key in layout_map` holds for any path no two keys match, pop() of an absent key
# raises KeyError.
for _name in ("__contains__", "keys", "items", "values", "get", "__eq__", "__ne__", "pop",
              "popitem", "clear", "update", "setdefault"):
    setattr(LayoutMap, _name, getattr(collections.abc.MutableMapping, _name))
LayoutMap.__hash__ = None
collections.abc.MutableMapping.register(LayoutMap)
del _name


def plan(checkpoint, layout_map, strict=False):
    """Where each tensor of `checkpoint` would go under `layout_map` (which needs a mesh): the
    dict `meshlayout plan --json` prints (rules, tensors, per-device bytes, issues, ok)."""
    if isinstance(checkpoint, str):
        checkpoint = open_checkpoint(checkpoint)
    return json.loads(_meshlayout_plan_json(checkpoint, layout_map, strict))




def memory_plan(model_dir, layout_map, optimizer="adam", batch=0, seq=0, cache_length=0,
                recompute="attention", device_memory=None, zero1=False):
    """What each device would hold to train or serve the Hugging Face model in `model_dir`
    under `layout_map` (which needs a mesh): the dict under "memory" of `meshlayout plan DIR
    --optimizer … --batch … --seq … --cache-length … --device-memory … --json` (per device:
    weights, gradients, slots, activations, cache, reshard_temp, peak, fits)."""
    return json.loads(_meshlayout_memory_plan_json(
        model_dir, layout_map, optimizer, zero1, batch, seq, cache_length, recompute,
        device_memory))


from meshlayout._meshlayout import _plan_json as _meshlayout_plan_json  # noqa: E402
from meshlayout._meshlayout import _memory_plan_json as _meshlayout_memory_plan_json  # noqa: E402,E501

# keras.distribution's module: DataParallel, ModelParallel, set_distribution, distribution(), …
from meshlayout import distribution  # noqa: E402

# keras.layers, keras.Model / Sequential / Input, keras.optimizers, keras.losses, …
from meshlayout import callbacks, layers, losses, models, optimizers, regularizers  # noqa: E402,E501
from meshlayout._training import Model, Sequential  # noqa: E402
from meshlayout.layers import Input, Layer  # noqa: E402
from meshlayout._meshlayout import _nn as _nn_module  # noqa: E402

clear_session = _nn_module.clear_session
Variable = _nn_module.Variable
