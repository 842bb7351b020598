# distribute_tensor from numpy and from Arrays, gathering with numpy.asarray, and shards read
# as numpy views without a copy.
import numpy as np
import pytest

import meshlayout as ml


@pytest.fixture
def mesh():
    return ml.DeviceMesh((2, 4), ["data", "model"])


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "int64", "uint8", "bool"])
def test_distribute_and_gather_round_trip(mesh, dtype):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((8, 6)) * 10).astype(dtype)
    a = ml.distribute_tensor(x, ml.TensorLayout(("data", "model"), mesh))
    assert a.shape == (8, 6) and a.dtype == dtype
    np.testing.assert_array_equal(np.asarray(a), x)


def test_shards_are_views_of_their_boxes(mesh):
    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    a = ml.distribute_tensor(x, ml.TensorLayout(("data", None), mesh))
    shards = a.addressable_shards
    assert [s.device for s in shards] == ml.list_devices()
    for s in shards:
        np.testing.assert_array_equal(s.data, x[s.index])
        assert not s.data.flags.owndata and not s.data.flags.writeable
    # The view reads the device buffer itself: two reads share memory.
    assert np.shares_memory(shards[0].data, a.addressable_shards[0].data)
    # The view keeps the Array alive.
    view = a.addressable_shards[5].data
    del a, shards
    np.testing.assert_array_equal(view, x[4:8])


def test_uneven_split_and_reshard(mesh):
    x = np.random.default_rng(1).standard_normal((7, 5)).astype(np.float32)
    a = ml.distribute_tensor(x, ml.TensorLayout(("model", None), mesh))
    b = ml.distribute_tensor(a, ml.TensorLayout((None, ("data", "model")), mesh))
    assert b.layout == ml.TensorLayout((None, ("data", "model")), mesh)
    np.testing.assert_array_equal(np.asarray(b), x)
    np.testing.assert_array_equal(np.asarray(b, dtype=np.float64), x.astype(np.float64))


def test_non_contiguous_and_list_input(mesh):
    x = np.arange(48, dtype=np.int32).reshape(6, 8).T  # Fortran order view
    a = ml.distribute_tensor(x, ml.TensorLayout((None, "data"), mesh))
    np.testing.assert_array_equal(np.asarray(a), x)
    b = ml.distribute_tensor([[1.5, 2.5], [3.5, 4.5]], ml.TensorLayout(("data", None), mesh))
    assert b.dtype == "float64"
    np.testing.assert_array_equal(np.asarray(b), [[1.5, 2.5], [3.5, 4.5]])


def test_distribute_errors(mesh):
    x = np.zeros((8, 6), np.float32)
    with pytest.raises(ValueError, match="no mesh|device mesh|mesh"):
        ml.distribute_tensor(x, ml.TensorLayout(("data", None)))
    with pytest.raises(ValueError, match="rank|dimension"):
        ml.distribute_tensor(x, ml.TensorLayout(("data",), mesh))
    with pytest.raises(ValueError, match="complex128"):
        ml.distribute_tensor(np.zeros(4, np.complex128), ml.TensorLayout((None,), mesh))


# Inputs numpy cannot convert (issue 24) once surfaced as pybind11's "Internal error: ...
# error indicator not set": the binder cleared numpy's exception and raised nothing. Now
# numpy's error propagates (MemoryError, whatever an __array__ raised, unchanged), a
# ValueError or TypeError with meshlayout's message naming what was passed and what is
# expected, and nothing is left on a device.
class Boom(Exception):
    pass


class RaisingArray:
    def __init__(self, error):
        self.error = error

    def __array__(self, dtype=None):
        raise self.error


class RaisingSequence:  # numpy reads it as a sequence: len() then items
    def __len__(self):
        return 3

    def __getitem__(self, i):
        raise MemoryError("no room for item %d" % i)


def live_bytes():
    return {d: s["bytes_live"] for d, s in ml.device_memory().items()}


@pytest.mark.parametrize("ragged", [[[1, 2], [3]], [[1.0], [2.0, 3.0], []], [[[1, 2], [3, 4]], [[5, 6]]]])
def test_ragged_list_is_a_value_error(mesh, ragged):
    before = live_bytes()
    with pytest.raises(ValueError, match=r"distribute_tensor: the list passed as `tensor`.*"
                                         r"inhomogeneous.*expected") as e:
        ml.distribute_tensor(ragged, ml.TensorLayout((None, None), mesh))
    assert "Internal error" not in str(e.value)
    assert e.value.__cause__ is not None  # numpy's own error, chained
    assert live_bytes() == before


def test_conversion_errors_propagate_unchanged(mesh):
    before = live_bytes()
    layout = ml.TensorLayout((None,), mesh)
    for error in [MemoryError("numpy could not allocate"), Boom("no array for you"), KeyError("k")]:
        with pytest.raises(type(error)) as e:
            ml.distribute_tensor(RaisingArray(error), layout)
        assert e.value is error
        assert live_bytes() == before
    for error in [ValueError("bad values"), TypeError("bad type")]:  # the same type, explained
        with pytest.raises(type(error), match=r"the RaisingArray passed as `tensor` does not "
                                              r"convert to a numpy array: bad .*expected") as e:
            ml.distribute_tensor(RaisingArray(error), layout)
        assert e.value.__cause__ is error
        assert live_bytes() == before
    with pytest.raises(MemoryError, match="no room for item 0"):
        ml.distribute_tensor(RaisingSequence(), layout)
    with pytest.raises(MemoryError):  # numpy's own: 2**45 int64 do not fit
        ml.distribute_tensor(range(2**45), layout)
    assert live_bytes() == before


def test_inputs_without_a_numeric_dtype_name_themselves(mesh):
    before = live_bytes()
    for bad, name in [([object(), object()], "list"), ({"a": 1}, "dict"), ("text", "str"),
                      (None, "NoneType")]:
        with pytest.raises((ValueError, TypeError), match=rf"the {name} passed as `tensor`.*"
                                                          r"expected") as e:
            ml.distribute_tensor(bad, ml.TensorLayout(() if name != "list" else (None,), mesh))
        assert "Internal error" not in str(e.value)
    assert live_bytes() == before
    # The same calls with good input still work.
    a = ml.distribute_tensor([[1, 2], [3, 4]], ml.TensorLayout((None, "data"), mesh))
    np.testing.assert_array_equal(np.asarray(a), [[1, 2], [3, 4]])


def test_failed_reshard_leaves_nothing_on_the_devices(mesh, monkeypatch):
    x = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    a = ml.distribute_tensor(x, ml.TensorLayout(("data", "model"), mesh))  # 2 KiB a device
    before = live_bytes()
    with pytest.raises(ValueError, match="rank|dimension"):
        ml.distribute_tensor(a, ml.TensorLayout(("data",), mesh))
    assert live_bytes() == before
    monkeypatch.setenv("MESHLAYOUT_DEVICE_MEMORY", "8KiB")
    with pytest.raises(MemoryError):  # replicated: 16 KiB a device
        ml.distribute_tensor(a, ml.TensorLayout((None, None), mesh))
    assert live_bytes() == before
    monkeypatch.delenv("MESHLAYOUT_DEVICE_MEMORY")
    b = ml.distribute_tensor(a, ml.TensorLayout((None, None), mesh))
    np.testing.assert_array_equal(np.asarray(b), x)
