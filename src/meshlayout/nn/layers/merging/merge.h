// merge.h — Keras merge layers: Add, Multiply and Concatenate, layers of several inputs in the
// functional API (keras.layers.Add()([a, b])). They have no weights. On concrete inputs they
// run ops/elementwise.h: the result is in the first input's layout (other inputs are
// resharded to it the cheapest way; inputs already in that layout move nothing), Concatenate's
// with the joined axis whole on each device.
//
// Example (a residual connection):
//   Tensor x = Input({16}, 8);
//   Tensor h = (*std::make_shared<Dense>(16))(x);
//   Tensor y = std::make_shared<Add>()->apply({x, h});
//   auto model = Model::functional(x, y);
//   const Array* ins[] = {&xa, &ha};
//   std::vector<Array> d = add->backward_inputs(ins, dy, grads);   // d[0] in xa's layout, …
#pragma once

#include <span>
#include <string>
#include <vector>

#include "meshlayout/nn/layer.h"

namespace meshlayout {

/// Shared by the merge layers (keras.layers.Merge): checks the list and its shapes, returns a
/// symbolic output for symbolic inputs, else merges the arrays.
class MergeLayer : public Layer {
 public:
  /// ValueError (Keras' message) for a single tensor instead of a list, an empty list, a mix of
  /// symbolic and concrete inputs, or shapes that do not fit (naming them).
  Tensor apply(const std::vector<Tensor>& inputs) override;
  Tensor operator()(const Tensor& x) override;
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  /// The output shape for these input shapes; ValueError naming them if they do not fit.
  virtual Shape merged_shape(const std::vector<Shape>& shapes) const;
  /// dL/d input i in input i's layout, in order (no weights): Add passes dy to each input,
  /// Multiply gives dy·Π_{j≠i} x_j, Concatenate the slice of dy along its axis. Collective.
  /// \error ValueError for no inputs, shapes that do not fit, or dy not F32 of the merged shape.
  std::vector<Array> backward_inputs(std::span<const Array* const> inputs, const Array& dy,
                                     Gradients& grads) override;
  /// The merge again (no side effects): for a model's backward.
  Array recompute_inputs(std::span<const Array* const> inputs) override;
  /// One input: backward_inputs({&x}).
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;

 protected:
  MergeLayer(std::string_view class_name, std::string name) : Layer(class_name, std::move(name)) {}
  void build(const Shape&) override {}
  Array call(const Array& x) override;
  virtual Array merge(const std::vector<const Array*>& inputs) const = 0;
  /// backward_inputs once the shapes are checked.
  virtual std::vector<Array> input_gradients(std::span<const Array* const> inputs,
                                             const Array& dy) const = 0;
};

/// keras.layers.Add: the element-wise sum of inputs of one shape.
class Add : public MergeLayer {
 public:
  explicit Add(std::string name = "") : MergeLayer("add", std::move(name)) {}

 protected:
  Array merge(const std::vector<const Array*>& inputs) const override;
  std::vector<Array> input_gradients(std::span<const Array* const> inputs,
                                     const Array& dy) const override;
};

/// keras.layers.Multiply: the element-wise product of inputs of one shape.
class Multiply : public MergeLayer {
 public:
  explicit Multiply(std::string name = "") : MergeLayer("multiply", std::move(name)) {}

 protected:
  Array merge(const std::vector<const Array*>& inputs) const override;
  std::vector<Array> input_gradients(std::span<const Array* const> inputs,
                                     const Array& dy) const override;
};

/// keras.layers.Concatenate(axis=-1): inputs joined along `axis`, equal elsewhere.
class Concatenate : public MergeLayer {
 public:
  explicit Concatenate(int64_t axis = -1, std::string name = "")
      : MergeLayer("concatenate", std::move(name)), axis_(axis) {}
  int64_t axis() const { return axis_; }
  Shape merged_shape(const std::vector<Shape>& shapes) const override;

 protected:
  Array merge(const std::vector<const Array*>& inputs) const override;
  std::vector<Array> input_gradients(std::span<const Array* const> inputs,
                                     const Array& dy) const override;

 private:
  int64_t axis_;
};

}  // namespace meshlayout
