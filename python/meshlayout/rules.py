"""meshlayout.rules: layout rules in other stacks' dialects, read and written.

Dialects: "meshlayout" (meshlayout's rules file), "keras-hub" (get_layout_map as JSON
{regex: layout}), "hf-tp-plan" (a Hugging Face base_model_tp_plan {module: style}, or a
config.json holding one) and "maxtext" (YAML logical_axis_rules + logical_axes, Flax's
precedence). The semantics are the C++ library's (meshlayout/rules/rule_dialects.h):

    import meshlayout as ml
    from meshlayout import rules

    plan = '{"layers.*.self_attn.q_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise"}'
    print(rules.convert(plan, "hf-tp-plan", "keras-hub"))       # keras-hub paths
    lm = rules.layout_map(plan, "hf-tp-plan", ml.DeviceMesh((2, 4), ["batch", "model"]))
    lm["model.layers.0.self_attn.q_proj.weight"]                # TensorLayout('model', None)

What a dialect cannot express, malformed input, unknown styles or logical names no rule maps
raise ValueError naming the rule; what is converted but loses meaning (an HF style's
activation handling, an unanchored regex written as an exact path) is a warnings.warn.

Rules for, and checked on, a model (a Hugging Face directory: from its config.json alone):

    text = rules.suggest("llama-dir", ml.DeviceMesh((2, 4), ["batch", "model"]),
                         strategy="megatron+fsdp")          # a rules file, a reason per rule
    rules.check("llama-dir", text)                          # [] or every problem, named
    rules.diff("llama-dir", plan, keras, from_a="hf-tp-plan", from_b="keras-hub")
    # [("transformer_layer_0/self_attention/query/kernel", (32, 4, 8),
    #   '[null, "model", null]', '["model", "batch", null]'), ...]
"""

import warnings as _warnings

from meshlayout._meshlayout import (_check_rules, _convert_rules, _diff_rules, _read_rules,
                                    _suggest_rules)

__all__ = ["check", "convert", "diff", "layout_map", "suggest"]


def convert(text, from_dialect, to_dialect, *, names=None, family=None, tp_axis="model",
            mesh=None, layer_indices=(), model=None, source="rules"):
    """`text` (rules in `from_dialect`) written in `to_dialect`, as a str.

    names: "hf" or "keras-hub", the names Hugging Face plan rules use (default: "keras-hub"
    when either dialect is keras-hub, else "hf"); family: whose HF <-> keras-hub name map
    (default: model's model_type, else "llama"); tp_axis: the mesh axis HF plans split over;
    mesh: a DeviceMesh whose axes every layout must use (and that meshlayout/maxtext output
    names); layer_indices: the layers checked when an HF plan is written from keras-hub paths
    (default: every layer of model, else 0-3, 7 and 31); model: a Hugging Face model
    directory, whose own weights are mapped (and, with mesh, splits of heads the axis does not
    divide warned); source: names the text in messages.
    """
    out, warnings = _convert_rules(text, from_dialect, to_dialect, names, family, tp_axis, mesh,
                                   list(layer_indices), model, source)
    for w in warnings:
        _warnings.warn(w, stacklevel=2)
    return out


def layout_map(text, dialect, mesh=None, *, names="hf", family=None, tp_axis="model",
               model=None, source="rules"):
    """A meshlayout.LayoutMap of the rules in `text` (in `dialect`) on `mesh`; the options are
    convert()'s."""
    from meshlayout import LayoutMap

    rules, mode, warnings = _read_rules(text, dialect, names, family, tp_axis, mesh, model,
                                        source)
    for w in warnings:
        _warnings.warn(w, stacklevel=2)
    out = LayoutMap(mesh, mode)
    for pattern, axes in rules:
        out[pattern] = axes
    return out


def suggest(model, mesh, *, strategy="megatron", min_bytes=1 << 20, family=None,
            model_axis="model", data_axes=()):
    """A meshlayout rules file (str) for `model` on `mesh` splitting every tensor of more than
    `min_bytes` bytes, each rule with its reason.

    model: a Hugging Face model directory (config.json), or a weights-only model (safetensors
    file, index or directory); mesh: a DeviceMesh; strategy: "megatron" (tensor parallelism
    over `model_axis`), "fsdp" (the largest divisible dimension over `data_axes`) or
    "megatron+fsdp"; family: read config.json as this family's; data_axes: default, fsdp every
    axis, megatron+fsdp every axis but the model axis. The notes (axes holding replicas,
    tensors left whole, the model's uneven splits) are warnings.warn. ValueError naming an
    unknown strategy or family, or an axis the mesh lacks.
    """
    text, notes = _suggest_rules(model, mesh, strategy, int(min_bytes), family, model_axis,
                                 list(data_axes))
    for n in notes:
        _warnings.warn(n, stacklevel=2)
    return text


def check(model, text, *, dialect="meshlayout", min_bytes=1 << 20, mesh=None, family=None,
          tp_axis="model", source="rules"):
    """Every problem of the rules in `text` (in `dialect`) on `model`'s tensors, as a list of
    str (empty: none): a tensor of more than `min_bytes` left replicated, a rule matching no
    tensor, a tensor several rules match, a layout of the wrong rank or on an axis the mesh
    lacks. Decided from the config alone; Hugging Face plans are read on keras-hub paths."""
    problems, warnings = _check_rules(model, text, dialect, int(min_bytes), mesh, family,
                                      tp_axis, source)
    for w in warnings:
        _warnings.warn(w, stacklevel=2)
    return problems


def diff(model, a, b, *, from_a="meshlayout", from_b="meshlayout", mesh=None, family=None,
         tp_axis="model"):
    """The tensors of `model` whose layouts differ between rules `a` (in `from_a`) and `b` (in
    `from_b`): a list of (path, shape, layout_a, layout_b), each layout as JSON text, or
    "replicated", or "ambiguous: rules ..."; empty when they agree."""
    out, warnings = _diff_rules(model, a, b, from_a, from_b, mesh, family, tp_axis)
    for w in warnings:
        _warnings.warn(w, stacklevel=2)
    return [(path, tuple(shape), la, lb) for path, shape, la, lb in out]
