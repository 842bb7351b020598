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
