#include "meshlayout/nn/layers/reshaping/reshape.h"

#include <fmt/format.h>

#include <cstring>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/memory.h"
#include "meshlayout/nn/gradient_ops.h"

namespace meshlayout {
namespace {

int64_t product(const Shape& shape, size_t from) {
  int64_t n = 1;
  for (size_t i = from; i < shape.size(); ++i) n *= shape[i];
  return n;
}

}  // namespace

Array reshape_keeping_batch(const Array& x, const Shape& shape) {
  if (x.shape().empty() || shape.empty() || shape[0] != x.shape()[0] ||
      product(shape, 0) != product(x.shape(), 0)) {
    throw ValueError(
        fmt::format("cannot reshape a tensor of shape {} to {}: the batch size and "
                    "the element count must stay the same",
                    shape_to_string(x.shape()), shape_to_string(shape)));
  }
  const DimSharding batch = x.layout().axes()[0];
  std::vector<DimSharding> in_axes(x.shape().size());
  in_axes[0] = batch;
  Array src = distribute_tensor(x, TensorLayout(in_axes, x.mesh()));
  std::vector<DimSharding> out_axes(shape.size());
  out_axes[0] = batch;
  Array y = Array::allocate(TensorLayout(out_axes, x.mesh()), shape, x.dtype(), x.runtime_ptr());
  // Each device holds the same rows before and after, whole: the same bytes in the same order.
  const DeviceKind kind = kind_of(y);
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    Array::Shard& s = y.local_shards()[i];
    const Array::Shard* from = src.shard_at(s.position);
    copy_runs(kind,
              {.dst = &s,
               .src = from,
               .run_bytes = static_cast<size_t>(s.box.num_elements()) * dtype_size(y.dtype())});
  });
  return y;
}

Reshape::Reshape(Shape target_shape, ReshapeOptions options)
    : Layer("reshape", std::move(options.name)), target_shape_(std::move(target_shape)) {
  int unknown = 0;
  for (int64_t e : target_shape_) {
    if (e == -1) ++unknown;
    if (e == 0 || e < -1 || unknown > 1) {
      throw ValueError(
          fmt::format("Reshape target_shape {} must hold positive sizes and at most "
                      "one -1 (inferred)",
                      shape_to_string(target_shape_)));
    }
  }
}

Shape Reshape::compute_output_shape(const Shape& input_shape) const {
  if (input_shape.empty()) {
    throw ValueError(
        fmt::format("Reshape layer {} needs inputs with a batch dimension, got shape {}",
                    quote(name()), shape_to_string(input_shape)));
  }
  const int64_t total = product(input_shape, 1);
  int64_t known = 1;
  for (int64_t e : target_shape_) known *= e == -1 ? 1 : e;
  Shape out{input_shape[0]};
  for (int64_t e : target_shape_) out.push_back(e == -1 && known > 0 ? total / known : e);
  if (product(out, 1) != total) {
    throw ValueError(
        fmt::format("Reshape layer {}: the total size of the new array must be "
                    "unchanged, input_shape = {}, target_shape = {}",
                    quote(name()), shape_to_string(input_shape), shape_to_string(target_shape_)));
  }
  return out;
}

Array Reshape::call(const Array& x) {
  return reshape_keeping_batch(x, compute_output_shape(x.shape()));
}

Flatten::Flatten(FlattenOptions options) : Layer("flatten", std::move(options.name)) {}

Shape Flatten::compute_output_shape(const Shape& input_shape) const {
  if (input_shape.empty()) {
    throw ValueError(
        fmt::format("Flatten layer {} needs inputs with a batch dimension, got shape {}",
                    quote(name()), shape_to_string(input_shape)));
  }
  return {input_shape[0], product(input_shape, 1)};
}

Array Flatten::call(const Array& x) {
  return reshape_keeping_batch(x, compute_output_shape(x.shape()));
}

namespace {

Array reshape_backward(const std::string& layer, const Shape& out_shape, const Array& x,
                       const Array& dy) {
  check_output_gradient(layer, dy, out_shape);
  Array dx = reshape_keeping_batch(dy, x.shape());
  if (dx.layout() == x.layout()) return dx;
  return distribute_tensor(dx, x.layout());
}

}  // namespace

Array Reshape::backward(const Array& x, const Array& dy, Gradients&) {
  return reshape_backward(name(), compute_output_shape(x.shape()), x, dy);
}

Array Flatten::backward(const Array& x, const Array& dy, Gradients&) {
  return reshape_backward(name(), compute_output_shape(x.shape()), x, dy);
}

}  // namespace meshlayout
