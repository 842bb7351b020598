// gradients.h — the gradients of a backward pass, keyed by variable: each one in its variable's
// shape, dtype and layout, summed when a variable is used more than once (a tied embedding
// table gets the lookup's and the output projection's contributions).
//
// Every layer's backward (beside its call, DESIGN §3) has the form
//   Array backward(const Array& x, const Array& dy, Gradients& grads);
// x is the input of the call, dy = dL/dy in the call's output layout; it returns dL/dx in x's
// layout and accumulates dL/dw of its weights into `grads`. Gradients are already summed over
// the data-parallel replicas (the conjugate collectives of the forward's sharding rules); the
// trainer divides by nothing further: the loss is a mean over the global batch.
//
// Example:
//   Gradients grads;
//   Array dx = dense->backward(x, dy, grads);
//   const Array* dw = grads.find(*dense->kernel());   // in the kernel's layout
//   optimizer->apply(grads.for_variables(vars), vars);
#pragma once

#include <map>
#include <span>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/nn/variable.h"

namespace meshlayout {

class Gradients {
 public:
  /// Adds g to the variable's gradient (or sets it, the first time). g must have the variable's
  /// shape and dtype; it is brought to the variable's layout if it has another. Collective when
  /// a reshard or a sum is needed.
  /// \error ValueError naming the variable, both shapes and dtypes if they differ.
  void accumulate(const Variable& variable, Array g);

  /// The gradient of `variable`, or null if none was accumulated.
  const Array* find(const Variable& variable) const;

  /// One pointer per variable, in order (null where none was accumulated): the optimizer's
  /// argument.
  std::vector<const Array*> for_variables(std::span<const VariablePtr> variables) const;

  size_t size() const { return grads_.size(); }
  void clear() { grads_.clear(); }

 private:
  std::map<const Variable*, Array> grads_;
};

}  // namespace meshlayout
