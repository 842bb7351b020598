#include "meshlayout/nn/rms_normalization.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {

RMSNormalization::RMSNormalization(RMSNormalizationOptions options)
    : Layer("rms_normalization", options.name), options_(std::move(options)) {
  if (!std::isfinite(options_.epsilon) || options_.epsilon < 0) {
    throw ValueError(fmt::format("RMSNormalization epsilon must be finite and >= 0, got {}",
                                 options_.epsilon));
  }
}

void RMSNormalization::build(const Shape& input_shape) {
  if (input_shape.empty()) {
    throw ValueError(fmt::format("RMSNormalization layer {} needs inputs of rank >= 1, got shape {}",
                                 quote(name()), shape_to_string(input_shape)));
  }
  features_ = input_shape.back();
  scale_ = add_weight({.name = "scale", .shape = {features_}, .initializer = options_.scale_initializer,
                       .layout = options_.scale_layout});
}

Array RMSNormalization::call(const Array& x) {
  if (x.dtype() != DType::kF32 || x.shape().empty() || x.shape().back() != features_) {
    throw ValueError(fmt::format("RMSNormalization layer {} was built for F32 inputs of {} features "
                                 "(the last dimension), got {} {}",
                                 quote(name()), features_, dtype_name(x.dtype()),
                                 shape_to_string(x.shape())));
  }
  const DeviceMesh mesh = scale_->value().mesh();
  const int rank = static_cast<int>(x.shape().size());
  std::vector<DimSharding> axes =
      x.mesh() == mesh ? x.layout().axes() : std::vector<DimSharding>(static_cast<size_t>(rank));
  axes.back() = DimSharding();  // whole rows
  // Normalised straight from x into a new output when x already has whole rows (no copy).
  const TensorLayout target(axes, mesh);
  std::optional<Array> moved;
  const Array& src = x.layout() == target ? x : moved.emplace(distribute_tensor(x, target));
  Array y = allocate_agreed(target, x.shape(), DType::kF32, src.runtime_ptr());
  const Array scale = distribute_tensor(scale_->value(), TensorLayout({DimSharding()}, mesh));
  const int64_t row = features_;
  const double epsilon = options_.epsilon;
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    Array::Shard& s = y.local_shards()[i];
    if (row == 0 || s.box.num_elements() == 0) return;
    float* p = reinterpret_cast<float*>(s.buffer.data());
    const float* in = reinterpret_cast<const float*>(src.shard_at(s.position)->buffer.data());
    const float* g = reinterpret_cast<const float*>(scale.shard_at(s.position)->buffer.data());
    for (int64_t r = 0; r < s.box.num_elements() / row; ++r) {
      const float* v = in + r * row;
      float* out = p + r * row;
      // Eight float lanes (vectorised), summed in double: within float rounding of a double sum.
      float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t k = 0;
      for (; k + 8 <= row; k += 8) {
        for (int j = 0; j < 8; ++j) lanes[j] += v[k + j] * v[k + j];
      }
      double squares = 0;
      for (; k < row; ++k) squares += static_cast<double>(v[k]) * v[k];
      for (float lane : lanes) squares += lane;
      const float inv = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(row) + epsilon));
      for (k = 0; k < row; ++k) out[k] = v[k] * inv * g[k];
    }
  });
  return y;
}

}  // namespace meshlayout
