# meshlayout.rules.suggest / check / diff: rules derived from a model and checked on it, from
# its config.json alone (the C++ library's rules/rule_suggest.h and rules/rule_check.h).
import json
import math
import re
import warnings

import pytest

import meshlayout as ml
from meshlayout import models, rules

BASE = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8}
FAMILIES = {
    "llama": {}, "mistral": {}, "qwen2": {}, "qwen3": {"head_dim": 12},
    "gemma": {"head_dim": 12}, "gemma2": {"head_dim": 16},
    "gemma3_text": {"head_dim": 16, "num_hidden_layers": 3},
}
PLAN = {"layers.*.self_attn.q_proj": "colwise", "layers.*.self_attn.k_proj": "colwise",
        "layers.*.self_attn.v_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise",
        "layers.*.mlp.gate_proj": "colwise", "layers.*.mlp.up_proj": "colwise",
        "layers.*.mlp.down_proj": "rowwise"}


def write_model(root, family):
    d = root / family
    models.write_random_model(str(d), {"model_type": family, **BASE, **FAMILIES[family]})
    return str(d)


def mesh_of(shape, names):
    return ml.DeviceMesh(shape, names, [f"cpu:{i}" for i in range(math.prod(shape))])


def as_axes(layout):
    return tuple(tuple(a) if isinstance(a, list) else a for a in layout)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_suggested_rules_split_every_large_tensor_and_build(tmp_path, family):
    d = write_model(tmp_path, family)
    for shape, names, strategy in [((2, 3), ["batch", "model"], "megatron+fsdp"),
                                   ((1, 6), ["data", "model"], "megatron"),
                                   ((2, 2, 2), ["data", "fsdp", "model"], "fsdp")]:
        mesh = mesh_of(shape, names)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the notes
            text = rules.suggest(d, mesh, strategy=strategy, min_bytes=64)
        for _, _, reason in json.loads(text)["rules"]:
            assert reason.startswith(("megatron: ", "fsdp: ")), reason
        assert rules.check(d, text, min_bytes=64) == []
        # The model builds with every variable where its rule puts it.
        model = models.from_pretrained(d, rules=rules.layout_map(text, "meshlayout", mesh))
        split = 0
        for pattern, layout, _ in json.loads(text)["rules"]:
            for path in model.variable_paths:
                if re.search(pattern, path):
                    assert model.variable_layout(path).axes == as_axes(layout), path
                    split += 1
        assert split > 10


def test_reasons_notes_and_check_problems(tmp_path):
    d = write_model(tmp_path, "llama")
    mesh = mesh_of((2, 4), ["batch", "model"])
    with pytest.warns(UserWarning, match=r"mesh axis 'batch' \(2\) splits no tensor"):
        text = rules.suggest(d, mesh, min_bytes=1000)
    by_pattern = {p: (layout, why) for p, layout, why in json.loads(text)["rules"]}
    layout, why = by_pattern["^transformer_layer_\\d+/self_attention/key/kernel$"]
    assert layout == ["model", None, None]
    assert "not the 2 key/value heads: does not divide by 4" in why
    # Below the threshold the norms are replicated: every one is named.
    problems = rules.check(d, text, min_bytes=8)
    assert len(problems) == 5 and all("is replicated: no rule matches it" in p for p in problems)
    bad = json.dumps({"rules": [["query", [None, "model", None]],
                                ["kernel", ["model", None, None]], ["typo", [None]]]})
    problems = rules.check(d, bad, min_bytes=1 << 20)
    assert sum("matches 2 rules" in p for p in problems) == 2  # both layers' query kernels
    assert any("('typo') is unused" in p for p in problems)


def test_diff_of_an_hf_plan_and_keras_hubs_map(tmp_path):
    d = write_model(tmp_path, "llama")
    keras = json.dumps({"token_embedding/embeddings": ["model", "batch"],
                        "transformer_layer.*self_attention.*query.kernel": [None, "model", None]})
    out = rules.diff(d, json.dumps(PLAN), keras, from_a="hf-tp-plan", from_b="keras-hub")
    assert out[0] == ("token_embedding/embeddings", (64, 32), "replicated", '["model", "batch"]')
    paths = [p for p, _, _, _ in out]
    assert "transformer_layer_0/self_attention/query/kernel" not in paths  # the same split
    assert ("transformer_layer_1/feedforward_output_dense/kernel", (48, 32), '["model", null]',
            "replicated") in out
    assert rules.diff(d, json.dumps(PLAN), json.dumps(PLAN), from_a="hf-tp-plan",
                      from_b="hf-tp-plan") == []


@pytest.mark.parametrize("kwargs, message", [
    ({"strategy": "zero3"}, "unknown strategy 'zero3'"),
    ({"family": "bert"}, "unknown model family 'bert'"),
    ({"strategy": "megatron+fsdp", "mesh": ("model",)}, "needs a data axis besides 'model'"),
    ({"mesh": ("data",)}, "has no axis 'model'"),
])
def test_bad_input_is_a_value_error_naming_it(tmp_path, kwargs, message):
    d = write_model(tmp_path, "llama")
    names = kwargs.pop("mesh", ("batch", "model"))
    mesh = mesh_of((8,) if len(names) == 1 else (2, 4), list(names))
    with pytest.raises(ValueError, match=message):
        rules.suggest(d, mesh, **kwargs)
    with pytest.raises(ValueError, match="rules file 'rules': rules\\[0\\]"):
        rules.check(d, '{"rules": [["a"]]}')
