# BF16 arrays in numpy (issue 29 item 3): numpy has no bfloat16, so an Array of BF16 reads as
# ml_dtypes.bfloat16 when the ml_dtypes package is installed, else as its raw bits (uint16);
# the bits are the file's either way, and ml_dtypes.bfloat16 arrays distribute as BF16.
import json
import struct

import numpy as np
import pytest

import meshlayout as ml

# bfloat16 bits of 1.0, -2.0, 0.5, 3.0 (the upper halves of their float32 bits)
BITS = np.array([0x3F80, 0xC000, 0x3F00, 0x4040], np.uint16)


def bf16_checkpoint(path):
    header = json.dumps({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}})
    header += " " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header.encode() + BITS.tobytes())
    return ml.open_checkpoint(str(path))


def has_ml_dtypes():
    try:
        import ml_dtypes  # noqa: F401
        return True
    except ImportError:
        return False


def test_bf16_arrays_read_as_bfloat16_or_raw_bits(tmp_path):
    mesh = ml.DeviceMesh((2, 4), ["batch", "model"])
    arrays = ml.load(bf16_checkpoint(tmp_path / "w.safetensors"),
                     {"w": ml.TensorLayout(("batch", None), mesh)})
    a = arrays["w"]
    assert a.dtype == "bfloat16"
    host = np.asarray(a)
    if has_ml_dtypes():
        import ml_dtypes
        assert host.dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(host.astype(np.float32), [[1, -2], [0.5, 3]])
    else:
        assert host.dtype == np.uint16  # the documented fallback: the raw bits
    np.testing.assert_array_equal(host.view(np.uint16).reshape(-1), BITS)
    assert a.addressable_shards[0].data.view(np.uint16).tolist() == [[0x3F80, 0xC000]]


def test_bfloat16_numpy_arrays_distribute_as_bf16():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([[1, -2], [0.5, 3]], dtype=ml_dtypes.bfloat16)
    a = ml.distribute_tensor(x, ml.TensorLayout((None, "model"),
                                                ml.DeviceMesh((2, 2), ["batch", "model"])))
    assert a.dtype == "bfloat16"
    np.testing.assert_array_equal(np.asarray(a).view(np.uint16), x.view(np.uint16))


def test_uint16_is_not_taken_for_bf16():
    with pytest.raises(ValueError, match="uint16"):
        ml.distribute_tensor(BITS, ml.TensorLayout((None,), ml.DeviceMesh((8,), ["b"])))
