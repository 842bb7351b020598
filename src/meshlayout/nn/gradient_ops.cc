// gradient_ops.cc — see gradient_ops.h.
#include "meshlayout/nn/gradient_ops.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshlayout/array/array_view.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/memory.h"
#include "meshlayout/ops/matmul_backward.h"

namespace meshlayout {

Array reshaped_view(const Array& a, const Shape& shape, std::optional<Array>& storage) {
  if (const auto layout = local_reshape_layout(a.layout(), a.shape(), shape)) {
    return view_shards(a, shape, *layout);
  }
  storage.emplace(distribute_tensor(a, viewable_layout(a.layout(), a.shape(), shape)));
  return view_shards(*storage, shape, *local_reshape_layout(storage->layout(), a.shape(), shape));
}

Array reshaped(Array&& a, const Shape& shape) {
  if (const auto layout = local_reshape_layout(a.layout(), a.shape(), shape)) {
    return reshape_shards(std::move(a), shape, *layout);
  }
  Array moved = distribute_tensor(a, viewable_layout(a.layout(), a.shape(), shape));
  const TensorLayout layout = *local_reshape_layout(moved.layout(), moved.shape(), shape);
  return reshape_shards(std::move(moved), shape, layout);
}

const Array& in_layout(const Array& a, const TensorLayout& layout, std::optional<Array>& storage) {
  if (a.layout() == layout) return a;
  return storage.emplace(distribute_tensor(a, layout));
}

Array filled(const TensorLayout& layout, const Shape& shape, float value,
             const std::shared_ptr<Runtime>& runtime, DType dtype) {
  Array out = allocate_agreed(layout, shape, dtype, runtime);
  const DeviceKind kind = kind_of(out);
  out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
    fill_scalar(kind, {.shard = &out.local_shards()[i], .dtype = dtype, .value = value});
  });
  return out;
}

Array sum_over_leading(const Array& a, int trailing, const TensorLayout& layout) {
  const int rank = static_cast<int>(a.shape().size());
  if (trailing < 1 || trailing > rank || (a.dtype() != DType::kF32 && a.dtype() != DType::kF64)) {
    throw ValueError(
        fmt::format("sum_over_leading: cannot keep the last {} dimensions of a {} {} "
                    "array (expected F32 or F64 and 1 <= trailing <= rank)",
                    trailing, dtype_name(a.dtype()), shape_to_string(a.shape())));
  }
  const Shape tail(a.shape().end() - trailing, a.shape().end());
  const Shape lead(a.shape().begin(), a.shape().end() - trailing);
  const int64_t m = num_elements(lead), t = num_elements(tail);
  std::optional<Array> store;
  const Array a2 = reshaped_view(a, {m, t}, store);  // (M, T)
  const DeviceMesh& mesh = a.mesh();
  // onesᵀ · a2: the contraction over M is matmul's partial sum over a's row axes.
  const Array ones = filled(TensorLayout({a2.layout().axes()[0], DimSharding()}, mesh), {m, 1},
                            1.0f, a.runtime_ptr(), a.dtype());
  DimSharding columns = a2.layout().axes()[1];
  if (layout.device_mesh() && *layout.device_mesh() == mesh) {  // land in the target's split
    if (const auto flat = local_reshape_layout(layout, tail, {t})) columns = flat->axes()[0];
  }
  Array sum = reshaped(
      matmul_backward_weight(ones, a2, TensorLayout({DimSharding(), columns}, mesh)), tail);
  if (sum.layout() == layout) return sum;
  return distribute_tensor(sum, layout);
}

void check_output_gradient(const std::string& layer, const Array& dy, const Shape& expected,
                           DType dtype) {
  if (dy.dtype() != dtype || dy.shape() != expected) {
    throw ValueError(
        fmt::format("backward of layer {}: dy must be {} of the call's output shape {}, "
                    "got {} {}",
                    quote(layer), dtype_name(dtype), shape_to_string(expected),
                    dtype_name(dy.dtype()), shape_to_string(dy.shape())));
  }
}

void check_input_dtype(std::string_view kind, const std::string& layer, DType input, DType compute,
                       std::string_view why) {
  if (input != compute) {
    throw ValueError(
        fmt::format("{} layer {} computes in {} ({}), got an {} input; "
                    "layers do not cast: convert the input first",
                    kind, quote(layer), dtype_name(compute), why, dtype_name(input)));
  }
}

}  // namespace meshlayout
