# Training from Python under `mpirun -np 2` (issue 29): a Keras 3 ModelParallel model on a 2x4
# mesh spanning both processes (4 virtual devices each) fits from numpy, each process feeding
# only its rows of each batch; both processes report the same losses, bit for bit, and they
# equal the one-process run's to rounding (the loss sums are added per process, then across);
# so do the compiled metric's running means.
import os
import shutil
import subprocess
import sys

import pytest

import meshlayout as ml

SCRIPT = """
import os, sys
import numpy as np
import meshlayout as keras
from meshlayout import distribution as dist, layers
out = sys.argv[1]
if os.environ.get("OMPI_COMM_WORLD_SIZE"):
    dist.initialize()
rank = os.environ.get("OMPI_COMM_WORLD_RANK", "single")
mesh = dist.DeviceMesh((2, 4), ["batch", "model"])
layout_map = dist.LayoutMap(mesh)
layout_map["seq/d1/kernel"] = (None, "model")
layout_map["seq/d2/kernel"] = ("model", None)
with dist.ModelParallel(layout_map=layout_map).scope():
    model = keras.Sequential([keras.Input((4,)), layers.Dense(8, activation="relu", name="d1"),
                              layers.Dense(1, name="d2")], name="seq")
i = np.arange(16)[:, None]; j = np.arange(4)[None, :]
x = (((31 * i + 17 * j) % 23) - 11).astype(np.float32) / 8
y = ((((13 * np.arange(16)) % 7) - 3).astype(np.float32) / 4)[:, None]
model.compile(optimizer="adam", loss="mse", metrics=["mae"])
h = model.fit(x, y, batch_size=4, epochs=3, verbose=0)
with open(os.path.join(out, rank), "w") as f:
    f.write(" ".join(v.hex() for v in h.history["loss"]) + "\\n")
    f.write(" ".join(v.hex() for v in model.predict(x)[:, 0].astype(float)) + "\\n")
    f.write(" ".join(v.hex() for v in h.history["mae"]))
"""


def env_with_package():
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(ml.__file__)))
    return dict(os.environ, MESHLAYOUT_CPU_DEVICES="8", OMPI_ALLOW_RUN_AS_ROOT="1",
                OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                PYTHONPATH=os.pathsep.join([package_dir] + [p for p in [os.environ.get(
                    "PYTHONPATH")] if p]))


def test_fit_under_mpirun_np2(tmp_path):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("no mpirun")
    if any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK")):
        pytest.skip("already under mpirun")
    env = env_with_package()
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2",
                        sys.executable, "-c", SCRIPT, str(tmp_path)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    single, p0, p1 = ((tmp_path / name).read_text().split("\n")
                      for name in ("single", "0", "1"))
    assert p0 == p1  # every process: the same losses and predictions, bit for bit
    for a, b in zip(single[0].split(), p0[0].split()):
        assert float.fromhex(a) == pytest.approx(float.fromhex(b), rel=1e-12)
    for a, b in zip(single[1].split(), p0[1].split()):
        assert float.fromhex(a) == pytest.approx(float.fromhex(b), rel=1e-5, abs=1e-6)
    # The metrics' running means: each process gathers every step's outputs and targets.
    assert len(p0[2].split()) == 3
    for a, b in zip(single[2].split(), p0[2].split()):
        assert float.fromhex(a) == pytest.approx(float.fromhex(b), rel=1e-5)
