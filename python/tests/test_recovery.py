# A Python exception never leaves the process or a device in a state where the next call
# fails: after each failing call, device memory is back where it was and the same kind of
# call succeeds.
import numpy as np
import pytest

import meshlayout as ml


def live_bytes():
    return {d: s["bytes_live"] for d, s in ml.device_memory().items()}


@pytest.fixture
def mesh():
    return ml.DeviceMesh((2, 4), ["data", "model"])


def test_failed_distribute_frees_everything(mesh):
    before = live_bytes()
    x = np.ones((8, 6), np.float32)
    for bad in [ml.TensorLayout(("data",), mesh), ml.TensorLayout(("data", None))]:
        with pytest.raises(ValueError):
            ml.distribute_tensor(x, bad)
        assert live_bytes() == before
    a = ml.distribute_tensor(x, ml.TensorLayout(("data", None), mesh))
    np.testing.assert_array_equal(np.asarray(a), x)
    del a
    assert live_bytes() == before


def test_over_budget_is_a_memory_error_and_frees_everything(mesh, monkeypatch):
    monkeypatch.setenv("MESHLAYOUT_DEVICE_MEMORY", "1KiB")
    before = live_bytes()
    with pytest.raises(MemoryError, match="over its budget of 1.0 KiB"):
        ml.distribute_tensor(np.ones((64, 64), np.float32), ml.TensorLayout(("data", None), mesh))
    assert live_bytes() == before
    small = ml.distribute_tensor(np.ones((8, 8), np.float32), ml.TensorLayout(("data", "model"), mesh))
    np.testing.assert_array_equal(np.asarray(small), np.ones((8, 8), np.float32))


def test_failed_load_and_save_free_everything(tmp_path, mesh):
    a = ml.distribute_tensor(np.arange(16, dtype=np.float32), ml.TensorLayout(("model",), mesh))
    path = str(tmp_path / "w.safetensors")
    ml.save(path, {"w": a})
    before = live_bytes()
    ckpt = ml.open_checkpoint(path)
    with pytest.raises(KeyError):
        ml.load(ckpt, {"w": ml.TensorLayout((None,), mesh), "v": ml.TensorLayout((None,), mesh)})
    assert live_bytes() == before
    with pytest.raises(OSError):
        ml.save(str(tmp_path / "missing" / "w.safetensors"), {"w": a})
    assert list(p.name for p in tmp_path.iterdir()) == ["w.safetensors"]  # no temp file left
    w = ml.load(ckpt, {"w": ml.TensorLayout((None,), mesh)})["w"]
    np.testing.assert_array_equal(np.asarray(w), np.arange(16, dtype=np.float32))


def test_failed_lookups_and_insertions_leave_the_map_usable(mesh):
    lm = ml.LayoutMap(mesh)
    lm["a.*"] = ("model",)
    lm[".*b"] = (None,)
    for _ in range(3):
        with pytest.raises(ValueError):
            lm["a/b"]
        with pytest.raises(ValueError):
            lm["(unclosed"] = (None,)
    assert lm["a/x"].axes == ("model",) and lm["x/b"].axes == (None,)
    lm["c"] = ("data",)
    assert len(lm) == 3
