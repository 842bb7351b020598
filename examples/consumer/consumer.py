"""The install consumer, Python side: run with PYTHONPATH=<prefix site-packages> from
outside the source tree. Seed 003's lookups, distribute/gather, and a checkpoint round trip."""
import os
import tempfile

import numpy as np

import meshlayout as ml

assert not ml.__file__.startswith(os.environ.get("MESHLAYOUT_SOURCE_DIR", "/nonexistent")), ml.__file__
mesh = ml.DeviceMesh((2, 4), ["batch", "model"])
layout_map = ml.LayoutMap(mesh)
layout_map["dense.*kernel"] = (None, "model")
assert layout_map["dense_1.kernel"].device_mesh == mesh
assert layout_map["my_model/conv3d_1/kernel"] is None
x = np.arange(48, dtype=np.float32).reshape(8, 6)
a = ml.distribute_tensor(x, ml.TensorLayout(("batch", None), mesh))
np.testing.assert_array_equal(np.asarray(a), x)
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "x.safetensors")
    ml.save(path, {"x": a})
    b = ml.load(ml.open_checkpoint(path), {"x": ml.TensorLayout((None, "model"), mesh)})["x"]
    np.testing.assert_array_equal(np.asarray(b), x)
print(f"consumer.py: meshlayout works from {os.path.dirname(ml.__file__)}")
