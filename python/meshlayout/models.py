"""meshlayout.models: the model families from their Hugging Face directories.

Every family meshlayout runs (Llama 2/3, Mistral, Qwen 2/2.5, Qwen 3, Gemma, Gemma 2) is a
CausalLM: built sharded under a LayoutMap (keras-hub's paths: "transformer_layer_0/
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

A config.json of another architecture, or weights that contradict it, raise ValueError naming
the field or tensor; a missing directory raises FileNotFoundError.
"""

from meshlayout._meshlayout import CausalLM, ModelConfig, write_random_model
from meshlayout._training import Model, Sequential  # keras.models.Model / Sequential

__all__ = ["CausalLM", "Model", "ModelConfig", "Sequential", "from_pretrained",
           "write_random_model"]


def from_pretrained(directory, rules=None, dtype="float32"):
    """The model of the Hugging Face directory `directory` (config.json and its safetensors),
    built sharded under `rules` (a LayoutMap; None: every variable replicated over all devices)
    and loaded shard by shard, computing in `dtype` ("float32" or "float64")."""
    return CausalLM.from_pretrained(directory, rules, dtype)
