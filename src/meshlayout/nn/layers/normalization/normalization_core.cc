#include "meshlayout/nn/layers/normalization/normalization_core.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/nn/float_compute.h"
#include "meshlayout/nn/gradient_ops.h"

namespace meshlayout::internal_nn {

void check_epsilon(std::string_view kind, double epsilon, bool positive) {
  if (!std::isfinite(epsilon) || (positive ? epsilon <= 0 : epsilon < 0)) {
    throw ValueError(fmt::format("{} epsilon must be finite and {} 0, got {}", kind,
                                 positive ? ">" : ">=", epsilon));
  }
}

int64_t normalized_features(std::string_view kind, const std::string& layer,
                            const Shape& input_shape) {
  if (input_shape.empty()) {
    throw ValueError(fmt::format("{} layer {} needs inputs of rank >= 1, got shape {}", kind,
                                 quote(layer), shape_to_string(input_shape)));
  }
  return input_shape.back();
}

void check_built_dtype(std::string_view kind, const std::string& layer, DType compute) {
  check_compute_dtype(kind, layer, compute);
}

void check_normalized_input(std::string_view kind, const std::string& layer, const Array& x,
                            DType compute, int64_t features, InputMessage message) {
  if (message == InputMessage::kScale) {
    if (x.dtype() != compute || x.shape().empty() || x.shape().back() != features) {
      throw ValueError(
          fmt::format("{} layer {} was built for {} inputs (its scale's dtype; no cast) of {} "
                      "features (the last dimension), got {} {}",
                      kind, quote(layer), dtype_name(compute), features, dtype_name(x.dtype()),
                      shape_to_string(x.shape())));
    }
    return;
  }
  check_input_dtype(kind, layer, x.dtype(), compute);
  if (x.shape().empty() || x.shape().back() != features) {
    throw ValueError(
        fmt::format("{} layer {} was built for {} features (the last dimension), got an input of "
                    "shape {}",
                    kind, quote(layer), features, shape_to_string(x.shape())));
  }
}

void check_normalized_backward(std::string_view kind, const std::string& layer, bool built,
                               const Array& x, const Array& dy, DType compute, int64_t features,
                               InputMessage message) {
  if (!built) {
    throw FailedPreconditionError(
        fmt::format("{} layer {} is not built: call it before its backward", kind, quote(layer)));
  }
  check_normalized_input(kind, layer, x, compute, features, message);
  check_output_gradient(layer, dy, x.shape(), x.dtype());
}

TensorLayout whole_rows_layout(const Array& x, const DeviceMesh& mesh) {
  const int rank = static_cast<int>(x.shape().size());
  std::vector<DimSharding> axes =
      x.mesh() == mesh ? x.layout().axes() : std::vector<DimSharding>(static_cast<size_t>(rank));
  axes.back() = DimSharding();  // whole rows: gather the last dimension if it is split
  return TensorLayout(axes, mesh);
}

}  // namespace meshlayout::internal_nn
