// activation_layer.h — keras.layers.Activation: an activation (activation.h's linear, relu,
// gelu, tanh, softmax, silu) as a layer of its own, no weights; y = act(x) shard by shard in x's
// layout, and its backward dx = act'(x) · dy in x's layout. Named as Keras names it
// ("activation", "activation_1", …). The C++ class is ActivationLayer (Activation is the enum).
//
// Example:
//   auto relu = std::make_shared<ActivationLayer>(Activation::kRelu);
//   Tensor y = (*relu)(x);
//   Array dx = relu->backward(x.value(), dy, grads);
#pragma once

#include <string>

#include "meshlayout/nn/layer.h"
#include "meshlayout/nn/layers/activations/activation.h"

namespace meshlayout {

class ActivationLayer : public Layer {
 public:
  explicit ActivationLayer(Activation activation, std::string name = "");
  Activation activation() const { return activation_; }
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  /// dx = act'(x) · dy in x's layout (apply_activation_backward). Collective for softmax over a
  /// split last dimension, as the forward.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;

 protected:
  void build(const Shape&) override {}
  Array call(const Array& x) override;

 private:
  Activation activation_;
};

}  // namespace meshlayout
