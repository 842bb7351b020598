# meshlayout.models: every family's small random model written in Hugging Face format, loaded
# sharded from Python under rules written in Python, gives the logits and greedy tokens of the
# same model on one device row, samples reproducibly by seed, and refuses bad input with
# meshlayout's messages; the mixtures of experts (Mixtral, Qwen 3 MoE, Qwen 2 MoE) expert
# parallel equal one device row (logits, generate, train); text through models.Tokenizer.
import numpy as np
import pytest

import meshlayout as ml
from meshlayout import models

FAMILIES = {
    "llama": {},
    "mistral": {"sliding_window": 3},
    "qwen2": {"tie_word_embeddings": True},
    "qwen3": {"head_dim": 12},
    "gemma2": {"head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 3,
               "attn_logit_softcapping": 20.0, "final_logit_softcapping": 30.0},
}


def config(family, **extra):
    fields = {"model_type": family, "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 8, "max_position_embeddings": 64, "rms_norm_eps": 1e-5}
    fields.update(FAMILIES[family])
    fields.update(extra)
    return fields


def megatron(mesh, family):
    rules = ml.LayoutMap(mesh)
    if family.startswith("gemma"):
        rules["decoder_block.*attention.*(query|key|value).kernel"] = ("model", None, None)
        rules["decoder_block.*attention_output.kernel"] = ("model", None, None)
        rules["decoder_block.*ffw_gating.*kernel"] = (None, "model")
        rules["decoder_block.*ffw_linear.kernel"] = ("model", None)
    else:
        rules["transformer_layer.*self_attention.*(query|key|value).kernel"] = (None, "model", None)
        rules["transformer_layer.*attention_output.kernel"] = ("model", None, None)
        rules["transformer_layer.*feedforward_(gate|intermediate)_dense.kernel"] = (None, "model")
        rules["transformer_layer.*feedforward_output_dense.kernel"] = ("model", None)
    rules["token_embedding/embeddings"] = ("model", None)
    return rules


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_sharded_model_equals_one_device_row(tmp_path, family):
    directory = str(tmp_path / family)
    models.write_random_model(directory, config(family), kernel_scale=2.0)
    cfg = models.ModelConfig.from_file(directory + "/config.json")
    assert cfg.family == family
    mesh = ml.DeviceMesh((2, 4), ["batch", "model"])
    sharded = models.from_pretrained(directory, rules=megatron(mesh, family))
    plain = models.from_pretrained(directory)
    query = [p for p in sharded.variable_paths if p.endswith("query/kernel")][0]
    assert "model" in str(sharded.variable_layout(query))
    tokens = np.array([[3, 17, 42, 5], [9, 1, 0, 63]], dtype=np.int32)
    got, want = sharded.logits(tokens), plain.logits(tokens)
    assert got.shape == (2, 4, 64) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    prompts = [[3, 17, 42], [5]]
    assert sharded.generate(prompts, max_new_tokens=4) == plain.generate(prompts, max_new_tokens=4)
    # Each row of a left-padded batch equals its prompt alone.
    alone = plain.generate([[5]], max_new_tokens=4)[0]
    assert plain.generate(prompts, max_new_tokens=4)[1] == alone


def test_float64_and_sampling(tmp_path):
    directory = str(tmp_path / "llama")
    models.write_random_model(directory, config("llama"), kernel_scale=2.0)
    f32 = models.from_pretrained(directory)
    f64 = models.from_pretrained(directory, dtype="float64")
    tokens = np.array([[1, 2, 3]])
    assert f64.logits(tokens).dtype == np.float64
    np.testing.assert_allclose(f64.logits(tokens), f32.logits(tokens), rtol=1e-4, atol=1e-4)
    mesh = ml.DeviceMesh((2, 4), ["batch", "model"])
    sharded = models.from_pretrained(directory, rules=megatron(mesh, "llama"))
    a = f32.generate([[1, 2, 3]], max_new_tokens=6, temperature=0.8, top_p=0.9, seed=7)
    b = sharded.generate([[1, 2, 3]], max_new_tokens=6, temperature=0.8, top_p=0.9, seed=7)
    assert a == b
    assert f32.generate([[1, 2, 3]], max_new_tokens=6, top_k=1, seed=3) == \
        f32.generate([[1, 2, 3]], max_new_tokens=6)


def test_from_config_is_a_fresh_model_laid_out_by_the_rules():
    # Keras' initializers, seeded: two models of one config are equal, whatever their layouts;
    # no directory, so no end-of-sequence token unless given.
    mesh = ml.DeviceMesh((2, 4), ["batch", "model"])
    sharded = models.CausalLM.from_config(config("llama"), rules=megatron(mesh, "llama"))
    plain = models.CausalLM.from_config(models.ModelConfig.from_dict(config("llama")))
    query = "transformer_layer_0/self_attention/query/kernel"
    assert sharded.variable_layout(query).axes == (None, "model", None)
    assert sharded.variable_paths == plain.variable_paths
    tokens = np.array([[3, 17, 42, 5], [9, 1, 0, 63]], dtype=np.int32)
    np.testing.assert_allclose(sharded.logits(tokens), plain.logits(tokens), rtol=1e-4,
                               atol=1e-5)
    assert len(plain.generate([[1, 2]], max_new_tokens=5)[0]) == 5
    rows = np.arange(8 * 9).reshape(8, 9) % 64
    again = models.CausalLM.from_config(config("llama"))
    losses = plain.train(rows, batch_size=4, steps=2)
    assert losses == again.train(rows, batch_size=4, steps=2) and np.all(np.isfinite(losses))
    with pytest.raises(ValueError, match="dtype 'float16'"):
        models.CausalLM.from_config(config("llama"), dtype="float16")
    with pytest.raises(ValueError, match="no device_mesh"):
        models.CausalLM.from_config(config("llama"), rules=ml.LayoutMap())


def test_bad_input_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        models.from_pretrained(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="model_type 'phi3'"):
        models.write_random_model(str(tmp_path / "x"), {**config("llama"), "model_type": "phi3"})
    with pytest.raises(TypeError, match="ModelConfig or a dict"):
        models.write_random_model(str(tmp_path / "x"), 3)
    directory = str(tmp_path / "llama")
    models.write_random_model(directory, config("llama"))
    model = models.from_pretrained(directory)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.logits(np.array([[1, 64]]))
    with pytest.raises(ValueError, match="2-D"):
        model.logits(np.array([1, 2]))
    with pytest.raises(ValueError, match="integers"):
        model.logits(np.array([[1.5, 2.0]]))
    with pytest.raises(ValueError, match="top_p"):
        model.generate([[1, 2]], top_p=1.5)
    with pytest.raises(ValueError, match="dtype 'bfloat16'"):
        models.from_pretrained(directory, dtype="bfloat16")
    with pytest.raises(KeyError):
        model.variable_layout("no/such/variable")


def meshlayout_cli():
    """The build tree's meshlayout binary beside the module (build/python/meshlayout →
    build/bin/meshlayout), or None when the package is installed elsewhere."""
    import os
    here = os.path.dirname(models.__file__)
    path = os.path.normpath(os.path.join(here, "..", "..", "bin", "meshlayout"))
    return path if os.access(path, os.X_OK) else None


def test_training_from_python_equals_the_cli_bit_for_bit(tmp_path):
    import json
    import subprocess
    directory = str(tmp_path / "qwen2")
    models.write_random_model(directory, config("qwen2"), kernel_scale=2.0)
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 64, size=(24, 9), dtype=np.int32)
    mesh = ml.DeviceMesh((2, 4), ["batch", "model"])
    model = models.from_pretrained(directory, rules=megatron(mesh, "qwen2"))
    losses = model.train(tokens, batch_size=8, steps=3, learning_rate=1e-2)
    assert len(losses) == 3 and losses[0] != losses[2]
    # The same model, replicated, trains to the same losses (float rounding apart).
    plain = models.from_pretrained(directory)
    np.testing.assert_allclose(plain.train(tokens, batch_size=8, steps=3, learning_rate=1e-2),
                               losses, rtol=1e-4)
    with pytest.raises(ValueError, match="at least 2 columns"):
        plain.train(tokens[:, :1], batch_size=8, steps=1)
    cli = meshlayout_cli()
    if cli is None:
        # Free the models' device memory first: a skip keeps this frame (and its locals) alive
        # in pytest's report, and later tests measure every device's live bytes.
        del model, plain
        pytest.skip("no meshlayout binary beside the module (an installed package)")
    data = str(tmp_path / "tokens.safetensors")
    ml.save(data, {"tokens": ml.distribute_tensor(
        tokens, ml.TensorLayout((None, None), ml.DeviceMesh((8,), ["x"])))})
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"rules": [
        ["transformer_layer.*self_attention.*(query|key|value).kernel", [None, "model", None]],
        ["transformer_layer.*attention_output.kernel", ["model", None, None]],
        ["transformer_layer.*feedforward_(gate|intermediate)_dense.kernel", [None, "model"]],
        ["transformer_layer.*feedforward_output_dense.kernel", ["model", None]],
        ["token_embedding/embeddings", ["model", None]]]}))
    out = subprocess.run([cli, "train", "--model", directory, "--data", data, "--rules",
                          str(rules), "--mesh", "batch=2,model=4", "--batch-size", "8",
                          "--steps", "3", "--learning-rate", "0.01", "--json"],
                         capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "MESHLAYOUT_CPU_DEVICES": "8"})
    cli_losses = [json.loads(line)["loss"] for line in out.stdout.splitlines()]
    assert cli_losses == losses


MOE = {
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16},
    "qwen2_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                  "shared_expert_intermediate_size": 24},
}


@pytest.mark.parametrize("family", sorted(MOE))
def test_mixtures_of_experts_expert_parallel_equal_one_device_row(tmp_path, family):
    directory = str(tmp_path / family)
    fields = {"model_type": family, "vocab_size": 64, "hidden_size": 32,
              "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 64, **MOE[family]}
    models.write_random_model(directory, fields, kernel_scale=2.0)
    cfg = models.ModelConfig.from_file(directory + "/config.json")
    assert cfg.family == family and cfg.num_experts == 4 and cfg.num_experts_per_tok == 2
    mesh = ml.DeviceMesh((2, 4), ["batch", "model"])
    rules = megatron(mesh, family)
    rules["experts/expert_feedforward_.*"] = ("model", None, None)  # expert parallel: 1 each
    sharded = models.from_pretrained(directory, rules=rules)
    plain = models.from_pretrained(directory)
    experts = [p for p in sharded.variable_paths if "/experts/" in p]
    assert len(experts) == 6 and sharded.variable_layout(experts[0]).axes == ("model", None, None)
    tokens = np.array([[3, 17, 42, 5], [9, 1, 0, 63]], dtype=np.int32)
    want = plain.logits(tokens)
    np.testing.assert_allclose(sharded.logits(tokens), want, rtol=1e-4,
                               atol=1e-4 * np.abs(want).max())
    assert sharded.generate([[3, 17]], max_new_tokens=4) == plain.generate([[3, 17]],
                                                                           max_new_tokens=4)
    rows = np.arange(8 * 9).reshape(8, 9) % 64
    np.testing.assert_allclose(sharded.train(rows, batch_size=4, steps=2, learning_rate=1e-2),
                               plain.train(rows, batch_size=4, steps=2, learning_rate=1e-2),
                               rtol=1e-4)


def test_text_in_and_out_through_the_tokenizer(tmp_path):
    directory = str(tmp_path / "llama")
    models.write_random_model(directory, config("llama", vocab_size=64), tokenizer=True)
    tok = models.Tokenizer.from_pretrained(directory)
    assert tok.vocab_size == 64 and tok.bos_token_id == 1 and tok.token_to_id("</s>") == 2
    ids = tok.encode("the cat")
    assert ids[0] == 1 and tok.decode(ids, skip_special_tokens=True) == "the cat"
    assert tok.encode("the cat", add_special_tokens=False) == ids[1:]
    assert tok.id_to_token(ids[1]) in ("t", "Ġt", "th", "the") and \
        tok.token_to_id(tok.id_to_token(ids[1])) == ids[1] and tok.token_to_id("nope!") is None
    model = models.from_pretrained(directory)
    out = model.generate([tok.encode("the cat")], max_new_tokens=4)[0]
    assert isinstance(tok.decode(out), str)
    with pytest.raises(KeyError, match="64"):
        tok.decode([64])
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        models.Tokenizer.from_pretrained(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="vocab_size"):
        models.write_random_model(str(tmp_path / "small"), config("llama", vocab_size=16),
                                  tokenizer=True)
