// normalization_core.h — what LayerNormalization, RMSNormalization and BatchNormalization share
// on the nn side (nn internal): the checks of their options, build, call and backward, with the
// messages each layer has always given, and the whole-rows layout of Layer and RMS. Their
// per-shard arithmetic is the kernels' (kernels/normalization.h).
//
// Example (a layer's backward):
//   internal_nn::check_built_dtype("RMSNormalization", name(), scale_->dtype());   // in build
//   internal_nn::check_normalized_backward("LayerNormalization", name(), built(), x, dy,
//                                          compute_dtype(), features_);
//   const TensorLayout target = internal_nn::whole_rows_layout(x, mesh);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "meshlayout/array/array.h"

namespace meshlayout::internal_nn {

/// ValueError unless epsilon is finite and >= 0 (> 0 when `positive`):
/// "<kind> epsilon must be finite and >= 0, got -1".
void check_epsilon(std::string_view kind, double epsilon, bool positive = false);

/// The features (the last dimension) of a build's input shape; ValueError for rank 0:
/// "<kind> layer '<name>' needs inputs of rank >= 1, got shape ()".
int64_t normalized_features(std::string_view kind, const std::string& layer,
                            const Shape& input_shape);

/// The last step of each build: ValueError unless the weights' dtype (the compute dtype) is F32
/// or F64, as every layer computing in floats (check_compute_dtype, float_compute.h):
/// "<kind> layer '<name>' has BF16 weights (its dtype); it computes in F32 or F64 only …".
void check_built_dtype(std::string_view kind, const std::string& layer, DType compute);

/// How check_normalized_input words a refusal.
enum class InputMessage {
  /// The dtype as check_input_dtype (gradient_ops.h), then "<kind> layer '<name>' was built for
  /// 3 features (the last dimension), got an input of shape (2, 4)" (Layer, Batch).
  kSeparate,
  /// One message for both: "<kind> layer '<name>' was built for F32 inputs (its scale's dtype;
  /// no cast) of 3 features (the last dimension), got F64 (2, 4)" (RMS).
  kScale,
};

/// ValueError unless x is of the compute dtype (no cast) with `features` as its last dimension.
void check_normalized_input(std::string_view kind, const std::string& layer, const Array& x,
                            DType compute, int64_t features,
                            InputMessage message = InputMessage::kSeparate);

/// A backward's checks, in order: FailedPreconditionError unless `built` ("<kind> layer '<name>'
/// is not built: call it before its backward"), check_normalized_input for x, then dy of x's
/// shape and dtype (check_output_gradient).
void check_normalized_backward(std::string_view kind, const std::string& layer, bool built,
                               const Array& x, const Array& dy, DType compute, int64_t features,
                               InputMessage message = InputMessage::kSeparate);

/// The layout on `mesh` with whole rows: x's splits (x on `mesh`; replicated otherwise) but for
/// its last dimension, not split (Layer and RMS normalise whole rows).
TensorLayout whole_rows_layout(const Array& x, const DeviceMesh& mesh);

}  // namespace meshlayout::internal_nn
