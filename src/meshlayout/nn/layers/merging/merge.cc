// merge.cc — see merge.h.
#include "meshlayout/nn/layers/merging/merge.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/memory.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/nn/gradient_ops.h"
#include "meshlayout/ops/elementwise.h"

namespace meshlayout {
namespace {

std::string shapes_text(const std::vector<Shape>& shapes) {
  std::string out;
  for (const Shape& s : shapes) out += (out.empty() ? "" : ", ") + shape_to_string(s);
  return "[" + out + "]";
}

}  // namespace

Tensor MergeLayer::operator()(const Tensor& x) {
  throw ValueError(
      fmt::format("A merge layer should be called on a list of inputs. Received: "
                  "inputs of shape {} (not a list); layer {}",
                  shape_to_string(x.shape()), quote(name())));
}

Array MergeLayer::call(const Array& x) {
  throw ValueError(
      fmt::format("A merge layer should be called on a list of inputs. Received: "
                  "inputs of shape {} (not a list); layer {}",
                  shape_to_string(x.shape()), quote(name())));
}

Shape MergeLayer::merged_shape(const std::vector<Shape>& shapes) const {
  for (const Shape& s : shapes) {
    if (s != shapes[0]) {
      throw ValueError(
          fmt::format("Inputs have incompatible shapes. Received shapes {} (layer "
                      "{} needs one shape)",
                      shapes_text(shapes), quote(name())));
    }
  }
  return shapes[0];
}

Tensor MergeLayer::apply(const std::vector<Tensor>& inputs) {
  if (inputs.empty()) {
    throw ValueError(
        fmt::format("A merge layer should be called on a list of at least 1 input. "
                    "Got 0 inputs (layer {})",
                    quote(name())));
  }
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  const Shape out_shape = merged_shape(shapes);
  NameScope scope = open_name_scope();
  if (!built()) set_built();
  const size_t symbolic = static_cast<size_t>(
      std::count_if(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.is_symbolic(); }));
  if (symbolic == inputs.size()) {
    std::vector<std::shared_ptr<const Tensor>> ins;
    for (const Tensor& t : inputs) ins.push_back(std::make_shared<const Tensor>(t));
    return Tensor::symbolic(out_shape, shared_from_this(), std::move(ins));
  }
  if (symbolic != 0) {
    throw ValueError(
        fmt::format("layer {} got {} symbolic and {} concrete inputs; call it on "
                    "symbolic tensors to build a model, or on arrays to run it",
                    quote(name()), symbolic, inputs.size() - symbolic));
  }
  std::vector<const Array*> arrays;
  for (const Tensor& t : inputs) arrays.push_back(&t.value());
  return Tensor(merge(arrays));
}

Array Add::merge(const std::vector<const Array*>& inputs) const {
  Array out = distribute_tensor(*inputs[0], inputs[0]->layout());
  for (size_t i = 1; i < inputs.size(); ++i) out = add(out, *inputs[i]);
  return out;
}

Array Multiply::merge(const std::vector<const Array*>& inputs) const {
  Array out = distribute_tensor(*inputs[0], inputs[0]->layout());
  for (size_t i = 1; i < inputs.size(); ++i) out = multiply(out, *inputs[i]);
  return out;
}

Shape Concatenate::merged_shape(const std::vector<Shape>& shapes) const {
  const int64_t rank = static_cast<int64_t>(shapes[0].size());
  const bool axis_ok = axis_ >= -rank && axis_ < rank;
  bool fits = axis_ok;
  Shape out = shapes[0];
  const size_t ax = static_cast<size_t>(axis_ < 0 ? axis_ + rank : axis_);
  for (size_t i = 1; fits && i < shapes.size(); ++i) {
    Shape a = shapes[i], b = shapes[0];
    fits = a.size() == b.size();
    if (fits) {
      out[ax] += a[ax];
      a[ax] = b[ax] = 0;
      fits = a == b;
    }
  }
  if (!fits) {
    throw ValueError(
        fmt::format("A `Concatenate` layer requires inputs with matching shapes "
                    "except for the concatenation axis. Received: input_shape={}, "
                    "axis={} (layer {})",
                    shapes_text(shapes), axis_, quote(name())));
  }
  return out;
}

Array Concatenate::merge(const std::vector<const Array*>& inputs) const {
  return concatenate(inputs, axis_);
}

std::vector<Array> MergeLayer::backward_inputs(std::span<const Array* const> inputs,
                                               const Array& dy, Gradients&) {
  if (inputs.empty()) {
    throw ValueError(fmt::format("backward of merge layer {}: no inputs", quote(name())));
  }
  std::vector<Shape> shapes;
  for (const Array* a : inputs) shapes.push_back(a->shape());
  check_output_gradient(name(), dy, merged_shape(shapes));
  return input_gradients(inputs, dy);
}

Array MergeLayer::recompute_inputs(std::span<const Array* const> inputs) {
  return merge(std::vector<const Array*>(inputs.begin(), inputs.end()));
}

Array MergeLayer::backward(const Array& x, const Array& dy, Gradients& grads) {
  const Array* inputs[] = {&x};
  return std::move(backward_inputs(inputs, dy, grads)[0]);
}

std::vector<Array> Add::input_gradients(std::span<const Array* const> inputs,
                                        const Array& dy) const {
  std::vector<Array> out;
  for (const Array* a : inputs) out.push_back(distribute_tensor(dy, a->layout()));
  return out;
}

std::vector<Array> Multiply::input_gradients(std::span<const Array* const> inputs,
                                             const Array& dy) const {
  std::vector<Array> out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Array g = distribute_tensor(dy, inputs[i]->layout());
    for (size_t j = 0; j < inputs.size(); ++j) {
      if (j != i) g = multiply(std::move(g), *inputs[j]);
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<Array> Concatenate::input_gradients(std::span<const Array* const> inputs,
                                                const Array& dy) const {
  const int64_t rank = static_cast<int64_t>(dy.shape().size());
  const size_t axis = static_cast<size_t>(axis_ < 0 ? axis_ + rank : axis_);
  // dy with the joined axis whole; each input's slice is cut from it by every device, in the
  // same layout, then brought to the input's layout.
  std::vector<DimSharding> axes = dy.layout().axes();
  axes[axis] = DimSharding();
  const TensorLayout whole(axes, dy.mesh());
  std::optional<Array> moved;
  const Array& g = in_layout(dy, whole, moved);
  const size_t elem = dtype_size(dy.dtype());
  std::vector<Array> out;
  int64_t offset = 0;
  for (const Array* a : inputs) {
    Array slice = allocate_agreed(whole, a->shape(), dy.dtype(), dy.runtime_ptr());
    const DeviceKind kind = kind_of(slice);
    slice.runtime().pool().parallel_for(slice.local_shards().size(), [&](size_t i) {
      Array::Shard& s = slice.local_shards()[i];
      const Array::Shard& from = *g.shard_at(s.position);
      Box in_dy = s.box;  // the slice's box in dy's coordinates
      in_dy.offset[axis] += offset;
      copy_box_on_device(kind, {.dst = &s,
                                .dst_box = in_dy,
                                .src = &from,
                                .src_box = from.box,
                                .region = in_dy,
                                .elem = elem});
    });
    offset += a->shape()[axis];
    out.push_back(slice.layout() == a->layout() ? std::move(slice)
                                                : distribute_tensor(slice, a->layout()));
  }
  return out;
}

}  // namespace meshlayout
