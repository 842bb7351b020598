# Many Python threads distributing and resharding Arrays at once (issue 24): the GIL is released
# only while C++ moves bytes, and every Python object is made or freed with it held; each
# result is bit-exact against numpy. The stress runs in a child interpreter so that a crash
# (the old binding created the result object without the GIL) fails this test, not the suite.
import textwrap

from child_process import run_child

STRESS = textwrap.dedent(
    """
    import sys
    import threading

    import numpy as np

    import meshlayout as ml

    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    mesh = ml.DeviceMesh((2, 4), ["data", "model"])
    layouts = [ml.TensorLayout(axes, mesh) for axes in [
        ("data", None), (None, "model"), ("model", "data"), (("data", "model"), None),
        (None, None), (None, ("model", "data"))]]
    threads, rounds = 8, int(sys.argv[1])
    barrier = threading.Barrier(threads)
    failures = []

    def work(t):
        rng = np.random.default_rng(t)
        dtype = ["float32", "float64", "int8", "int64", "float16", "uint8", "bool", "int32"][t]
        barrier.wait()
        try:
            for r in range(rounds):
                x = (rng.standard_normal((13 + t, 9 + r % 5)) * 100).astype(dtype)
                a = ml.distribute_tensor(x, layouts[(t + r) % len(layouts)])
                for k in range(1, 4):  # Array -> Array reshards, each checked bit for bit
                    a = ml.distribute_tensor(a, layouts[(t + r + k) % len(layouts)])
                    got = np.asarray(a)
                    assert got.dtype == x.dtype and got.tobytes() == x.tobytes(), (t, r, k)
                for s in a.addressable_shards:
                    assert s.data.tobytes() == x[s.index].tobytes(), (t, r, s.device)
        except BaseException as e:  # noqa: BLE001  (reported by the parent)
            failures.append(repr(e))

    before = ml.device_memory()
    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not failures, failures
    after = ml.device_memory()
    assert all(after[d]["bytes_live"] == before[d]["bytes_live"] for d in before), (before, after)
    print("ok")
    """
)


def test_threads_reshard_arrays_concurrently():
    for debug_malloc in (True, False, False):  # the debug allocator catches any GIL-less allocation
        r = run_child(STRESS, 300, debug_malloc=debug_malloc)
        assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stdout, r.stderr[-3000:])


SAVE_WHILE_DICT_EMPTIED = textwrap.dedent(
    """
    import os
    import sys
    import tempfile
    import threading

    import numpy as np

    import meshlayout as ml

    sys.setswitchinterval(1e-6)
    mesh = ml.DeviceMesh((2, 4), ["data", "model"])
    layout = ml.TensorLayout(("data", "model"), mesh)
    shape = (1024, 2048)
    expected = {f"w{i}": np.full(shape, i + 1, np.float32) for i in range(4)}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(int(sys.argv[1])):
            arrays = {k: ml.distribute_tensor(v, layout) for k, v in expected.items()}
            started = threading.Event()
            path = os.path.join(tmp, f"w{r}.safetensors")

            def save():
                started.set()
                ml.save(path, arrays)

            t = threading.Thread(target=save)
            t.start()
            started.wait()
            arrays.clear()  # the dict held the only references
            # New Arrays of the same size take the freed (cached) device blocks.
            junk = [ml.distribute_tensor(np.full(shape, -7, np.float32), layout) for _ in range(4)]
            t.join()
            del junk
            ckpt = ml.open_checkpoint(path)
            got = ml.load(ckpt, {k: ml.TensorLayout((None, None), mesh) for k in expected})
            for k, v in expected.items():
                assert np.array_equal(np.asarray(got[k]), v), (r, k)
    print("ok")
    """
)


def test_save_keeps_its_arrays_while_another_thread_empties_the_dict():
    r = run_child(SAVE_WHILE_DICT_EMPTIED, 20, debug_malloc=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stdout, r.stderr[-3000:])
