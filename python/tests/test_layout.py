# DeviceMesh, TensorLayout, list_devices, get_device_count: Keras' names, values and errors.
import numpy as np
import pytest

import meshlayout as ml


def test_devices():
    assert ml.list_devices() == [f"cpu:{i}" for i in range(8)]
    assert ml.get_device_count() == 8
    assert all(name.startswith("gpu:") for name in ml.list_devices("gpu"))  # [] without a GPU
    with pytest.raises(ValueError, match="'cpu' and 'gpu'"):
        ml.list_devices("tpu")


def test_device_mesh_properties():
    mesh = ml.DeviceMesh((2, 4), ["data", "model"])
    assert mesh.shape == (2, 4)
    assert mesh.axis_names == ["data", "model"]
    assert isinstance(mesh.devices, np.ndarray) and mesh.devices.shape == (2, 4)
    assert mesh.devices[1, 3] == "cpu:7"
    assert repr(mesh) == "<DeviceMesh shape=(2, 4), axis_names=['data', 'model']>"
    assert mesh == ml.DeviceMesh([2, 4], ("data", "model"))
    assert hash(mesh) == hash(ml.DeviceMesh((2, 4), ["data", "model"]))


def test_device_mesh_explicit_devices_any_shape():
    devices = np.array([f"cpu:{i}" for i in reversed(range(8))]).reshape(4, 2)
    mesh = ml.DeviceMesh((8,), ["data"], devices=devices)
    assert list(mesh.devices) == [f"cpu:{i}" for i in reversed(range(8))]


def test_device_mesh_errors():
    with pytest.raises(ValueError, match="Shape and axis_names should have same size"):
        ml.DeviceMesh((2, 4), ["data"])
    with pytest.raises(ValueError, match="cannot be empty"):
        ml.DeviceMesh((), [])
    with pytest.raises(ValueError, match="number of devices"):
        ml.DeviceMesh((3,), ["data"], devices=["cpu:0", "cpu:1"])


def test_device_mesh_takes_any_sequence_as_keras_does():
    devices = [f"cpu:{i}" for i in range(4)]
    # Keras' own test: an empty axis_names string is its ValueError, not a TypeError.
    with pytest.raises(ValueError, match="Shape and axis_names cannot be empty"):
        ml.DeviceMesh((4,), "", devices)
    with pytest.raises(ValueError, match="Shape and axis_names cannot be empty"):
        ml.DeviceMesh(np.array([], dtype=np.int64), ["data"])
    mesh = ml.DeviceMesh(np.array([2, 2]), ("data", "model"), devices)
    assert mesh.shape == (2, 2)
    assert ml.DeviceMesh((np.int32(4),), ["data"], devices).shape == (4,)
    assert ml.DeviceMesh(range(2, 3), "d", devices[:2]).axis_names == ["d"]
    with pytest.raises(TypeError, match="shape must hold integers, got 2.5"):
        ml.DeviceMesh((2.5,), ["data"])
    with pytest.raises(TypeError, match="axis_names must hold strings, got 3"):
        ml.DeviceMesh((4,), [3])
    with pytest.raises(TypeError, match="shape must be a sequence of integers"):
        ml.DeviceMesh(4, ["data"])


def test_tensor_layout_axes_and_mesh():
    layout = ml.TensorLayout((None, "model"))
    assert layout.axes == (None, "model") and layout.device_mesh is None
    mesh = ml.DeviceMesh((2, 4), ["data", "model"])
    layout.device_mesh = mesh
    assert layout.device_mesh == mesh
    assert repr(layout) == ("<TensorLayout axes=(None, 'model'), device_mesh=<DeviceMesh "
                            "shape=(2, 4), axis_names=['data', 'model']>>")
    with pytest.raises(ValueError, match="Cannot override device mesh value"):
        layout.device_mesh = mesh
    both = ml.TensorLayout((("data", "model"), None), mesh)
    assert both.axes == (("data", "model"), None)


def test_tensor_layout_invalid_axis():
    mesh = ml.DeviceMesh((2, 4), ["data", "model"])
    with pytest.raises(ValueError, match="Invalid axis names for Layout"):
        ml.TensorLayout(("batch", None), mesh)
    with pytest.raises(ValueError, match="a TensorLayout axis is None"):
        ml.TensorLayout((1, None))
