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
"""

import warnings as _warnings

from meshlayout._meshlayout import _convert_rules, _read_rules

__all__ = ["convert", "layout_map"]


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
