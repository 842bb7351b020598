// elementwise.cc — see elementwise.h.
#include "meshlayout/ops/elementwise.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/kernels/elementwise.h"

namespace meshlayout {
namespace {

void check_float(DType dtype, std::string_view op) {
  if (dtype != DType::kF32 && dtype != DType::kF64) {
    throw ValueError(fmt::format("{} runs on F32 or F64 tensors, got {}", op, dtype_name(dtype)));
  }
}

void check_binary(const Array& a, const Array& b, std::string_view op) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) {
    throw ValueError(fmt::format("{} needs operands of one shape and dtype, got {} {} and {} {}",
                                 op, shape_to_string(a.shape()), dtype_name(a.dtype()),
                                 shape_to_string(b.shape()), dtype_name(b.dtype())));
  }
  check_float(a.dtype(), op);
}

// out = out ∘ b shard by shard, b brought to out's layout first when it differs.
void combine_into(Array& out, const Array& b, Binary function) {
  std::optional<Array> moved;
  const Array& aligned =
      b.layout() == out.layout() ? b : moved.emplace(distribute_tensor(b, out.layout()));
  const DType dtype = out.dtype();
  const DeviceKind kind = kind_of(out);
  out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
    Array::Shard& o = out.local_shards()[i];
    combine_shards(
        kind, {.y = &o, .x = aligned.shard_at(o.position), .function = function, .dtype = dtype});
  });
}

Array binary(const Array& a, const Array& b, std::string_view op, Binary combine) {
  check_binary(a, b, op);
  Array out = distribute_tensor(a, a.layout());  // a's values, in a's layout
  combine_into(out, b, combine);
  return out;
}

Array binary_in_place(Array&& a, const Array& b, std::string_view op, Binary combine) {
  if (&a == &b)
    return binary(static_cast<const Array&>(a), b, op, combine);  // add(std::move(x), x)
  check_binary(a, b, op);
  Array out = std::move(a);
  combine_into(out, b, combine);
  return out;
}

}  // namespace

Array add(const Array& a, const Array& b) { return binary(a, b, "add", Binary::kAdd); }
Array multiply(const Array& a, const Array& b) {
  return binary(a, b, "multiply", Binary::kMultiply);
}
Array add(Array&& a, const Array& b) {
  return binary_in_place(std::move(a), b, "add", Binary::kAdd);
}
Array multiply(Array&& a, const Array& b) {
  return binary_in_place(std::move(a), b, "multiply", Binary::kMultiply);
}

Array concatenate(std::span<const Array* const> inputs, int64_t axis) {
  if (inputs.empty()) throw ValueError("concatenate needs at least one input, got none");
  const Array& first = *inputs[0];
  const int64_t rank = static_cast<int64_t>(first.shape().size());
  if (axis < -rank || axis >= rank) {
    throw ValueError(
        fmt::format("concatenate axis {} is out of range for inputs of rank {}", axis, rank));
  }
  const size_t ax = static_cast<size_t>(axis < 0 ? axis + rank : axis);
  check_float(first.dtype(), "concatenate");
  Shape out_shape = first.shape();
  out_shape[ax] = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Array& x = *inputs[i];
    Shape off_axis = x.shape(), expected = first.shape();
    bool same = off_axis.size() == expected.size() && x.dtype() == first.dtype();
    if (same) {
      off_axis[ax] = expected[ax] = 0;
      same = off_axis == expected;
    }
    if (!same) {
      throw ValueError(fmt::format(
          "concatenate on axis {} needs inputs of one dtype and equal extents off that axis: "
          "input 0 is {} {}, input {} is {} {}",
          axis, shape_to_string(first.shape()), dtype_name(first.dtype()), i,
          shape_to_string(x.shape()), dtype_name(x.dtype())));
    }
    if (__builtin_add_overflow(out_shape[ax], x.shape()[ax], &out_shape[ax])) {
      throw ValueError(
          fmt::format("concatenate: the joined extent of axis {} overflows int64", axis));
    }
  }
  // Every input in the first one's layout with the joined axis whole: then the devices hold
  // boxes that agree off the axis and each joins its own.
  std::vector<DimSharding> dims = first.layout().axes();
  dims[ax] = DimSharding();
  const TensorLayout layout(dims, first.mesh());
  std::vector<Array> aligned;
  aligned.reserve(inputs.size());
  for (const Array* x : inputs) aligned.push_back(distribute_tensor(*x, layout));
  Array out = allocate_agreed(layout, out_shape, first.dtype(), first.runtime_ptr());
  const size_t elem = dtype_size(first.dtype());
  const DeviceKind kind = kind_of(out);
  out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
    Array::Shard& o = out.local_shards()[i];
    std::vector<const Array::Shard*> shards;
    shards.reserve(aligned.size());
    for (const Array& x : aligned) shards.push_back(x.shard_at(o.position));
    concatenate_shards(kind, {.dst = &o, .inputs = shards, .axis = ax, .elem = elem});
  });
  return out;
}

}  // namespace meshlayout
