// nn_bindings.h — what the layer, model and training binders share (bind_layers.cc,
// bind_model.cc, bind_train.cc): numpy → HostTensor, the distribution a layer's numpy input is
// fed under, and the binders themselves.
//
// Example (bind_train.cc):
//   HostTensor x = host_from_numpy(x_obj, "x");   // ValueError for 0-d or non-numeric input
//   Array a = feed_distribution(*model)->distribute_input(x);
#pragma once

#include <memory>

#include "bindings.h"
#include "meshlayout/array/host_tensor.h"
#include "meshlayout/nn/distribution.h"
#include "meshlayout/nn/layer.h"

namespace meshlayout::python {

void bind_layers(py::module_& m);  // Tensor (KerasTensor), Variable, Layer and every layer
void bind_model(py::module_& m);   // Model (subclassable), Sequential, functional, Input
void bind_train(py::module_& m);   // compile/fit/evaluate/predict, optimizers, losses, weights
void bind_training_state(py::module_& m);  // training-state checkpoints (weights + optimizer)

/// A numpy array (or array-like, or Array) as a HostTensor (C order, a copy). ValueError naming
/// `what` for a 0-d array (unless allow_scalar) or a dtype meshlayout lacks.
HostTensor host_from_numpy(const py::object& value, const char* what, bool allow_scalar = false);

/// A HostTensor as a numpy array owning its bytes (no copy).
py::array numpy_from_host(HostTensor tensor);

/// The distribution a concrete input of `layer` is laid out by: the model's own (its
/// distribution, else ModelParallel of its LayoutMap), else the thread's distribution, else the
/// thread's LayoutMap, else DataParallel on the mesh of the layer's first variable, else a
/// one-device mesh of cpu:0 (where a layer built outside any scope keeps its weights).
std::shared_ptr<const Distribution> feed_distribution(const Layer& layer);

}  // namespace meshlayout::python
