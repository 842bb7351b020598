"""meshlayout.models: the model families from their Hugging Face directories.

Every family meshlayout runs (Llama 2/3, Mistral, Qwen 2/2.5, Qwen 3, Gemma, Gemma 2, and the
mixtures of experts Mixtral, Qwen 3 MoE and Qwen 2 MoE) is a CausalLM: built sharded under a LayoutMap (keras-hub's paths: "transformer_layer_0/
self_attention/query/kernel", Gemma's "decoder_block_0/attention/query/kernel"), each device
reading only its boxes of the checkpoint, then logits as numpy and generation:

    import numpy as np
    import meshlayout as ml
    from meshlayout import models

    mesh = ml.DeviceMesh((2, 4), ["batch", "model"])
    rules = ml.LayoutMap(mesh)
    rules["transformer_layer.*self_attention.*(query|key|value).kernel"] = (None, "model", None)
    rules["transformer_layer.*attention_output.kernel"] = ("model", None, None)
    model = models.from_pretrained("qwen2-dir", rules=rules)
    model.logits(np.array([[1, 2, 3]]))                     # (1, 3, vocab) float32
    model.generate([[1, 2, 3], [4]], max_new_tokens=8)      # greedy, a left-padded batch
    model.generate([[1, 2, 3]], temperature=0.7, top_p=0.9, seed=1)   # sampling
    fresh = models.CausalLM.from_config(model.config, rules=rules)  # Keras' initializers
    fresh.train(np.random.randint(0, 64, (8, 17)), batch_size=4, steps=2)  # the CLI's losses

Mixtures of experts: the experts are stacked per layer ("transformer_layer_0/
mixtral_sparse_moe_block/experts/expert_feedforward_gate_dense", Qwen's qwen3_sparse_moe_block /
qwen_sparse_moe_block, Qwen 2 MoE's shared_expert_dense), split over a mesh axis by rules like
any kernel (expert parallelism: the experts' first dimension over "model"); logits, generate and
train as for the dense families (the training loss includes the router's auxiliary loss when
the config asks for it).

Text in and out: token ids go in and come out; the model directory's tokenizer turns text into
them and back:

    tok = models.Tokenizer.from_pretrained("qwen2-dir")   # tokenizer.json, else tokenizer.model
    ids = model.generate([tok.encode("Hello")], max_new_tokens=8)[0]
    tok.decode(ids, skip_special_tokens=True)
    models.write_random_model("tiny", config, tokenizer=True)   # + a toy tokenizer.json

A config.json of another architecture, or weights that contradict it, raise ValueError naming
the field or tensor; a missing directory raises FileNotFoundError.
"""

from meshlayout._meshlayout import CausalLM, ModelConfig, Tokenizer, write_toy_tokenizer
from meshlayout._meshlayout import write_random_model as _write_random_model
from meshlayout._training import Model, Sequential  # keras.models.Model / Sequential

__all__ = ["CausalLM", "Model", "ModelConfig", "Sequential", "Tokenizer", "from_pretrained",
           "write_random_model", "write_toy_tokenizer"]


def write_random_model(directory, config, kernel_scale=8.0, tokenizer=False):
    """Writes a small random model of `config` (a dict of config.json fields or a ModelConfig:
    any family, mixtures of experts included) to `directory` in Hugging Face format; with
    tokenizer=True also the toy byte-level BPE tokenizer.json of its vocabulary (36 to 4096
    tokens), so that Tokenizer.from_pretrained(directory) works on it."""
    _write_random_model(directory, config, kernel_scale)
    if tokenizer:
        cfg = config if isinstance(config, ModelConfig) else ModelConfig.from_dict(config)
        write_toy_tokenizer(directory, cfg.vocab_size)


def from_pretrained(directory, rules=None, dtype="float32"):
    """The model of the Hugging Face directory `directory` (config.json and its safetensors),
    built sharded under `rules` (a LayoutMap; None: every variable replicated over all devices)
    and loaded shard by shard, computing in `dtype` ("float32" or "float64")."""
    return CausalLM.from_pretrained(directory, rules, dtype)
