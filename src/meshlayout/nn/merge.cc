// merge.cc — see merge.h.
#include "meshlayout/nn/merge.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
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
  throw ValueError(fmt::format("A merge layer should be called on a list of inputs. Received: "
                               "inputs of shape {} (not a list); layer {}",
                               shape_to_string(x.shape()), quote(name())));
}

Array MergeLayer::call(const Array& x) {
  throw ValueError(fmt::format("A merge layer should be called on a list of inputs. Received: "
                               "inputs of shape {} (not a list); layer {}",
                               shape_to_string(x.shape()), quote(name())));
}

Shape MergeLayer::merged_shape(const std::vector<Shape>& shapes) const {
  for (const Shape& s : shapes) {
    if (s != shapes[0]) {
      throw ValueError(fmt::format("Inputs have incompatible shapes. Received shapes {} (layer "
                                   "{} needs one shape)",
                                   shapes_text(shapes), quote(name())));
    }
  }
  return shapes[0];
}

Tensor MergeLayer::apply(const std::vector<Tensor>& inputs) {
  if (inputs.empty()) {
    throw ValueError(fmt::format("A merge layer should be called on a list of at least 1 input. "
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
    throw ValueError(fmt::format("layer {} got {} symbolic and {} concrete inputs; call it on "
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
    throw ValueError(fmt::format("A `Concatenate` layer requires inputs with matching shapes "
                                 "except for the concatenation axis. Received: input_shape={}, "
                                 "axis={} (layer {})",
                                 shapes_text(shapes), axis_, quote(name())));
  }
  return out;
}

Array Concatenate::merge(const std::vector<const Array*>& inputs) const {
  return concatenate(inputs, axis_);
}

}  // namespace meshlayout
