#include "meshlayout/nn/gradients.h"

#include <fmt/format.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/ops/elementwise.h"

namespace meshlayout {

void Gradients::accumulate(const Variable& variable, Array g) {
  const Array& value = variable.value();
  if (g.shape() != value.shape() || g.dtype() != value.dtype()) {
    throw ValueError(
        fmt::format("gradient of {} has shape {} and dtype {}, but the variable has shape {} "
                    "and dtype {}",
                    variable.describe(), shape_to_string(g.shape()), dtype_name(g.dtype()),
                    shape_to_string(value.shape()), dtype_name(value.dtype())));
  }
  if (!(g.layout() == value.layout())) g = distribute_tensor(g, value.layout());
  auto it = grads_.find(&variable);
  if (it == grads_.end()) {
    grads_.emplace(&variable, std::move(g));
  } else {
    it->second = add(std::move(it->second), g);
  }
}

const Array* Gradients::find(const Variable& variable) const {
  auto it = grads_.find(&variable);
  return it == grads_.end() ? nullptr : &it->second;
}

std::vector<const Array*> Gradients::for_variables(std::span<const VariablePtr> variables) const {
  std::vector<const Array*> out;
  out.reserve(variables.size());
  for (const VariablePtr& v : variables) out.push_back(find(*v));
  return out;
}

}  // namespace meshlayout
