# Checkpoints from Python: save Arrays, open and inspect the file, plan a LayoutMap over it,
# load into Arrays under other layouts; I/O errors are OSError, missing tensors KeyError.
import numpy as np
import pytest

import meshlayout as ml


@pytest.fixture
def mesh():
    return ml.DeviceMesh((2, 4), ["data", "model"])


@pytest.fixture
def saved(tmp_path, mesh):
    rng = np.random.default_rng(7)
    tensors = {
        "dense_1/kernel": rng.standard_normal((16, 8)).astype(np.float32),
        "dense_1/bias": rng.standard_normal((8,)).astype(np.float32),
        "emb/embeddings": rng.standard_normal((6, 4)).astype(np.float32),
    }
    layouts = {"dense_1/kernel": ("data", "model"), "dense_1/bias": ("model",),
               "emb/embeddings": (None, None)}
    arrays = {n: ml.distribute_tensor(x, ml.TensorLayout(layouts[n], mesh))
              for n, x in tensors.items()}
    path = str(tmp_path / "model.safetensors")
    report = ml.save(path, arrays, metadata={"format": "pt"})
    assert report["file_bytes"] > sum(x.nbytes for x in tensors.values())
    return path, tensors


def test_open_and_inspect(saved):
    path, tensors = saved
    ckpt = ml.open_checkpoint(path)
    assert sorted(ckpt.keys()) == sorted(tensors) and len(ckpt) == 3
    assert "dense_1/bias" in ckpt and "nothing" not in ckpt
    assert ckpt.metadata == {"format": "pt"}
    info = {t["name"]: t for t in ckpt.inspect()}
    assert info["dense_1/kernel"]["shape"] == (16, 8)
    assert info["dense_1/kernel"]["dtype"] == "F32" and info["dense_1/kernel"]["bytes"] == 512


def test_plan(saved, mesh):
    path, _ = saved
    lm = ml.LayoutMap(mesh)
    lm["dense.*kernel"] = (None, "model")
    lm["dense.*bias"] = ("model",)
    lm["conv.*kernel"] = (None, None, None, "model")
    p = ml.plan(path, lm)
    by_path = {t["path"]: t for t in p["tensors"]}
    assert by_path["dense_1/kernel"]["shard_shape"] == [16, 2]
    assert [w["kind"] for w in p["warnings"]] == ["unused_rule"] and p["errors"] == []
    assert p["totals"]["tensors"] == 3 and len(p["devices"]) == 8


def test_load_with_dict_and_layout_map(saved, mesh):
    path, tensors = saved
    ckpt = ml.open_checkpoint(path)
    loaded = ml.load(ckpt, {"dense_1/kernel": ml.TensorLayout(("model", None), mesh)})
    k = loaded["dense_1/kernel"]
    assert k.layout == ml.TensorLayout(("model", None), mesh)
    np.testing.assert_array_equal(np.asarray(k), tensors["dense_1/kernel"])
    lm = ml.LayoutMap(mesh)
    lm["dense.*kernel"] = (None, "model")
    everything = ml.load(ckpt, lm)
    assert sorted(everything) == sorted(tensors)
    for name, x in tensors.items():
        np.testing.assert_array_equal(np.asarray(everything[name]), x)
    assert everything["emb/embeddings"].layout == ml.TensorLayout((None, None), mesh)
    half = ml.load(ckpt, {"dense_1/bias": ml.TensorLayout((None,), mesh)}, dtype="float16")
    np.testing.assert_array_equal(np.asarray(half["dense_1/bias"]),
                                  tensors["dense_1/bias"].astype(np.float16))


def test_errors(saved, mesh, tmp_path):
    path, _ = saved
    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        ml.open_checkpoint(str(tmp_path / "missing.safetensors"))
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    with pytest.raises(OSError, match="bad.safetensors"):
        ml.open_checkpoint(str(bad))
    ckpt = ml.open_checkpoint(path)
    with pytest.raises(KeyError, match="nothing"):
        ml.load(ckpt, {"nothing": ml.TensorLayout((None,), mesh)})
    with pytest.raises(ValueError, match="shape"):
        ml.load(ckpt, {"dense_1/bias": ml.TensorLayout((None, None), mesh)})
    a = ml.distribute_tensor(np.ones(4, np.float32), ml.TensorLayout((None,), mesh))
    with pytest.raises(OSError, match="no_such_dir"):
        ml.save(str(tmp_path / "no_such_dir" / "x.safetensors"), {"a": a})
