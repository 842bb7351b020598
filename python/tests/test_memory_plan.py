"""meshlayout.memory_plan: `meshlayout plan DIR --batch … --json`'s "memory" from Python — each
device's weights, gradients, slots, activations, cache, peak and fits — and its bad input."""
import pytest

import meshlayout as ml
from meshlayout.models import write_random_model


@pytest.fixture
def model_dir(tmp_path):
    config = {"model_type": "llama", "vocab_size": 64, "hidden_size": 16,
              "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 32}
    write_random_model(str(tmp_path / "llama"), config)
    return str(tmp_path / "llama")


@pytest.fixture
def rules():
    mesh = ml.DeviceMesh((2, 4), ("batch", "model"))
    lm = ml.LayoutMap(mesh)
    lm["feedforward_(gate|intermediate)_dense/kernel"] = (None, "model")
    lm["feedforward_output_dense/kernel"] = ("model", None)
    return lm


def test_memory_plan_per_device(model_dir, rules):
    m = ml.memory_plan(model_dir, rules, "adam", batch=4, seq=8, cache_length=16,
                       device_memory="80GiB")
    assert len(m["devices"]) == 8 and m["all_fit"] and m["recompute"] == "attention"
    d = m["devices"][0]
    assert d["slots"] == 2 * d["weights"] and d["gradients"] == d["weights"]
    assert d["activations"] > 0 and d["cache"] > 0
    assert d["peak"] >= d["weights"] + d["slots"] + d["activations"]
    tight = ml.memory_plan(model_dir, rules, "adam", batch=4, seq=8, device_memory="1KiB")
    assert not tight["all_fit"] and not tight["devices"][0]["fits"]
    zero = ml.memory_plan(model_dir, rules, "adam", batch=4, seq=8, zero1=True)
    assert zero["devices"][0]["slots"] < d["slots"]


def test_memory_plan_bad_input(model_dir, rules):
    with pytest.raises(ValueError, match="80 gigs"):
        ml.memory_plan(model_dir, rules, batch=4, seq=8, device_memory="80 gigs")
    with pytest.raises(ValueError, match="'layers' is not one of none, attention, block"):
        ml.memory_plan(model_dir, rules, batch=4, seq=8, recompute="layers")
    with pytest.raises(ValueError, match="need --optimizer"):
        ml.memory_plan(model_dir, rules, None, batch=4, seq=8)
