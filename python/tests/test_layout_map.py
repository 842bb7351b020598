# LayoutMap as keras.distribution.LayoutMap: a MutableMapping with regex keys, None when
# nothing matches, the tuple shortcut, Keras' error texts, scope(), match modes, explain and
# unused_rules.
import collections.abc
import sys
import threading

import pytest
from child_process import run_child

import meshlayout as ml


@pytest.fixture
def mesh():
    return ml.DeviceMesh((2, 4), ["data", "model"])


def test_is_a_mutable_mapping(mesh):
    lm = ml.LayoutMap(mesh)
    assert isinstance(lm, collections.abc.MutableMapping)
    lm["dense.*kernel"] = (None, "model")
    lm["dense.*bias"] = ("model",)
    assert len(lm) == 2 and list(lm) == ["dense.*kernel", "dense.*bias"]
    assert list(lm.keys()) == ["dense.*kernel", "dense.*bias"]
    assert [v.axes for v in lm.values()] == [(None, "model"), ("model",)]
    assert dict(lm.items())["dense.*bias"].device_mesh == mesh
    popped = lm.pop("dense.*bias")
    assert popped.axes == ("model",) and len(lm) == 1
    del lm["dense.*kernel"]
    assert len(lm) == 0


def test_keras_mapping_quirks(mesh):
    lm = ml.LayoutMap(mesh)
    lm["dense.*kernel"] = (None, "model")
    # Keras inherits Mapping.get/__contains__: lookups never raise KeyError.
    assert lm.get("conv/kernel", "default") is None
    assert "anything at all" in lm
    with pytest.raises(KeyError):
        lm.pop("conv/kernel", None)  # __delitem__ of a non-stored key
    with pytest.raises(KeyError):
        del lm["dense_1.kernel"]      # deletion is by exact key, not regex


def test_exact_key_wins_and_ambiguity_error(mesh):
    lm = ml.LayoutMap(mesh)
    lm[".*dense.*bias"] = ("model",)
    lm[".*bias"] = (None,)
    with pytest.raises(ValueError) as e:
        lm["d/dense/bias"]
    assert str(e.value) == (
        "Path 'd/dense/bias' matches multiple layout specification keys: ['.*dense.*bias', "
        "'.*bias']. Please make sure each tensor/variable path only matches at most one layout "
        "specification key in the LayoutMap.")
    assert lm[".*bias"].axes == (None,)  # exact key: no regex, no ambiguity


def test_keras_insertion_errors(mesh):
    lm = ml.LayoutMap(mesh)
    lm["dense.*kernel"] = (None, "model")
    with pytest.raises(ValueError) as e:
        lm["dense.*kernel"] = ("model", None)
    assert str(e.value) == (
        "dense.*kernel already exist in the LayoutMap with value <TensorLayout axes=(None, "
        "'model'), device_mesh=<DeviceMesh shape=(2, 4), axis_names=['data', 'model']>>. "
        "Please make sure to not use duplicated keys.")
    with pytest.raises(ValueError) as e:
        lm["x"] = ["a", "b"]  # Keras converts tuples only
    assert str(e.value) == "['a', 'b'] should be a TensorLayout type, got <class 'list'>"
    with pytest.raises(ValueError, match="Invalid axis names"):
        lm["y"] = ("batch",)
    with pytest.raises(ValueError, match="refused"):
        lm["bad("] = (None,)
    assert list(lm) == ["dense.*kernel"]  # failed insertions store nothing


def test_match_modes():
    first = ml.LayoutMap(mode="first")
    first["dense"] = ("model",)
    first[".*kernel"] = (None,)
    assert first["dense/kernel"].axes == ("model",)  # first rule wins, anchored at start
    assert first["x/dense/kernel"].axes == (None,)
    full = ml.LayoutMap(mode="fullmatch")
    full["dense.*"] = ("model",)
    assert full["x/dense/kernel"] is None
    assert full["dense/kernel"].axes == ("model",)
    assert full.mode == "fullmatch"
    with pytest.raises(ValueError, match="search"):
        ml.LayoutMap(mode="regex")


def test_explain_and_unused_rules(mesh):
    lm = ml.LayoutMap(mesh)
    lm[".*dense.*bias"] = ("model",)
    lm[".*bias"] = (None,)
    lm["conv.*kernel"] = (None, None, None, "model")
    e = lm.explain("d/dense/bias")
    assert e["verdict"] == "ambiguous" and e["matches"] == [".*dense.*bias", ".*bias"]
    assert e["chosen"] is None and "d/dense/bias" in e["text"]
    e = lm.explain("x/conv2d/kernel")
    assert e["verdict"] == "matched" and e["layout"] is lm["conv.*kernel"]
    assert lm.unused_rules(["x/conv2d/kernel", "head/bias"]) == [".*dense.*bias"]


def test_scope_restores_after_exception(mesh):
    lm = ml.LayoutMap(mesh)
    assert ml.current_layout_map() is None
    with lm.scope() as entered:
        assert entered is lm and ml.current_layout_map() is lm
        inner = ml.LayoutMap(mesh)
        with inner.scope():
            assert ml.current_layout_map() is inner
        assert ml.current_layout_map() is lm
    assert ml.current_layout_map() is None
    with pytest.raises(RuntimeError, match="boom"):
        with lm.scope():
            raise RuntimeError("boom")
    assert ml.current_layout_map() is None  # the exception left no scope behind
    with lm.scope():
        assert ml.current_layout_map() is lm


def test_lookups_from_threads(mesh):
    lm = ml.LayoutMap(mesh)
    for i in range(50):
        lm[f"block_{i}/.*kernel"] = (None, "model")
    errors = []

    def look():
        for i in range(2000):
            if lm[f"block_{i % 50}/dense/kernel"] is None:
                errors.append(i)

    threads = [threading.Thread(target=look) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# Scopes exited out of order (issue 24): each exit removes its own scope, and the current map —
# the one C++ sees, which current_layout_map() reports — is the innermost map still open.
def test_scopes_exited_out_of_order(mesh):
    a, b, c = ml.LayoutMap(mesh), ml.LayoutMap(mesh), ml.LayoutMap(mesh)
    sa, sb = a.scope(), b.scope()
    sa.__enter__()
    sb.__enter__()
    assert ml.current_layout_map() is b
    sa.__exit__(None, None, None)
    assert ml.current_layout_map() is b
    sb.__exit__(None, None, None)
    assert ml.current_layout_map() is None

    sa, sb, sc = a.scope(), b.scope(), c.scope()
    for s in (sa, sb, sc):
        s.__enter__()
    sb.__exit__(None, None, None)  # the middle one
    assert ml.current_layout_map() is c
    sc.__exit__(None, None, None)
    assert ml.current_layout_map() is a
    sb.__exit__(None, None, None)  # exited already: nothing changes
    assert ml.current_layout_map() is a
    sa.__exit__(None, None, None)
    assert ml.current_layout_map() is None
    with b.scope():  # usable again
        assert ml.current_layout_map() is b
    assert ml.current_layout_map() is None


def test_same_map_entered_twice_and_generators_interleaved(mesh):
    a, b = ml.LayoutMap(mesh), ml.LayoutMap(mesh)
    s1, s2 = a.scope(), a.scope()
    s1.__enter__()
    with pytest.raises(ValueError, match="already entered"):
        s1.__enter__()
    with b.scope():
        s2.__enter__()
        assert ml.current_layout_map() is a
        s1.__exit__(None, None, None)  # the outer entry of a: the inner one is still open
        assert ml.current_layout_map() is a
    assert ml.current_layout_map() is a  # b left; s2 (a) still open
    s2.__exit__(None, None, None)
    assert ml.current_layout_map() is None

    def in_scope(m):  # a generator suspended inside its scope, as coroutines are
        with m.scope():
            yield ml.current_layout_map()
            yield ml.current_layout_map()

    ga, gb = in_scope(a), in_scope(b)
    assert next(ga) is a and next(gb) is b
    ga.close()  # a's scope ends first
    assert ml.current_layout_map() is b
    gb.close()
    assert ml.current_layout_map() is None


def test_scope_left_open_in_a_finished_thread_is_closed(mesh):
    lm = ml.LayoutMap(mesh)
    base = sys.getrefcount(lm)
    seen = []

    def enter_and_leave_open():
        lm.scope().__enter__()
        seen.append(ml.current_layout_map())

    t = threading.Thread(target=enter_and_leave_open)
    t.start()
    t.join()
    assert seen == [lm]
    seen.clear()
    assert ml.current_layout_map() is None  # scopes are per thread
    assert sys.getrefcount(lm) == base  # the thread's end released its scope's reference


def test_scope_exit_on_another_thread_is_refused(mesh):
    lm = ml.LayoutMap(mesh)
    s = lm.scope()
    s.__enter__()
    errors = []

    def exit_here():
        try:
            s.__exit__(None, None, None)
        except RuntimeError as e:
            errors.append(str(e))

    t = threading.Thread(target=exit_here)
    t.start()
    t.join()
    assert len(errors) == 1 and "thread that entered it" in errors[0]
    assert ml.current_layout_map() is lm
    s.__exit__(None, None, None)
    assert ml.current_layout_map() is None


@pytest.mark.parametrize("how", [
    "s = lm.scope(); s.__enter__()",   # a scope object kept, never exited
    "lm.scope().__enter__()",          # the scope object dropped at once
    "lm.scope().__enter__(); ml.LayoutMap(mesh).scope().__enter__(); del lm",
    "t = threading.Thread(target=lambda: lm.scope().__enter__()); t.start(); t.join()",
    "t = threading.Thread(target=lambda: (lm.scope().__enter__(), time.sleep(30)), daemon=True); t.start(); time.sleep(0.2)",
    "lm.scope().__enter__(); sys.exit(3)",
])
def test_scope_left_open_at_interpreter_exit(how):
    # A scope still open when the interpreter exits once aborted it ("Fatal Python error:
    # PyThreadState_Get": a C++ thread-local list of Python objects was destroyed after the
    # interpreter was finalised).
    code = ("import sys, threading, time\nimport meshlayout as ml\n"
            "mesh = ml.DeviceMesh((2, 4), ['data', 'model'])\nlm = ml.LayoutMap(mesh)\n"
            "lm['dense.*kernel'] = (None, 'model')\n" + how + "\nprint('done')\n")
    r = run_child(code, timeout=60)
    assert r.returncode == (3 if "sys.exit(3)" in how else 0), (r.returncode, r.stderr)
    assert "Fatal Python error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.stdout == ("" if "sys.exit" in how else "done\n")
