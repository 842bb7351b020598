# meshlayout.distribution as keras.distribution: Keras' own distribution tests
# (keras/src/distribution/distribution_lib_test.py) transcribed where they apply to meshlayout,
# then arguments as Keras takes them, the current distribution as C++ sees it, and initialize()
# under mpirun.
#
# Transcribed with one change: a TensorLayout holds a copy of its mesh, so where Keras asserts
# `layout.device_mesh is mesh` these assert ==. Keras' backend.Variable is replaced by a small
# object with the attributes the distributions read (shape, path, _layout).
import os
import shutil
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest
from child_process import run_child

import meshlayout as ml
from meshlayout import distribution as dist
from meshlayout import _meshlayout

DEVICES = [f"cpu:{i}" for i in range(8)]


class Variable:
    """What a distribution reads of a Keras variable: its shape, its path, an explicit layout."""

    def __init__(self, shape, path, layout=None):
        self.shape = shape
        self.path = path
        self._layout = layout


@pytest.fixture(autouse=True)
def no_distribution_left():
    yield
    dist.set_distribution(None)


# --- MultiProcessInitializeTest (the backend call mocked, as Keras does) ---


@pytest.fixture
def backend_initialize(monkeypatch):
    calls = []
    monkeypatch.setattr(_meshlayout, "_initialize", lambda n, i: calls.append((n, i)))
    for name in ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES",
                 "KERAS_DISTRIBUTION_PROCESS_ID"):
        monkeypatch.delenv(name, raising=False)
    return calls


def test_initialize_with_explicit_param(backend_initialize):
    dist.initialize("10.0.0.1:1234,10.0.0.2:2345", 2, 0)
    assert backend_initialize == [(2, 0)]


def test_initialize_with_env_vars(backend_initialize, monkeypatch):
    monkeypatch.setenv("KERAS_DISTRIBUTION_JOB_ADDRESSES", "10.0.0.1:1234,10.0.0.2:2345")
    monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "2")
    monkeypatch.setenv("KERAS_DISTRIBUTION_PROCESS_ID", "0")
    dist.initialize()
    assert backend_initialize == [(2, 0)]


def test_init_with_nones(backend_initialize):
    dist.initialize()
    assert backend_initialize == [(None, None)]


def test_initialize_job_addresses_must_match_num_processes(backend_initialize):
    with pytest.raises(ValueError, match=r"The provided job_addresses \['a:1', 'b:2'\] has 2 jobs, "
                                         r"but num_processes is 3"):
        dist.initialize("a:1,b:2", 3, 0)
    dist.initialize("coordinator:1234", np.int64(4), np.int32(1))  # one address: the coordinator
    assert backend_initialize == [(4, 1)]
    with pytest.raises(TypeError, match="num_processes must be an integer, got 2.0"):
        dist.initialize(None, 2.0)


def test_initialize_in_one_process_without_mpirun():
    if any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK")):
        pytest.skip("running under mpirun")
    dist.initialize()
    dist.initialize(num_processes=1, process_id=0)
    with pytest.raises(ValueError, match="num_processes=2 but this process was not started by "
                                         "mpirun"):
        dist.initialize(num_processes=2)
    with pytest.raises(ValueError, match="process_id=1 but this is the only process"):
        dist.initialize(process_id=1)


# --- DeviceMeshTest ---


def test_mesh_creation():
    mesh = dist.DeviceMesh((4, 2), ["batch", "model"], DEVICES)
    assert mesh.shape == (4, 2)
    assert mesh.axis_names == ["batch", "model"]
    assert mesh.devices.shape == (4, 2)


def test_mesh_input_validation():
    devices = DEVICES[:4]
    with pytest.raises(ValueError, match="Shape and axis_names cannot be empty"):
        dist.DeviceMesh((4,), "", devices)
    with pytest.raises(ValueError, match="Shape and axis_names should have same size"):
        dist.DeviceMesh((4, 2), ["batch"], devices)
    with pytest.raises(ValueError, match="Shape does not match the number of devices"):
        dist.DeviceMesh((4, 2), ["batch", "model"], devices)


# --- TensorLayoutTest ---


@pytest.fixture
def mesh42():
    return dist.DeviceMesh((4, 2), ["data", "model"], DEVICES)


def test_tensor_layout_creation(mesh42):
    layout = dist.TensorLayout(("data", None), mesh42)
    assert layout.device_mesh == mesh42
    assert layout.axes == ("data", None)


def test_tensor_layout_validation(mesh42):
    with pytest.raises(ValueError, match="Invalid axis names for Layout"):
        dist.TensorLayout(("data", "unknown", None), mesh42)


def test_lazy_device_mesh_injection(mesh42):
    layout = dist.TensorLayout(("data", None), None)
    assert layout.device_mesh is None and layout.axes == ("data", None)
    layout.device_mesh = mesh42
    assert layout.device_mesh == mesh42 and layout.axes == ("data", None)


def test_lazy_device_mesh_validation(mesh42):
    layout = dist.TensorLayout(("data", "unknown", None), None)
    assert layout.device_mesh is None and layout.axes == ("data", "unknown", None)
    with pytest.raises(ValueError, match="Invalid axis names for Layout"):
        layout.device_mesh = mesh42


# --- DistributionTest ---


def test_distribution_init_with_device_mesh(mesh42):
    d = dist.Distribution(mesh42)
    assert d.device_mesh is mesh42


def test_distribution_scope(mesh42):
    d1 = dist.Distribution(mesh42)
    d2 = dist.Distribution(mesh42)
    assert dist.distribution() is None
    with d1.scope():
        assert dist.distribution() is d1
        with d2.scope():
            assert dist.distribution() is d2
        assert dist.distribution() is d1
    assert dist.distribution() is None


def test_base_distribution_lays_out_nothing(mesh42):
    d = dist.Distribution(mesh42)
    for call in (lambda: d.get_data_layout((4,)), lambda: d.get_variable_layout(None),
                 lambda: d.get_tensor_layout("x"), lambda: d.num_model_replicas,
                 lambda: d.process_batch_rows(8)):
        with pytest.raises(NotImplementedError):
            call()


# --- DataParallelDistributionTest ---


@pytest.fixture
def mesh8():
    return dist.DeviceMesh((8,), ["data"], DEVICES)


def test_data_parallel_create_with_device_mesh(mesh8):
    d = dist.DataParallel(device_mesh=mesh8)
    assert len(d.device_mesh.devices) == 8
    assert d.device_mesh.axis_names == ["data"]
    assert d.batch_dim_name == "data"
    assert d.num_processes == 1 and d.process_id == 0


def test_data_parallel_create_with_devices():
    d = dist.DataParallel(devices=DEVICES)
    assert len(d.device_mesh.devices) == 8
    assert d.device_mesh.axis_names == ["batch"]
    assert d.batch_dim_name == "batch"


def test_data_parallel_create_with_list_devices(monkeypatch):
    calls = []

    def fake_list_devices(device_type=None):
        calls.append(device_type)
        return DEVICES

    monkeypatch.setattr(dist, "list_devices", fake_list_devices)
    d = dist.DataParallel()
    assert len(calls) == 1
    assert len(d.device_mesh.devices) == 8
    assert d.device_mesh.axis_names == ["batch"]
    assert d.batch_dim_name == "batch"


def test_data_parallel_get_data_layout(mesh8):
    d = dist.DataParallel(device_mesh=mesh8)
    layout = d.get_data_layout(np.arange(16).reshape((4, 2, 2)).shape)
    assert layout.device_mesh == mesh8
    assert layout.axes == ("data", None, None)


def test_data_parallel_get_variable_layout(mesh8):
    d = dist.DataParallel(device_mesh=mesh8)
    layout = d.get_variable_layout(Variable((3,), "variable"))
    assert layout.device_mesh == mesh8
    assert layout.axes == (None,)


def test_data_parallel_get_variable_layout_with_explicit_layout(mesh8):
    d = dist.DataParallel(device_mesh=mesh8)
    explicit_mesh = dist.DeviceMesh((8,), ["x"], DEVICES)
    explicit_layout = dist.TensorLayout(["x"], explicit_mesh)
    layout = d.get_variable_layout(Variable((3,), "variable", explicit_layout))
    assert layout is explicit_layout
    assert layout.device_mesh == explicit_mesh and layout.axes == explicit_layout.axes


def test_data_parallel_get_tensor_layout(mesh8):
    assert dist.DataParallel(device_mesh=mesh8).get_tensor_layout("path/to/tensor") is None


def test_data_parallel_distribute_dataset(mesh8):
    dataset = np.arange(8)
    assert dist.DataParallel(device_mesh=mesh8).distribute_dataset(dataset) is dataset


# --- ModelParallelDistributionTest ---


@pytest.fixture
def mesh24():
    return dist.DeviceMesh((2, 4), ["data", "model"], DEVICES)


def test_model_parallel_distribute_weights(mesh24):
    layout_map = dist.LayoutMap(mesh24)
    layout_map[".*kernel"] = dist.TensorLayout([None, "model"])
    layout_map[".*bias"] = dist.TensorLayout(["model"])
    d = dist.ModelParallel(layout_map=layout_map, batch_dim_name="data")
    kernel_layout = d.get_variable_layout(Variable((8, 4), "kernel"))
    assert kernel_layout.device_mesh == mesh24 and kernel_layout.axes == (None, "model")
    bias_layout = d.get_variable_layout(Variable((4,), "bias"))
    assert bias_layout.device_mesh == mesh24 and bias_layout.axes == ("model",)
    rng_seed_layout = d.get_variable_layout(Variable((2,), "seed"))
    assert rng_seed_layout.device_mesh == mesh24 and rng_seed_layout.axes == (None,)


def test_model_parallel_distribute_data(mesh24):
    d = dist.ModelParallel(layout_map=dist.LayoutMap(mesh24), batch_dim_name="data")
    layout = d.get_data_layout(np.arange(16).reshape((4, 2, 2)).shape)
    assert layout.device_mesh == mesh24
    assert layout.axes == ("data", None, None)


def test_model_parallel_get_tensor_layout(mesh24):
    layout_map = dist.LayoutMap(mesh24)
    layout_map[".*kernel"] = dist.TensorLayout([None, "model"])
    layout_map[".*bias"] = dist.TensorLayout(["model"])
    layout_map["/model/layer/tensor"] = ("data", None)
    d = dist.ModelParallel(layout_map=layout_map, batch_dim_name="data")
    layout = d.get_tensor_layout("/model/layer/tensor")
    assert layout.device_mesh == mesh24 and layout.axes == ("data", None)
    assert d.get_tensor_layout("/model/layer/other_tensor") is None


def test_model_parallel_get_variable_layout_with_explicit_layout(mesh24):
    layout_map = dist.LayoutMap(mesh24)
    layout_map[".*kernel"] = dist.TensorLayout([None, "model"])
    d = dist.ModelParallel(layout_map=layout_map, batch_dim_name="data")
    explicit_mesh = dist.DeviceMesh((8,), ["x"], DEVICES)
    explicit_layout = dist.TensorLayout(["x"], explicit_mesh)
    layout = d.get_variable_layout(Variable((3,), "kernel", explicit_layout))
    assert layout.device_mesh == explicit_mesh and layout.axes == explicit_layout.axes


def test_model_parallel_distribute_dataset(mesh24):
    dataset = np.arange(8)
    d = dist.ModelParallel(layout_map=dist.LayoutMap(mesh24), batch_dim_name="data")
    assert d.distribute_dataset(dataset) is dataset


# --- LayoutMapTest ---


@pytest.fixture
def layouts():
    return {"sharded_2d": dist.TensorLayout([None, "model"]),
            "sharded_1d": dist.TensorLayout(["model"]),
            "replicated_2d": dist.TensorLayout([None, None]),
            "replicated_1d": dist.TensorLayout([None])}


def test_layout_map_add(mesh42, layouts):
    layout_map = dist.LayoutMap(mesh42)
    layout_map["dense/kernel"] = layouts["sharded_2d"]
    layout_map["dense/bias"] = layouts["sharded_1d"]
    layout_map["conv/bias"] = ("model",)  # the tuple shortcut
    assert len(layout_map) == 3
    kernel_layout = layout_map["dense/kernel"]
    assert kernel_layout.axes == (None, "model") and kernel_layout.device_mesh == mesh42
    bias_layout = layout_map["dense/bias"]
    assert bias_layout.axes == ("model",) and bias_layout.device_mesh == mesh42
    assert layout_map["conv/bias"].axes == ("model",)
    with pytest.raises(ValueError, match="dense/kernel already exist"):
        layout_map["dense/kernel"] = layouts["sharded_2d"]
    with pytest.raises(ValueError, match="should be a TensorLayout"):
        layout_map["conv.kernel"] = ["a", "b"]


def test_layout_map_get(mesh42, layouts):
    layout_map = dist.LayoutMap(mesh42)
    layout_map["dense/kernel"] = layouts["sharded_2d"]
    layout_map["dense/bias"] = layouts["sharded_1d"]
    layout_map[".*dense.*kernel"] = layouts["replicated_2d"]
    layout_map[".*dense.*bias"] = layouts["replicated_1d"]
    layout_map[".*bias"] = layouts["sharded_1d"]
    assert layout_map["dense/kernel"] is layouts["sharded_2d"]
    assert layout_map["dense/bias"] is layouts["sharded_1d"]
    assert layout_map["dense_2/kernel"] is layouts["replicated_2d"]
    with pytest.raises(ValueError, match="Path 'dense_2/bias' matches multiple layout"):
        layout_map["dense_2/bias"]
    assert layout_map["conv2d/kernel"] is None
    assert layout_map["conv2d/bias"] is layouts["sharded_1d"]


def test_layout_map_delete(mesh42, layouts):
    layout_map = dist.LayoutMap(mesh42)
    layout_map["dense/kernel"] = layouts["sharded_2d"]
    layout_map["dense/bias"] = layouts["sharded_1d"]
    assert layout_map.pop("dense/kernel") is layouts["sharded_2d"]
    with pytest.raises(KeyError):
        layout_map.pop(".*bias")  # the exact key, not the regex
    del layout_map["dense/bias"]
    assert len(layout_map) == 0


def test_layout_map_len_and_iter(mesh42, layouts):
    layout_map = dist.LayoutMap(mesh42)
    assert len(layout_map) == 0
    layout_map["dense/kernel"] = layouts["sharded_2d"]
    layout_map["dense/bias"] = layouts["sharded_1d"]
    assert len(layout_map) == 2
    assert list(layout_map.keys()) == ["dense/kernel", "dense/bias"]
    assert list(layout_map.items()) == [("dense/kernel", layouts["sharded_2d"]),
                                        ("dense/bias", layouts["sharded_1d"])]


# --- DataShardingIntegrationTest: the process-group arithmetic, processes simulated ---


def test_data_shard_ids_of_simulated_processes(monkeypatch, mesh42):
    d = dist.ModelParallel(layout_map=dist.LayoutMap(mesh42), batch_dim_name="data")
    assert d.num_model_replicas == 4
    monkeypatch.setattr(_meshlayout, "_process_count", lambda: 8)
    ids = []
    for pid in range(8):
        monkeypatch.setattr(_meshlayout, "_process_index", lambda pid=pid: pid)
        assert d.num_data_shards == 4
        ids.append(d.data_shard_id)
    assert ids == [0, 0, 1, 1, 2, 2, 3, 3]  # contiguous process groups share a shard
    monkeypatch.setattr(_meshlayout, "_process_count", lambda: 2)
    monkeypatch.setattr(_meshlayout, "_process_index", lambda: 1)
    assert (d.num_data_shards, d.data_shard_id) == (2, 1)


# --- Arguments as Keras takes them, Keras' errors ---


def test_module_names_are_keras_distribution_names():
    import meshlayout as keras
    assert keras.distribution is dist
    for name in ("DataParallel", "DeviceMesh", "LayoutMap", "ModelParallel", "TensorLayout",
                 "distribute_tensor", "distribution", "get_device_count", "initialize",
                 "list_devices", "set_distribution"):
        assert name in dist.__all__ and hasattr(dist, name)
    assert dist.LayoutMap is ml.LayoutMap and dist.DeviceMesh is ml.DeviceMesh
    assert dist.list_devices() == DEVICES and dist.get_device_count() == 8


def test_list_devices_as_keras():
    # Keras: None is the default device type, and type names are lower-cased.
    assert dist.list_devices(None) == DEVICES == dist.list_devices("CPU") == dist.list_devices()
    assert dist.get_device_count("Cpu") == dist.get_device_count(None) == 8
    # GPUs are a device type: as Keras, an empty list where there is none (this machine), one
    # name per GPU (or MESHLAYOUT_GPU_DEVICES virtual ones) where there are some.
    gpus = dist.list_devices("GPU")
    assert all(name.startswith("gpu:") for name in gpus)
    assert dist.get_device_count("gpu") == len(gpus)
    with pytest.raises(ValueError, match="unknown device type 'tpu'"):
        dist.list_devices("TPU")


def test_wrong_types_name_the_value(mesh8):
    with pytest.raises(TypeError, match="TensorLayout axes must be a sequence of mesh axis names, "
                                        "tuples of names or None, got 5"):
        dist.TensorLayout(5)
    with pytest.raises(TypeError, match=r"TensorLayout device_mesh must be a DeviceMesh or None, "
                                        r"got 'mesh' \(of type <class 'str'>\)"):
        dist.TensorLayout(("data",), "mesh")
    layout = dist.TensorLayout(("data",))
    with pytest.raises(TypeError, match="TensorLayout.device_mesh must be a DeviceMesh or None, "
                                        "got 3"):
        layout.device_mesh = 3
    assert layout.device_mesh is None
    with pytest.raises(TypeError, match="LayoutMap device_mesh must be a DeviceMesh or None, got "
                                        r"\[2, 4\]"):
        dist.LayoutMap([2, 4])
    # Keras takes any iterable of axes: a list, a generator, a str as its characters.
    assert dist.TensorLayout(["data", None], mesh8).axes == ("data", None)
    assert dist.TensorLayout(a for a in ("data", None)).axes == ("data", None)
    assert dist.TensorLayout("ab").axes == ("a", "b")


def test_get_data_layout_takes_any_sequence(mesh8):
    d = dist.DataParallel(device_mesh=mesh8)
    for shape in ([16, 3], (16, 3), np.array([16, 3]), (np.int64(16), np.int32(3)), range(16, 18)):
        assert d.get_data_layout(shape).axes == ("data", None)
    with pytest.raises(ValueError, match=r"got an empty shape \(\)"):
        d.get_data_layout(())
    with pytest.raises(TypeError, match="each dimension of data_shape must be an integer, got 2.5"):
        d.get_data_layout((2.5, 3))
    with pytest.raises(TypeError, match="data_shape must be a sequence of integers, got 16"):
        d.get_data_layout(16)


def test_data_parallel_arguments(mesh24):
    with pytest.raises(ValueError, match=r"Expect `mesh` to be an instance of `DeviceMesh`. "
                                         r"Received: mesh=\(8,\) \(of type <class 'tuple'>\)"):
        dist.DataParallel(device_mesh=(8,))
    with pytest.warns(UserWarning, match="Expect the input mesh to be 1D"):
        d = dist.DataParallel(device_mesh=mesh24)
    assert d.batch_dim_name == "data" and d.num_model_replicas == 8
    assert d.get_data_layout((16, 4)).axes == ("data", None)
    d = dist.DataParallel(devices=np.array(DEVICES[:4]))
    assert d.device_mesh.shape == (4,) and d.num_model_replicas == 4
    with pytest.raises(ValueError, match="Shape and axis_names should have same size"):
        dist.DataParallel(devices=np.array(DEVICES).reshape(2, 4))  # a 1-D "batch" mesh only
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dist.DataParallel(device_mesh=None, devices=[]).device_mesh.shape == (8,)
    assert repr(dist.DataParallel()) == (
        "<DataParallel device_mesh=<DeviceMesh shape=(8,), axis_names=['batch']>>")


def test_model_parallel_arguments(mesh24):
    layout_map = dist.LayoutMap(mesh24)
    with pytest.raises(ValueError, match="You must specify a layout_map argument."):
        dist.ModelParallel()
    with pytest.raises(ValueError, match=r"Argument `layout_map` must be a `LayoutMap` instance. "
                                         r"Received: layout_map=\{\}"):
        dist.ModelParallel(layout_map={})
    with pytest.raises(TypeError):
        dist.ModelParallel(layout_map)  # keyword-only, as Keras >= 3.4
    # Keras >= 3.4 ignores device_mesh= (the mesh is the map's) and unknown keywords.
    other = dist.DeviceMesh((8,), ["x"])
    d = dist.ModelParallel(layout_map=layout_map, device_mesh=other, unknown=1)
    assert d.device_mesh == mesh24 and d.batch_dim_name == "data"
    assert d.num_model_replicas == 2
    assert dist.ModelParallel(layout_map=layout_map, batch_dim_name="model").num_model_replicas == 4
    with pytest.raises(ValueError, match=r"batch_dim_name 'batch' is not an axis of "
                                         r"mesh\[data=2,model=4\]; its axes are \['data', 'model'\]"):
        dist.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    with pytest.raises(ValueError, match="ModelParallel needs a LayoutMap with a device mesh"):
        dist.ModelParallel(layout_map=dist.LayoutMap())
    assert repr(d) == ("<ModelParallel device_mesh=<DeviceMesh shape=(2, 4), "
                       "axis_names=['data', 'model']>>")
    assert d.layout_map is layout_map


def test_get_variable_layout_of_a_wrong_object(mesh24):
    dp = dist.DataParallel(device_mesh=dist.DeviceMesh((8,), ["data"]))
    mp = dist.ModelParallel(layout_map=dist.LayoutMap(mesh24))
    for d in (dp, mp):
        with pytest.raises(TypeError, match=r"get_variable_layout expects a variable \(an object "
                                             r"with .shape and .path\), got 3 .* no .(shape|path)"):
            d.get_variable_layout(3)
    with pytest.raises(TypeError, match="variable.path must be a str, got 7"):
        mp.get_variable_layout(Variable((2,), 7))
    with pytest.raises(TypeError, match="each dimension of variable.shape must be an integer"):
        dp.get_variable_layout(Variable(("a",), "v"))


def test_set_distribution_takes_a_distribution_or_none(mesh8):
    with pytest.raises(ValueError, match="set_distribution expects a Distribution"):
        dist.set_distribution("data_parallel")
    d = dist.DataParallel(device_mesh=mesh8)
    dist.set_distribution(d)
    assert dist.distribution() is d
    with dist.DataParallel().scope() as inner:
        assert dist.distribution() is inner
    assert dist.distribution() is d
    dist.set_distribution(None)
    assert dist.distribution() is None


def test_scope_restores_on_exception(mesh8):
    d = dist.DataParallel(device_mesh=mesh8)
    with pytest.raises(RuntimeError, match="inside"):
        with d.scope():
            raise RuntimeError("inside")
    assert dist.distribution() is None
    assert _meshlayout._current_cpp_distribution() is None


def test_one_process_data_sharding(mesh24):
    d = dist.ModelParallel(layout_map=dist.LayoutMap(mesh24))
    assert (d.num_processes, d.process_id, d.num_data_shards, d.data_shard_id) == (1, 0, 1, 0)
    assert d.process_batch_rows(np.int64(8)) == (0, 8)
    with pytest.raises(ValueError):
        d.process_batch_rows(0)
    assert d.auto_shard_dataset is True
    d.auto_shard_dataset = False
    assert d.auto_shard_dataset is False and d._cpp.auto_shard_dataset is False


# --- What C++ sees ---


def test_cpp_follows_the_current_distribution(mesh24):
    assert _meshlayout._current_cpp_distribution() is None
    layout_map = dist.LayoutMap(mesh24)
    layout_map["d1/output"] = ("data", None)
    mp = dist.ModelParallel(layout_map=layout_map, batch_dim_name="model")
    layout_map["d2/kernel"] = (None, "model")  # added after: C++ reads the rules when current
    with mp.scope():
        cpp = _meshlayout._current_cpp_distribution()
        assert cpp.kind == "ModelParallel" and cpp.batch_dim_name == "model"
        assert cpp.device_mesh == mesh24 and cpp.num_model_replicas == 4
        assert cpp.get_tensor_layout("d1/output") == mp.get_tensor_layout("d1/output")
        assert cpp.get_tensor_layout("d2/kernel").axes == (None, "model")
        assert cpp.get_tensor_layout("d3/kernel") is None
        with dist.DataParallel().scope():
            inner = _meshlayout._current_cpp_distribution()
            assert inner.kind == "DataParallel" and inner.batch_dim_name == "batch"
            assert inner.get_data_layout([16, 2]).axes == ("batch", None)
        assert _meshlayout._current_cpp_distribution().kind == "ModelParallel"
        with dist.Distribution(mesh24).scope():  # the base class: nothing for C++
            assert _meshlayout._current_cpp_distribution() is None
    assert _meshlayout._current_cpp_distribution() is None
    dist.set_distribution(mp)
    assert _meshlayout._current_cpp_distribution().kind == "ModelParallel"
    dist.set_distribution(None)
    assert _meshlayout._current_cpp_distribution() is None


def test_current_distribution_is_per_thread(mesh8):
    d = dist.DataParallel(device_mesh=mesh8)
    dist.set_distribution(d)
    seen = {}

    def other_thread():
        seen["python"] = dist.distribution()
        seen["cpp"] = _meshlayout._current_cpp_distribution()
        with dist.DataParallel().scope():
            seen["inner"] = _meshlayout._current_cpp_distribution().batch_dim_name
        dist.set_distribution(dist.DataParallel())  # left set: released when the thread ends

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert seen == {"python": None, "cpp": None, "inner": "batch"}
    assert dist.distribution() is d
    assert _meshlayout._current_cpp_distribution().batch_dim_name == "data"
    # Many threads ending with a distribution set, and the interpreter exiting with one set.
    threads = [threading.Thread(target=dist.set_distribution, args=(dist.DataParallel(),))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert dist.distribution() is d
    r = run_child("from meshlayout import distribution as dist\n"
                  "dist.set_distribution(dist.DataParallel())\n"
                  "print(dist.distribution().num_model_replicas)")
    assert r.returncode == 0 and r.stdout == "8\n", r.stdout + r.stderr


# --- initialize() under mpirun ---

MPI_SCRIPT = """
import os, sys
import meshlayout as ml
from meshlayout import distribution as dist
mode, out = sys.argv[1], sys.argv[2]  # each process writes its own file (mpirun interleaves stdout)
rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "x"))
if mode == "bad":
    try:
        dist.initialize(num_processes=3)
        line = "no error"
    except ValueError as e:
        line = f"ValueError: {e}"
else:
    dist.initialize()
    d = dist.DataParallel()
    mesh = dist.DeviceMesh((2, 4), ["data", "model"])
    mp = dist.ModelParallel(layout_map=dist.LayoutMap(mesh))
    line = " ".join(map(str, (d.process_id, d.num_processes, len(ml.list_devices()),
                              d.num_data_shards, d.data_shard_id, d.process_batch_rows(8),
                              mp.num_model_replicas, mp.data_shard_id)))
with open(os.path.join(out, rank), "w") as f:
    f.write(line)
"""


def run_mpirun(np_, mode, tmp_path):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("no mpirun")
    if any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK")):
        pytest.skip("already under mpirun")
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(ml.__file__)))
    env = dict(os.environ, MESHLAYOUT_CPU_DEVICES="8", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONPATH=os.pathsep.join([package_dir] + [p for p in [os.environ.get(
                   "PYTHONPATH")] if p]))
    r = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(np_),
                        sys.executable, "-c", MPI_SCRIPT, mode, str(tmp_path)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return [(tmp_path / str(rank)).read_text() for rank in range(np_)]


def test_initialize_under_mpirun_np2(tmp_path):
    lines = run_mpirun(2, "good", tmp_path)
    # process, processes, global devices, data shards, shard id, rows of a batch of 8, and
    # ModelParallel on (data=2, model=4): 2 replicas, one per process
    assert lines == ["0 2 8 2 0 (0, 4) 2 0", "1 2 8 2 1 (4, 8) 2 1"]


def test_initialize_under_mpirun_disagreeing_num_processes(tmp_path):
    for line in run_mpirun(2, "bad", tmp_path):
        assert line.startswith("ValueError:") and "num_processes" in line and "3" in line, line


def test_a_keras_script_with_meshlayout_imported_as_keras():
    # The distribution part of Keras' distributed-training guide, with `import keras` swapped.
    import meshlayout as keras

    devices = keras.distribution.list_devices()
    data_parallel = keras.distribution.DataParallel(devices=devices)
    keras.distribution.set_distribution(data_parallel)
    assert data_parallel.get_data_layout((32, 784)).axes == ("batch", None)

    mesh_2d = keras.distribution.DeviceMesh(shape=(2, 4), axis_names=["data", "model"],
                                            devices=devices)
    layout_map = keras.distribution.LayoutMap(mesh_2d)
    layout_map["d1/kernel"] = (None, "model")
    layout_map["d1/bias"] = ("model",)
    layout_map["d2/output"] = ("data", None)
    model_parallel = keras.distribution.ModelParallel(layout_map=layout_map,
                                                      batch_dim_name="data")
    keras.distribution.set_distribution(model_parallel)
    assert keras.distribution.distribution() is model_parallel
    assert model_parallel.get_variable_layout(Variable((784, 64), "d1/kernel")).axes == (
        None, "model")
    assert model_parallel.get_tensor_layout("d2/output").axes == ("data", None)
    assert model_parallel.get_variable_layout(Variable((64,), "d2/bias")).axes == (None,)
    assert _meshlayout._current_cpp_distribution().get_tensor_layout("d1/bias").axes == ("model",)
