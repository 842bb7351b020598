// layer.h — Tensor (symbolic or concrete) and Layer, the base of every layer and model.
//
// A Tensor is either concrete (a distributed Array) or symbolic (a shape, plus the layer call
// that produced it: the functional API's KerasTensor). Calling a layer on a symbolic tensor
// builds the layer (creating its weights — lazy under LayoutMap::scope()) and returns a
// symbolic output; calling it on a concrete tensor runs the forward pass.
// Layer names are unique per class and auto-generated Keras-style: dense, dense_1, …
//
// Example:
//   Tensor inputs = Input({10}, /*batch_size=*/10);
//   auto d1 = std::make_shared<Dense>(20, DenseOptions{.name = "d1"});
//   Tensor x = (*d1)(inputs);            // builds d1: kernel (10, 20), bias (20,)
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/nn/variable.h"

namespace meshlayout {

class Layer;

/// A concrete distributed value, or a symbolic one (shape and producing layer call).
class Tensor {
 public:
  Tensor(Array value);  // NOLINT: implicit, a concrete tensor
  /// A symbolic tensor of `shape` produced by `layer` from `input` (both null for an Input).
  static Tensor symbolic(Shape shape, std::shared_ptr<Layer> layer = nullptr,
                         std::shared_ptr<const Tensor> input = nullptr);

  bool is_symbolic() const { return value_ == nullptr; }
  const Shape& shape() const { return shape_; }
  /// The Array of a concrete tensor; FailedPreconditionError for a symbolic one.
  const Array& value() const;
  const std::shared_ptr<Layer>& producer() const { return producer_; }
  const std::shared_ptr<const Tensor>& input() const { return input_; }

 private:
  Tensor() = default;
  Shape shape_;
  std::shared_ptr<const Array> value_;
  std::shared_ptr<Layer> producer_;
  std::shared_ptr<const Tensor> input_;
};

/// keras.Input(shape, batch_size): a symbolic tensor of shape (batch_size, *shape).
Tensor Input(const Shape& shape, int64_t batch_size);

class Layer : public std::enable_shared_from_this<Layer> {
 public:
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  /// Keras 3 layer path ("sequential/d1", "my_model/dense"); the name until a model sets it.
  const std::string& path() const { return path_.empty() ? name_ : path_; }
  void set_path(std::string path) { path_ = std::move(path); }
  bool built() const { return built_; }

  /// Builds on the first call (from the input's shape), then runs the layer: a symbolic input
  /// gives a symbolic output; a concrete one the forward pass.
  virtual Tensor operator()(const Tensor& x);

  /// (attribute name, variable) of the weights this layer created itself, in creation order.
  const std::vector<std::pair<std::string, VariablePtr>>& own_weights() const { return weights_; }
  /// The regularisation losses of every weight of this layer and its sub-layers that has a
  /// regulariser (keras Layer.losses). Collective under several processes.
  std::vector<double> losses() const;
  /// Sub-layers under their attribute paths ("d1", "blocks.0"); empty for plain layers.
  virtual std::vector<std::pair<std::string, std::shared_ptr<Layer>>> sublayers() const { return {}; }

  virtual Shape compute_output_shape(const Shape& input_shape) const = 0;

 protected:
  /// `class_name` is the snake_case class name used for automatic names ("dense").
  Layer(std::string_view class_name, std::string name);
  virtual void build(const Shape& input_shape) = 0;
  virtual Array call(const Array& x) = 0;
  /// Creates a weight: lazy while a LayoutMap scope or a distribution is current on this
  /// thread, else materialised at once, replicated on a one-device mesh (cpu:0).
  VariablePtr add_weight(VariableSpec spec);
  void set_built() { built_ = true; }

 private:
  std::string name_;
  std::string path_;
  bool built_ = false;
  std::vector<std::pair<std::string, VariablePtr>> weights_;
};

/// Forgets automatic layer names (keras.backend.clear_session()).
void clear_session();

/// Activations, applied shard by shard (softmax first gathers its last dimension).
enum class Activation { kLinear, kRelu, kGelu, kTanh, kSoftmax };
Activation parse_activation(std::string_view name);
Array apply_activation(Activation activation, const Array& x);

struct DenseOptions {
  std::string name;  // automatic ("dense", "dense_1", …) when empty
  Activation activation = Activation::kLinear;
  bool use_bias = true;
  Initializer kernel_initializer = Initializer::glorot_uniform();
  Initializer bias_initializer = Initializer::zeros();
  std::optional<Regularizer> kernel_regularizer;
  std::optional<Regularizer> bias_regularizer;
};

/// keras.layers.Dense: y = activation(x @ kernel + bias); kernel (in, units), bias (units,).
class Dense : public Layer {
 public:
  explicit Dense(int64_t units, DenseOptions options = {});
  int64_t units() const { return units_; }
  const VariablePtr& kernel() const { return kernel_; }
  const VariablePtr& bias() const { return bias_; }
  Shape compute_output_shape(const Shape& input_shape) const override;

 protected:
  void build(const Shape& input_shape) override;
  Array call(const Array& x) override;

 private:
  int64_t units_;
  DenseOptions options_;
  VariablePtr kernel_, bias_;
};

}  // namespace meshlayout
