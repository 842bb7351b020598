"""meshlayout.distribution: keras.distribution's names, arguments and errors (Keras 3).

    import meshlayout as ml
    from meshlayout import distribution as dist      # or: import meshlayout as keras; keras.distribution

    mesh = dist.DeviceMesh((2, 4), ["batch", "model"])
    layout_map = dist.LayoutMap(mesh)
    layout_map["d1/kernel"] = (None, "model")
    dist.set_distribution(dist.ModelParallel(layout_map=layout_map, batch_dim_name="batch"))
    with dist.DataParallel().scope():                 # 1-D "batch" mesh over list_devices()
        dist.distribution()                           # the DataParallel object
    dist.distribution()                               # the ModelParallel again

Arguments are taken as Keras takes them: any sequence (tuple, list, numpy array, range) for
shapes and axis names, numpy integers for integers, None where Keras allows it; bad ones raise
Keras' error types with Keras' messages (ValueError for a mesh that is not a DeviceMesh, a
missing layout_map, …). The current distribution is per thread, as Keras' global state:
set_distribution() and scope() set this thread's, and C++ (models built from this thread) sees
the same one. A distribution's C++ counterpart does the replica and data-shard arithmetic;
ModelParallel's reads the LayoutMap's rules as they are when it is made current.

Not as Keras: a TensorLayout returned here holds a copy of its mesh, so compare meshes with ==
rather than `is`; initialize() joins processes started by mpirun (MPI), not by addresses.
"""

import os
import threading
import warnings

import numpy as np

from meshlayout import _meshlayout
from meshlayout import LayoutMap
from meshlayout._meshlayout import (  # noqa: F401  (re-exported, as keras.distribution has them)
    DeviceMesh,
    TensorLayout,
    distribute_tensor,
    get_device_count,
    list_devices,
)

__all__ = [
    "DataParallel", "DeviceMesh", "Distribution", "LayoutMap", "ModelParallel", "TensorLayout",
    "distribute_tensor", "distribution", "get_device_count", "initialize", "list_devices",
    "set_distribution",
]

DEFAULT_BATCH_DIM_NAME = "batch"

_state = threading.local()  # .distribution: this thread's current one (Keras' global state)


def distribution():
    """The current distribution of this thread (a scope's, else set_distribution()'s), or None."""
    return getattr(_state, "distribution", None)


def set_distribution(value):
    """Makes `value` (a Distribution, or None to clear) this thread's current distribution."""
    if value is not None and not isinstance(value, Distribution):
        raise ValueError(
            "set_distribution expects a Distribution (DataParallel, ModelParallel) or None. "
            f"Received: {value!r} (of type {type(value)})")
    _state.distribution = value
    _meshlayout._set_thread_distribution(None if value is None else value._cpp_current())


def _index(value, what):
    """An integer from an int or numpy integer (not a bool, not a float), else TypeError."""
    if isinstance(value, (bool, np.bool_)) or not hasattr(value, "__index__"):
        raise TypeError(f"{what} must be an integer, got {value!r} (of type {type(value)})")
    return value.__index__()


def _shape(data_shape, what):
    if isinstance(data_shape, str) or not hasattr(data_shape, "__iter__"):
        raise TypeError(f"{what} must be a sequence of integers, got {data_shape!r}")
    return tuple(_index(d, f"each dimension of {what}") for d in data_shape)


class _ScopeContext:
    """`with d.scope():` — `d` is current inside; the previous one is restored after, even on
    an exception (scopes nest)."""

    __slots__ = ("_distribution", "_previous")

    def __init__(self, d):
        self._distribution = d
        self._previous = []

    def __enter__(self):
        self._previous.append(distribution())
        set_distribution(self._distribution)
        return self._distribution

    def __exit__(self, *exc):
        set_distribution(self._previous.pop())
        return False


class Distribution:
    """Base class of the distributions (keras.distribution.Distribution).

    Distribution(device_mesh, batch_dim_name=None, auto_shard_dataset=True). The base class may
    be made current (scope, set_distribution) but lays out nothing: get_data_layout,
    get_variable_layout and get_tensor_layout raise NotImplementedError, as in Keras.
    """

    def __init__(self, device_mesh, batch_dim_name=None, auto_shard_dataset=True):
        self._device_mesh = device_mesh
        self._batch_dim_name = batch_dim_name
        self._auto_shard_dataset = auto_shard_dataset
        self._cpp = None

    @property
    def device_mesh(self):
        return self._device_mesh

    @property
    def batch_dim_name(self):
        return self._batch_dim_name

    @property
    def auto_shard_dataset(self):
        return self._auto_shard_dataset

    @auto_shard_dataset.setter
    def auto_shard_dataset(self, value):
        self._auto_shard_dataset = bool(value)
        if self._cpp is not None:
            self._cpp.auto_shard_dataset = bool(value)

    @property
    def num_processes(self):
        return _meshlayout._process_count()

    @property
    def process_id(self):
        return _meshlayout._process_index()

    @property
    def num_model_replicas(self):
        raise NotImplementedError()

    @property
    def num_data_shards(self):
        """min(num_model_replicas, num_processes)."""
        return min(self.num_model_replicas, self.num_processes)

    @property
    def data_shard_id(self):
        """The data shard this process reads (contiguous process groups share one)."""
        r, p = self.num_model_replicas, self.num_processes
        return self.process_id if r >= p else self.process_id // (p // r)

    def get_data_layout(self, data_shape):
        raise NotImplementedError()

    def get_variable_layout(self, variable):
        raise NotImplementedError()

    def get_tensor_layout(self, path):
        raise NotImplementedError()

    def scope(self):
        """Context manager making this the current distribution of the thread."""
        return _ScopeContext(self)

    def distribute_dataset(self, dataset):
        """The dataset this process reads. With one process, auto_shard_dataset False or one
        model replica, `dataset` itself (Keras); several processes need their rows cut by
        process_batch_rows()."""
        if self.num_processes == 1 or not self.auto_shard_dataset or self.num_model_replicas == 1:
            return dataset
        raise ValueError(
            f"The dataset type {type(dataset)} is not supported for auto-sharding in "
            "multi-process setting.")

    def process_batch_rows(self, global_batch_size):
        """(begin, end): the rows of a global batch of `global_batch_size` rows that this process
        feeds (Keras' data sharding: the whole batch with one process or one replica)."""
        cpp = self._cpp_current()
        if cpp is None:
            raise NotImplementedError()
        return cpp.process_batch_rows(_index(global_batch_size, "global_batch_size"))

    def _cpp_current(self):
        """The C++ distribution that C++ code sees while this one is current (None: none)."""
        return self._cpp

    def _data_layout(self, data_shape):
        shape = _shape(data_shape, "data_shape")
        if not shape:
            raise ValueError(
                "get_data_layout needs the shape of a batch (its first dimension is split over "
                f"'{self._batch_dim_name}'), got an empty shape {data_shape!r}")
        return TensorLayout((self._batch_dim_name,) + (None,) * (len(shape) - 1),
                            self._device_mesh)

    @staticmethod
    def _explicit_layout(variable):
        for name in ("_layout", "layout"):
            layout = getattr(variable, name, None)
            if isinstance(layout, TensorLayout):
                return layout
        return None

    @staticmethod
    def _variable_attribute(variable, name):
        if not hasattr(variable, name):
            raise TypeError(
                "get_variable_layout expects a variable (an object with .shape and .path), got "
                f"{variable!r} (of type {type(variable)}), which has no .{name}")
        return getattr(variable, name)

    def _replicated(self, variable):
        rank = len(_shape(self._variable_attribute(variable, "shape"), "variable.shape"))
        return TensorLayout((None,) * rank, self._device_mesh)

    def __repr__(self):
        return f"<{type(self).__name__} device_mesh={self.device_mesh}>"

    __str__ = __repr__


class DataParallel(Distribution):
    """Data parallelism (keras.distribution.DataParallel).

    DataParallel(device_mesh=None, devices=None, auto_shard_dataset=True): with a mesh, its
    first axis is the batch axis (a mesh of rank > 1 warns, as Keras means to); else a 1-D mesh
    named "batch" over `devices`, else over list_devices(). Variables are replicated; batches
    are split on their first dimension.
    """

    def __init__(self, device_mesh=None, devices=None, auto_shard_dataset=True):
        if device_mesh:
            if not isinstance(device_mesh, DeviceMesh):
                raise ValueError(
                    "Expect `mesh` to be an instance of `DeviceMesh`. "
                    f"Received: mesh={device_mesh} (of type {type(device_mesh)})")
            if len(device_mesh.shape) != 1:
                warnings.warn(
                    "Expect the input mesh to be 1D, but received "
                    f"mesh.devices.ndim={len(device_mesh.shape)}. The first axis will be used "
                    "for data-parallel sharding.", stacklevel=2)
            mesh = device_mesh
        else:
            if devices is None or (not isinstance(devices, np.ndarray) and not devices):
                devices = list_devices()
            devices = np.array(devices)
            mesh = DeviceMesh(devices.shape, [DEFAULT_BATCH_DIM_NAME], devices)
        super().__init__(mesh, mesh.axis_names[0], auto_shard_dataset)
        self._cpp = _meshlayout._data_parallel(mesh, bool(auto_shard_dataset))

    @property
    def num_model_replicas(self):
        """Every device of the mesh, whatever its rank."""
        return self._cpp.num_model_replicas

    def get_data_layout(self, data_shape):
        """(batch_dim_name, None, …) on the mesh, one entry per dimension of `data_shape`."""
        return self._data_layout(data_shape)

    def get_variable_layout(self, variable):
        """The variable's explicit layout (`_layout`), else replicated: None per dimension of
        `variable.shape`."""
        return self._explicit_layout(variable) or self._replicated(variable)

    def get_tensor_layout(self, path):
        """None: data parallelism leaves intermediate tensors as they are."""
        return None


class ModelParallel(Distribution):
    """Model parallelism by a LayoutMap (keras.distribution.ModelParallel).

    ModelParallel(*, layout_map=None, batch_dim_name=None, auto_shard_dataset=True, **kwargs):
    the mesh is the map's; batch_dim_name defaults to its first axis. `device_mesh=` and other
    keyword arguments are ignored, as Keras >= 3.4 does. A variable's layout is its explicit one,
    else layout_map[variable.path], else replicated; get_tensor_layout(path) is
    layout_map[path] ("<layer path>/output" keys relayout layer outputs).
    """

    def __init__(self, *, layout_map=None, batch_dim_name=None, auto_shard_dataset=True,
                 **kwargs):
        kwargs.pop("device_mesh", None)  # Keras >= 3.4: the mesh is the map's
        if layout_map is None:
            raise ValueError("You must specify a layout_map argument.")
        if not isinstance(layout_map, LayoutMap):
            raise ValueError(
                "Argument `layout_map` must be a `LayoutMap` instance. "
                f"Received: layout_map={layout_map}")
        mesh = layout_map.device_mesh
        if mesh is None:
            raise ValueError(
                "ModelParallel needs a LayoutMap with a device mesh: LayoutMap(device_mesh)")
        if batch_dim_name is not None and not isinstance(batch_dim_name, str):
            raise TypeError(
                f"batch_dim_name must be a mesh axis name (str) or None, got {batch_dim_name!r}")
        super().__init__(mesh, batch_dim_name or mesh.axis_names[0], auto_shard_dataset)
        self._layout_map = layout_map
        # Checks the batch axis and the process count now (ValueError in meshlayout's / Keras'
        # words); rebuilt from the map's rules whenever this distribution is made current.
        self._cpp = self._cpp_current()

    @property
    def layout_map(self):
        return self._layout_map

    @property
    def num_model_replicas(self):
        """The size of the batch axis."""
        return self._cpp.num_model_replicas

    def get_data_layout(self, data_shape):
        """(batch_dim_name, None, …) on the mesh, one entry per dimension of `data_shape`."""
        return self._data_layout(data_shape)

    def get_variable_layout(self, variable):
        """The variable's explicit layout (`_layout`), else the LayoutMap's layout for
        `variable.path` (the stored TensorLayout, not checked against the shape, as Keras), else
        replicated."""
        explicit = self._explicit_layout(variable)
        if explicit is not None:
            return explicit
        path = self._variable_attribute(variable, "path")
        if not isinstance(path, str):
            raise TypeError(f"variable.path must be a str, got {path!r}")
        layout = self._layout_map[path]
        return layout if layout is not None else self._replicated(variable)

    def get_tensor_layout(self, path):
        """layout_map[path]: the stored TensorLayout, or None."""
        return self._layout_map[path]

    def _cpp_current(self):
        cpp = _meshlayout._model_parallel(self._layout_map, self._batch_dim_name,
                                          bool(self._auto_shard_dataset))
        self._cpp = cpp
        return cpp


def initialize(job_addresses=None, num_processes=None, process_id=None):
    """keras.distribution.initialize: joins the processes of this launch.

    Each None argument is taken from KERAS_DISTRIBUTION_JOB_ADDRESSES,
    KERAS_DISTRIBUTION_NUM_PROCESSES and KERAS_DISTRIBUTION_PROCESS_ID when set. meshlayout's
    processes are started by mpirun, which knows their addresses: `job_addresses` is only
    checked against `num_processes` (JAX's check), and `num_processes` and `process_id` must
    agree with the launch. In one process started without mpirun this does nothing.
    """
    if job_addresses is None and "KERAS_DISTRIBUTION_JOB_ADDRESSES" in os.environ:
        job_addresses = os.environ["KERAS_DISTRIBUTION_JOB_ADDRESSES"]
    if num_processes is None and "KERAS_DISTRIBUTION_NUM_PROCESSES" in os.environ:
        num_processes = int(os.environ["KERAS_DISTRIBUTION_NUM_PROCESSES"])
    if process_id is None and "KERAS_DISTRIBUTION_PROCESS_ID" in os.environ:
        process_id = int(os.environ["KERAS_DISTRIBUTION_PROCESS_ID"])
    if num_processes is not None:
        num_processes = _index(num_processes, "num_processes")
    if process_id is not None:
        process_id = _index(process_id, "process_id")
    if job_addresses is not None:
        if not isinstance(job_addresses, str):
            raise TypeError(
                f"job_addresses must be a comma-separated string, got {job_addresses!r}")
        addresses = job_addresses.split(",") if "," in job_addresses else [job_addresses]
        if num_processes is not None and "," in job_addresses and len(addresses) != num_processes:
            raise ValueError(
                f"The provided job_addresses {addresses} has {len(addresses)} jobs, but "
                f"num_processes is {num_processes}")
    _meshlayout._initialize(num_processes, process_id)
