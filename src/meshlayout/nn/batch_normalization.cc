#include "meshlayout/nn/batch_normalization.h"

#include <fmt/format.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {

BatchNormalization::BatchNormalization(BatchNormalizationOptions options)
    : Layer("batch_normalization", options.name), options_(std::move(options)) {
  if (!std::isfinite(options_.epsilon) || options_.epsilon <= 0) {
    throw ValueError(fmt::format("BatchNormalization epsilon must be finite and > 0, got {}",
                                 options_.epsilon));
  }
  if (!(options_.momentum >= 0 && options_.momentum <= 1)) {
    throw ValueError(fmt::format("BatchNormalization momentum must be in [0, 1], got {}",
                                 options_.momentum));
  }
}

void BatchNormalization::set_training(bool training) {
  if (training) {
    throw FailedPreconditionError(fmt::format(
        "BatchNormalization layer {} runs in inference mode only (moving statistics); training "
        "mode arrives with the train module",
        quote(name())));
  }
}

void BatchNormalization::build(const Shape& input_shape) {
  if (input_shape.empty()) {
    throw ValueError(fmt::format("BatchNormalization layer {} needs inputs of rank >= 1, got shape {}",
                                 quote(name()), shape_to_string(input_shape)));
  }
  features_ = input_shape.back();
  const Shape shape{features_};
  if (options_.scale) {
    gamma_ = add_weight({.name = "gamma", .shape = shape, .initializer = options_.gamma_initializer,
                         .layout = options_.gamma_layout});
  }
  if (options_.center) {
    beta_ = add_weight({.name = "beta", .shape = shape, .initializer = options_.beta_initializer,
                        .layout = options_.beta_layout});
  }
  moving_mean_ = add_weight({.name = "moving_mean", .shape = shape,
                             .initializer = options_.moving_mean_initializer, .trainable = false,
                             .layout = options_.moving_mean_layout});
  moving_variance_ = add_weight({.name = "moving_variance", .shape = shape,
                                 .initializer = options_.moving_variance_initializer,
                                 .trainable = false, .layout = options_.moving_variance_layout});
}

Array BatchNormalization::call(const Array& x) {
  if (x.dtype() != DType::kF32) {
    throw ValueError(fmt::format("BatchNormalization layer {} runs on F32 tensors, got {}",
                                 quote(name()), dtype_name(x.dtype())));
  }
  if (x.shape().empty() || x.shape().back() != features_) {
    throw ValueError(fmt::format("BatchNormalization layer {} was built for {} features (the last "
                                 "dimension), got an input of shape {}",
                                 quote(name()), features_, shape_to_string(x.shape())));
  }
  // The data go to the weights' mesh when it differs, else keep their layout.
  const DeviceMesh mesh = moving_mean_->value().mesh();
  const int rank = static_cast<int>(x.shape().size());
  Array y = distribute_tensor(
      x, x.mesh() == mesh ? x.layout() : TensorLayout::replicated(rank, mesh));
  const TensorLayout weight_layout({y.layout().axes().back()}, mesh);
  auto local = [&](const VariablePtr& v) -> std::optional<Array> {
    if (!v) return std::nullopt;
    return distribute_tensor(v->value(), weight_layout);
  };
  const std::optional<Array> gamma = local(gamma_), beta = local(beta_);
  const Array mean = *local(moving_mean_), var = *local(moving_variance_);
  const double epsilon = options_.epsilon;
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    Array::Shard& s = y.local_shards()[i];
    const int64_t cols = s.box.shape.empty() ? 0 : s.box.shape.back();
    if (cols == 0 || s.box.num_elements() == 0) return;
    auto data = [&](const std::optional<Array>& a) -> const float* {
      return a ? reinterpret_cast<const float*>(a->shard_at(s.position)->buffer.data()) : nullptr;
    };
    const float* g = data(gamma);
    const float* b = data(beta);
    const float* m = reinterpret_cast<const float*>(mean.shard_at(s.position)->buffer.data());
    const float* v = reinterpret_cast<const float*>(var.shard_at(s.position)->buffer.data());
    float* p = reinterpret_cast<float*>(s.buffer.data());
    for (int64_t r = 0; r < s.box.num_elements() / cols; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        double out = (p[r * cols + c] - static_cast<double>(m[c])) / std::sqrt(static_cast<double>(v[c]) + epsilon);
        if (g) out *= g[c];
        if (b) out += b[c];
        p[r * cols + c] = static_cast<float>(out);
      }
    }
  });
  return y;
}

}  // namespace meshlayout
