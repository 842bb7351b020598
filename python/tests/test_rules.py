# meshlayout.rules: conversions between rule dialects from Python (the C++ library's semantics).
import json
import warnings

import pytest

import meshlayout as ml
from meshlayout import rules

LLAMA_PLAN = {
    "layers.*.self_attn.q_proj": "colwise",
    "layers.*.self_attn.k_proj": "colwise",
    "layers.*.self_attn.v_proj": "colwise",
    "layers.*.self_attn.o_proj": "rowwise",
    "layers.*.mlp.gate_proj": "colwise",
    "layers.*.mlp.up_proj": "colwise",
    "layers.*.mlp.down_proj": "rowwise",
}


def test_hf_plan_round_trips_through_every_dialect():
    plan = json.dumps(LLAMA_PLAN)
    for dialect in ("meshlayout", "keras-hub", "maxtext"):
        text = rules.convert(plan, "hf-tp-plan", dialect, names="keras-hub")
        back = rules.convert(text, dialect, "hf-tp-plan", names="keras-hub")
        assert json.loads(back) == LLAMA_PLAN, (dialect, text)


def test_layout_map_gives_the_plans_layouts():
    mesh = ml.DeviceMesh((2, 4), ["batch", "model"])
    lm = rules.layout_map(json.dumps(LLAMA_PLAN), "hf-tp-plan", mesh)
    assert isinstance(lm, ml.LayoutMap)
    assert lm["model.layers.3.self_attn.q_proj.weight"].axes == ("model", None)
    assert lm["model.layers.3.mlp.down_proj.weight"].axes == (None, "model")
    assert lm["model.layers.3.self_attn.o_proj.bias"].axes == (None,)
    assert lm["model.embed_tokens.weight"] is None
    keras = rules.layout_map(json.dumps(LLAMA_PLAN), "hf-tp-plan", mesh, names="keras-hub")
    assert keras["transformer_layer_0/self_attention/query/kernel"].axes == (None, "model", None)
    assert keras["transformer_layer_0/self_attention/attention_output/kernel"].axes == (
        "model", None, None)


def test_maxtext_and_warnings():
    text = ("logical_axis_rules: [[vocab, [model, data]], [embed, data], [mlp, model]]\n"
            "logical_axes:\n  emb: [vocab, embed]\n  up: [embed, mlp]\n")
    with pytest.warns(UserWarning, match=r"dimension 1 \(embed\) is not split"):
        lm = rules.layout_map(text, "maxtext", ml.DeviceMesh((2, 4), ["data", "model"]))
    assert lm["emb"].axes == (("model", "data"), None)
    assert lm["up"].axes == ("data", "model")
    with pytest.warns(UserWarning, match="colwise_rep"):
        rules.convert('{"lm_head": "colwise_rep"}', "hf-tp-plan", "meshlayout")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rules.convert('{"lm_head": "colwise"}', "hf-tp-plan", "meshlayout")


def test_model_directory(tmp_path):
    config = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 64,
              "hidden_size": 48, "intermediate_size": 64, "num_hidden_layers": 3,
              "num_attention_heads": 6, "num_key_value_heads": 2, "max_position_embeddings": 64}
    (tmp_path / "config.json").write_text(json.dumps(config))
    mesh = ml.DeviceMesh((2, 4), ["batch", "model"])
    plan = json.dumps(LLAMA_PLAN)
    # Qwen 2's q/k/v biases are split with their weights; its 6 heads do not split 4 ways.
    with pytest.warns(UserWarning, match=r"dimension 0 is 6 x 8"):
        text = rules.convert(plan, "hf-tp-plan", "keras-hub", model=str(tmp_path), mesh=mesh)
    out = json.loads(text)
    assert out["^transformer_layer_\\d+/self_attention/key/bias$"] == ["model", None]
    assert "^transformer_layer_\\d+/self_attention/attention_output/bias$" not in out


@pytest.mark.parametrize("args, message", [
    (('{"norm": "colwize"}', "hf-tp-plan", "maxtext"), "unknown Hugging Face style 'colwize'"),
    (('{"norm": ', "hf-tp-plan", "maxtext"), "not valid JSON"),
    (("logical_axis_rules: []\nlogical_axes: {w: [embed]}\n", "maxtext", "meshlayout"),
     "logical name 'embed' (dimension 0) appears in no logical_axis_rules entry"),
    (('{"a/kernel": ["model", "model"]}', "keras-hub", "maxtext"),
     "mesh axis 'model' is used twice for one tensor"),
    (('{"conv.*kernel": [null, "model"]}', "keras-hub", "maxtext"), "uses regex features"),
    (("{}", "flax", "maxtext"), "unknown rules dialect 'flax'"),
])
def test_bad_input_is_a_value_error_naming_it(args, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        rules.convert(*args, source="in.json")
