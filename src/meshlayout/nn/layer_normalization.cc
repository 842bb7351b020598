#include "meshlayout/nn/layer_normalization.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {

LayerNormalization::LayerNormalization(LayerNormalizationOptions options)
    : Layer("layer_normalization", options.name), options_(std::move(options)) {
  if (!std::isfinite(options_.epsilon) || options_.epsilon < 0) {
    throw ValueError(fmt::format("LayerNormalization epsilon must be finite and >= 0, got {}",
                                 options_.epsilon));
  }
}

void LayerNormalization::build(const Shape& input_shape) {
  if (input_shape.empty()) {
    throw ValueError(fmt::format("LayerNormalization layer {} needs inputs of rank >= 1, got shape {}",
                                 quote(name()), shape_to_string(input_shape)));
  }
  features_ = input_shape.back();
  if (options_.scale) {
    gamma_ = add_weight({.name = "gamma", .shape = {features_}, .initializer = options_.gamma_initializer,
                         .layout = options_.gamma_layout});
  }
  if (options_.center) {
    beta_ = add_weight({.name = "beta", .shape = {features_}, .initializer = options_.beta_initializer,
                        .layout = options_.beta_layout});
  }
}

Array LayerNormalization::call(const Array& x) {
  if (x.dtype() != DType::kF32) {
    throw ValueError(fmt::format("LayerNormalization layer {} runs on F32 tensors, got {}",
                                 quote(name()), dtype_name(x.dtype())));
  }
  if (x.shape().empty() || x.shape().back() != features_) {
    throw ValueError(fmt::format("LayerNormalization layer {} was built for {} features (the last "
                                 "dimension), got an input of shape {}",
                                 quote(name()), features_, shape_to_string(x.shape())));
  }
  // The data go to the weights' mesh when it differs (the weights define where the layer runs).
  const VariablePtr& any_weight = gamma_ ? gamma_ : beta_;
  const DeviceMesh mesh = any_weight ? any_weight->value().mesh() : x.mesh();
  const int rank = static_cast<int>(x.shape().size());
  std::vector<DimSharding> axes =
      x.mesh() == mesh ? x.layout().axes() : std::vector<DimSharding>(static_cast<size_t>(rank));
  axes.back() = DimSharding();  // whole rows: gather the last dimension if it is split
  Array y = distribute_tensor(x, TensorLayout(axes, mesh));

  const TensorLayout weight_layout({y.layout().axes().back()}, mesh);
  std::optional<Array> gamma, beta;
  if (gamma_) gamma.emplace(distribute_tensor(gamma_->value(), weight_layout));
  if (beta_) beta.emplace(distribute_tensor(beta_->value(), weight_layout));
  const int64_t row = features_;
  const double epsilon = options_.epsilon;
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    Array::Shard& s = y.local_shards()[i];
    if (row == 0 || s.box.num_elements() == 0) return;
    float* p = reinterpret_cast<float*>(s.buffer.data());
    const float* g = gamma ? reinterpret_cast<const float*>(gamma->shard_at(s.position)->buffer.data()) : nullptr;
    const float* b = beta ? reinterpret_cast<const float*>(beta->shard_at(s.position)->buffer.data()) : nullptr;
    const int64_t rows = s.box.num_elements() / row;
    for (int64_t r = 0; r < rows; ++r) {
      float* v = p + r * row;
      double mean = 0;
      for (int64_t k = 0; k < row; ++k) mean += v[k];
      mean /= static_cast<double>(row);
      double var = 0;
      for (int64_t k = 0; k < row; ++k) var += (v[k] - mean) * (v[k] - mean);
      var /= static_cast<double>(row);
      const double inv = 1.0 / std::sqrt(var + epsilon);
      for (int64_t k = 0; k < row; ++k) {
        double out = (v[k] - mean) * inv;
        if (g) out *= g[k];
        if (b) out += b[k];
        v[k] = static_cast<float>(out);
      }
    }
  });
  return y;
}

}  // namespace meshlayout
