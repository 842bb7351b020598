// reshape.h — keras.layers.Reshape and keras.layers.Flatten on distributed arrays. No weights.
//
//   Reshape(target_shape)  (batch, …) → (batch, *target_shape); one entry may be -1 (inferred)
//   Flatten()              (batch, …) → (batch, product of the rest); (batch,) → (batch, 1)
//
// Layout: the batch dimension keeps its sharding; the other dimensions are gathered first when
// split (a row-major reshape of a split inner dimension is not a block split), then every
// device reshapes its rows in place of a copy. Output layout: (batch axes, None, …).
//
// Example:
//   auto flat = std::make_shared<Flatten>();
//   Tensor y = (*flat)(x);   // x (8, 4, 4, 3) laid out (data, None, None, None) → (8, 48)
//   Array dx = flat->backward(x, dy, grads);   // dy (8, 48) → (8, 4, 4, 3) in x's layout
#pragma once

#include <string>

#include "meshlayout/nn/layer.h"

namespace meshlayout {

struct ReshapeOptions {
  std::string name;  // automatic ("reshape", "reshape_1", …) when empty
};

class Reshape : public Layer {
 public:
  /// ValueError for an entry below -1 or 0, or more than one -1.
  explicit Reshape(Shape target_shape, ReshapeOptions options = {});
  const Shape& target_shape() const { return target_shape_; }
  /// ValueError naming both shapes if the element counts differ.
  Shape compute_output_shape(const Shape& input_shape) const override;
  /// dy reshaped back to x's shape, in x's layout. ValueError for dy not F32 of the output shape.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;

 protected:
  void build(const Shape& input_shape) override { (void)compute_output_shape(input_shape); }
  Array call(const Array& x) override;

 private:
  Shape target_shape_;
};

struct FlattenOptions {
  std::string name;  // automatic ("flatten", "flatten_1", …) when empty
};

class Flatten : public Layer {
 public:
  explicit Flatten(FlattenOptions options = {});
  /// ValueError for a rank-0 input.
  Shape compute_output_shape(const Shape& input_shape) const override;
  /// As Reshape::backward.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;

 protected:
  void build(const Shape& input_shape) override { (void)compute_output_shape(input_shape); }
  Array call(const Array& x) override;
};

/// `x` as `shape` (same batch size and element count): the batch dimension keeps its sharding,
/// the rest is whole. Used by Reshape and Flatten.
Array reshape_keeping_batch(const Array& x, const Shape& shape);

}  // namespace meshlayout
