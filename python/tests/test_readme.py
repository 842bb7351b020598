# The README's complete Python session ("Layers, models and training from Python") runs as
# written: rules, a subclassed model born sharded, compile/fit/evaluate/predict, summary,
# save/load, functional and Sequential models, a Llama-family model with rules and generate.
# Skipped where the README is not beside the tests (an installed package).
import os
import re
import warnings

import pytest

README = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "README.md")


@pytest.mark.skipif(not os.path.exists(README), reason="no README.md beside the tests")
def test_readme_python_session_runs(tmp_path, monkeypatch, capsys):
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text.split("### Layers, models and training from Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    import meshlayout
    meshlayout.clear_session()  # a fresh session: automatic names as the README shows them
    scope = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, "README.md", "exec"), scope)  # noqa: S102
    model, history = scope["model"], scope["history"]
    assert len(history.history["loss"]) == 3 and "val_mae" in history.history
    assert model.d1.kernel.layout.axes == (None, "model")
    assert model.weights[0].path == "mlp/d1/kernel"
    assert scope["seq"].weights[0].layout.axes == (None, "model")
    assert "Epoch 3/3" in capsys.readouterr().out
    scope.clear()  # the models' device memory goes with them
