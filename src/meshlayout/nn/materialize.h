// materialize.h — gives lazy variables their layouts and storage, all layouts decided and
// checked before any memory is allocated (DESIGN §2 "Lazy init").
//
// Layout of each lazy variable, in order: its explicit layout (Keras >= 3.10); with a LayoutMap
// (Keras 2, LayoutMap::scope()) map[layout key] — the object path, "" for RNG state — else
// replicated on the map's mesh; with a distribution (Keras 3) get_variable_layout(), keyed by
// the scope path.
//
// Example:
//   materialize_lazy(keyed_variables(*model), model->layout_map(), nullptr);
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/nn/distribution.h"
#include "meshlayout/nn/variable.h"

namespace meshlayout {

class Layer;

struct KeyedVariable {
  std::string object_path;  // Keras 2 object path ("d1.kernel", "block.dense.kernel")
  VariablePtr variable;
};

/// Every variable of `root` and its sub-layers with its Keras 2 object path: `prefix` + "." +
/// attribute path ("block.dense.kernel"; no prefix: just the attribute path). With
/// `key_by_layer_name` (functional and sequential models) root's sub-layers are keyed by
/// their names ("d1.kernel"). A variable reached twice appears once, under its first path.
std::vector<KeyedVariable> keyed_variables(const Layer& root, const std::string& prefix = "",
                                           bool key_by_layer_name = false);

/// Materialises every lazy variable of `variables` (object paths recorded on the way).
/// ValueError naming the variable, its shape, the layout and the rule on a layout that does
/// not fit, an ambiguous rule, or no mesh — raised before anything is allocated.
void materialize_lazy(const std::vector<KeyedVariable>& variables,
                      const std::optional<LayoutMap>& layout_map,
                      const std::shared_ptr<const Distribution>& distribution);

}  // namespace meshlayout
