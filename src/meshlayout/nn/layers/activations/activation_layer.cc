#include "meshlayout/nn/layers/activations/activation_layer.h"

#include <utility>

namespace meshlayout {

ActivationLayer::ActivationLayer(Activation activation, std::string name)
    : Layer("activation", std::move(name)), activation_(activation) {}

Array ActivationLayer::call(const Array& x) { return apply_activation(activation_, x); }

Array ActivationLayer::backward(const Array& x, const Array& dy, Gradients&) {
  return apply_activation_backward(activation_, x, dy);
}

}  // namespace meshlayout
