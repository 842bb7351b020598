// gradient_ops.h — small pieces the layers' backward passes share (nn internal): the sum of a
// gradient over every leading position into a weight's layout (a bias, a norm's scale), a
// reshape that moves no data where the layout allows, and the check of dy against the call.
//
// sum_over_leading runs as onesᵀ · a through matmul_backward_weight (ops/matmul_backward.h):
// the leading positions are the contracted dimension, so a batch split over 'data' (or rows
// held by other processes) becomes a partial sum over 'data' completed by matmul's conjugate
// collective — the data-parallel all-reduce of a bias gradient, with no collective of its own.
//
// Example (Dense's bias):
//   Array db = sum_over_leading(dz, 1, bias->value().layout());   // dz (B, T, N) → (N,)
//   grads.accumulate(*bias, std::move(db));
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "meshlayout/array/array.h"

namespace meshlayout {

/// `a` (L…, T…) summed over its leading dimensions → (T…) in `layout`, T… its last `trailing`
/// dimensions. F32 or F64 (the sum in a's dtype). Collective. ValueError naming the shape if
/// trailing is not in [1, rank].
Array sum_over_leading(const Array& a, int trailing, const TensorLayout& layout);

/// `a` as `shape` (same element count): a view of its shards where the layout allows
/// (array_view.h), else a view of a reshard kept in `storage`. Must not outlive a or storage.
Array reshaped_view(const Array& a, const Shape& shape, std::optional<Array>& storage);

/// `a` as `shape`, taking its buffers (no copy) where the layout allows, else resharded first.
Array reshaped(Array&& a, const Shape& shape);

/// `a` itself when it is laid out by `layout`, else its reshard kept in `storage`.
const Array& in_layout(const Array& a, const TensorLayout& layout, std::optional<Array>& storage);

/// An array of `shape` under `layout` filled with `value` (allocation agreed), F32 or F64.
/// Collective.
Array filled(const TensorLayout& layout, const Shape& shape, float value,
             const std::shared_ptr<Runtime>& runtime, DType dtype = DType::kF32);

/// ValueError unless dy is `dtype` (the layer's compute dtype) of `expected` shape, naming the
/// layer, both shapes and dtypes.
void check_output_gradient(const std::string& layer, const Array& dy, const Shape& expected,
                           DType dtype = DType::kF32);

/// ValueError unless an input's dtype is the layer's compute dtype (its weights'): layers do not
/// cast (floatx.h); "<kind> layer '<name>' computes in F64 (its weights' dtype), got an F32 input".
/// `why` replaces "its weights' dtype" for a layer without weights.
void check_input_dtype(std::string_view kind, const std::string& layer, DType input, DType compute,
                       std::string_view why = "its weights' dtype");

}  // namespace meshlayout
