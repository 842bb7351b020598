// gated_feed_forward.h — the gated feed-forward block of Llama, Mistral and Gemma (SwiGLU,
// GeGLU) and its backward:
//
//   y = (act(x · W_gate) · (x · W_up)) · W_down     x (…, d) → y (…, output_dim)
//   SwiGLU: act = silu (Llama, Mistral);  GeGLU: act = gelu, tanh approximation (Gemma)
// Three bias-free Dense sub-layers hold the kernels: gate and up (d, intermediate_dim), down
// (intermediate_dim, output_dim); the gate is fused (ops/swiglu.h's gated_unit), the down
// projection can take a residual into its output (matmul's add_to_output). Standalone, the
// kernels' paths are "<name>/<gate_name>/kernel" and so on. Flat (GatedFeedForwardOptions::flat),
// the projections are built in the enclosing layer's scope instead — keras-hub's blocks create
// their three denses themselves ("transformer_layer_0/feedforward_gate_dense/kernel") — and
// the enclosing layer tracks gate(), up() and down() itself, so its variables and object paths
// are what they would be had it made them.
//
// Example:
//   auto ffn = std::make_shared<GatedFeedForward>(/*intermediate_dim=*/64, /*output_dim=*/16,
//       GatedFeedForwardOptions{.activation = GatedActivation::kGeluTanh});
//   Array y = ffn->call_on(x);                      // x (batch, seq, 16) → (batch, seq, 16)
//   Array dx = ffn->backward(x, dy, grads);         // grads of the three kernels
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "meshlayout/nn/layer.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/ops/swiglu.h"

namespace meshlayout {

/// The gate's activation: silu (SwiGLU) or gelu with the tanh approximation (GeGLU, keras
/// gelu(approximate=True)).
enum class GatedActivation { kSilu, kGeluTanh };

/// act(g) · u element by element in g's layout (u brought to it): swiglu, or its GeGLU twin
/// computed in the element type. Collective when u's layout differs. ValueError unless g and u
/// share shape and dtype (F32 or F64).
Array gated_activation(GatedActivation activation, const Array& g, const Array& u);
/// Both gradients of gated_activation(activation, g, u) given dy, in g's layout. Collective.
SwigluGrads gated_activation_backward(GatedActivation activation, const Array& g, const Array& u,
                                      const Array& dy);

struct GatedFeedForwardOptions {
  std::string name;  // automatic ("gated_feed_forward", …) when empty
  GatedActivation activation = GatedActivation::kSilu;
  std::string gate_name = "gate", up_name = "up", down_name = "down";
  Initializer kernel_initializer = Initializer::glorot_uniform();
  /// Build the projections in the enclosing layer's scope (see the file comment); the block
  /// must then be built from a layer's build() (FailedPreconditionError otherwise).
  bool flat = false;
};

class GatedFeedForward : public Layer {
 public:
  GatedFeedForward(int64_t intermediate_dim, int64_t output_dim,
                   GatedFeedForwardOptions options = {});
  GatedActivation activation() const { return options_.activation; }
  const std::shared_ptr<Dense>& gate() const { return gate_; }
  const std::shared_ptr<Dense>& up() const { return up_; }
  const std::shared_ptr<Dense>& down() const { return down_; }
  Shape compute_output_shape(const Shape& input_shape) const override;

  /// The block on x; with `residual` (the output's shape) added into the down projection's
  /// output (with a row-parallel W_down it joins the one partial sum instead of being added to
  /// every replica). Collective.
  Array forward(const Array& x, const Array* residual = nullptr);

  /// What backward_saved needs from the forward: the two projections before the gate.
  struct Saved {
    std::optional<Array> gate, up;
  };
  /// The block's forward (as call) keeping `saved`. Collective.
  Array forward_for_training(const Array& x, Saved& saved);
  /// dL/dx in x's layout given the block's input x, its `saved` and dy; accumulates the three
  /// kernels' gradients (down, then gate and up). Collective.
  Array backward_saved(const Array& x, const Saved& saved, const Array& dy, Gradients& grads);
  /// Layer::backward: forward_for_training then backward_saved.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;

 protected:
  void build(const Shape& input_shape) override;
  Array call(const Array& x) override { return forward(x); }

 private:
  GatedFeedForwardOptions options_;
  std::shared_ptr<Dense> gate_, up_, down_;
};

}  // namespace meshlayout
