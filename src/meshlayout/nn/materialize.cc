#include "meshlayout/nn/materialize.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/nn/layer.h"

namespace meshlayout {
namespace {

std::string join(const std::string& prefix, const std::string& attr) {
  return prefix.empty() ? attr : prefix + "." + attr;
}

void collect(const Layer& layer, const std::string& prefix, bool key_by_layer_name,
             std::vector<KeyedVariable>& out) {
  for (const auto& [attr, v] : layer.own_weights()) {
    if (std::none_of(out.begin(), out.end(),
                     [&](const KeyedVariable& k) { return k.variable == v; })) {
      out.push_back({join(prefix, attr), v});
    }
  }
  for (const auto& [attr, child] : layer.sublayers()) {
    collect(*child, join(prefix, key_by_layer_name ? child->name() : attr), false, out);
  }
}

// The layout of one lazy variable, checked against its shape. Throws ValueError.
TensorLayout decide(const KeyedVariable& k, const std::optional<LayoutMap>& layout_map,
                    const std::shared_ptr<const Distribution>& distribution) {
  const Variable& v = *k.variable;
  const std::string what = v.describe();
  if (const std::optional<TensorLayout>& given = v.explicit_layout()) {
    // An explicit layout wins over rules (Keras >= 3.10); a mesh-less one takes the map's or
    // the distribution's mesh.
    TensorLayout layout = *given;
    if (!layout.device_mesh()) {
      if (layout_map && layout_map->device_mesh()) {
        layout.set_device_mesh(*layout_map->device_mesh());
      } else if (distribution) {
        layout.set_device_mesh(distribution->device_mesh());
      } else {
        throw ValueError(
            fmt::format("{} has the explicit layout {} without a mesh, and the "
                        "model has no LayoutMap mesh or distribution to give it one",
                        what, layout.to_string()));
      }
    }
    ShardGeometry check(layout, v.shape(), {}, what);
    return layout;
  }
  if (!layout_map && distribution) {  // Keras 3: keyed by the scope path
    const std::string what3 = fmt::format("variable {}", quote(v.path()));
    TensorLayout layout = TensorLayout::replicated(0);
    try {
      layout = distribution->get_variable_layout(v);
    } catch (const ValueError& e) {
      throw ValueError(
          fmt::format("{} with shape {}: {}", what3, shape_to_string(v.shape()), e.what()));
    }
    ShardGeometry check(layout, v.shape(), {}, what3);
    return layout;
  }
  const std::string key = v.layout_key();
  if (!layout_map || !layout_map->device_mesh()) {
    std::optional<size_t> rule;
    if (layout_map) rule = layout_map->match_index(key);
    if (!rule || !layout_map->rule(*rule).layout.device_mesh()) {
      throw ValueError(fmt::format(
          "{} with shape {}: the LayoutMap has no device mesh, so there is no mesh to lay the "
          "variable out on; give the LayoutMap a mesh (LayoutMap(mesh))",
          what, shape_to_string(v.shape())));
    }
  }
  std::optional<TensorLayout> layout;
  std::string rule_text = "no rule (replicated)";
  try {
    if (std::optional<size_t> rule = layout_map->match_index(key)) {
      layout = layout_map->rule(*rule).layout;
      rule_text = fmt::format("rule {} ({})", *rule, quote(layout_map->rule(*rule).pattern));
    }
  } catch (const ValueError& e) {
    throw ValueError(
        fmt::format("{} with shape {}: {}", what, shape_to_string(v.shape()), e.what()));
  }
  if (!layout) {
    layout =
        TensorLayout::replicated(static_cast<int>(v.shape().size()), *layout_map->device_mesh());
  } else if (!layout->device_mesh()) {
    layout->set_device_mesh(*layout_map->device_mesh());
  }
  try {
    ShardGeometry check(*layout, v.shape(), {}, what);
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("{} [from {}]", e.what(), rule_text));
  }
  return *layout;
}

}  // namespace

std::vector<KeyedVariable> keyed_variables(const Layer& root, const std::string& prefix,
                                           bool key_by_layer_name) {
  std::vector<KeyedVariable> out;
  collect(root, prefix, key_by_layer_name, out);
  return out;
}

void materialize_lazy(const std::vector<KeyedVariable>& variables,
                      const std::optional<LayoutMap>& layout_map,
                      const std::shared_ptr<const Distribution>& distribution) {
  // 1. Decide and check every layout before allocating anything.
  std::vector<std::pair<const KeyedVariable*, TensorLayout>> plan;
  for (const KeyedVariable& k : variables) {
    if (!k.variable->is_lazy()) continue;
    k.variable->set_object_path(k.object_path);
    plan.emplace_back(&k, decide(k, layout_map, distribution));
  }
  // 2. Materialise: every device allocates and fills only its box.
  for (auto& [k, layout] : plan) k->variable->materialize(layout);
}

}  // namespace meshlayout
