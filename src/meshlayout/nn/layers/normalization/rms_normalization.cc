#include "meshlayout/nn/layers/normalization/rms_normalization.h"

#include <optional>

#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/kernels/memory.h"
#include "meshlayout/kernels/normalization.h"
#include "meshlayout/nn/gradient_ops.h"
#include "meshlayout/nn/layers/normalization/normalization_core.h"
#include "meshlayout/ops/elementwise.h"

namespace meshlayout {
namespace {

// The scale the rows are multiplied by, replicated on `mesh`: the weight, or 1 + the weight
// (unit_offset: Gemma's RMSNorm).
Array effective_scale(const Variable& scale, const DeviceMesh& mesh, bool unit_offset) {
  Array s = distribute_tensor(scale.value(), TensorLayout({DimSharding()}, mesh));
  if (!unit_offset) return s;
  Array ones = allocate_agreed(s.layout(), s.shape(), s.dtype(), s.runtime_ptr());
  const DeviceKind kind = kind_of(ones);
  for (Array::Shard& shard : ones.local_shards()) {
    fill_scalar(kind, {.shard = &shard, .dtype = ones.dtype(), .value = 1.0f});
  }
  return add(std::move(ones), s);
}

}  // namespace

RMSNormalization::RMSNormalization(RMSNormalizationOptions options)
    : Layer("rms_normalization", options.name), options_(std::move(options)) {
  internal_nn::check_epsilon("RMSNormalization", options_.epsilon);
}

void RMSNormalization::build(const Shape& input_shape) {
  features_ = internal_nn::normalized_features("RMSNormalization", name(), input_shape);
  scale_ = add_weight({.name = "scale",
                       .shape = {features_},
                       .initializer = options_.scale_initializer,
                       .layout = options_.scale_layout});
  internal_nn::check_built_dtype("RMSNormalization", name(), scale_->dtype());
}

Array RMSNormalization::call(const Array& x) {
  internal_nn::check_normalized_input("RMSNormalization", name(), x, scale_->dtype(), features_,
                                      internal_nn::InputMessage::kScale);
  const DeviceMesh mesh = scale_->value().mesh();
  // Normalised straight from x into a new output when x already has whole rows (no copy).
  const TensorLayout target = internal_nn::whole_rows_layout(x, mesh);
  std::optional<Array> moved;
  const Array& src = x.layout() == target ? x : moved.emplace(distribute_tensor(x, target));
  Array y = allocate_agreed(target, x.shape(), x.dtype(), src.runtime_ptr());
  const Array scale = effective_scale(*scale_, mesh, options_.unit_offset);
  // In y's dtype (x's and the scale's), the squares summed in E lanes (kernels/normalization.h).
  const DeviceKind kind = kind_of(y);
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    Array::Shard& s = y.local_shards()[i];
    rms_norm_forward(kind, {.y = &s,
                            .x = src.shard_at(s.position),
                            .scale = scale.shard_at(s.position),
                            .features = features_,
                            .epsilon = options_.epsilon,
                            .dtype = y.dtype()});
  });
  return y;
}

Array RMSNormalization::backward(const Array& x, const Array& dy, Gradients& grads) {
  internal_nn::check_normalized_backward("RMSNormalization", name(), scale_ != nullptr, x, dy,
                                         scale_ ? scale_->dtype() : x.dtype(), features_,
                                         internal_nn::InputMessage::kScale);
  const DeviceMesh mesh = scale_->value().mesh();
  const TensorLayout target = internal_nn::whole_rows_layout(x, mesh);  // whole rows, as the call
  std::optional<Array> x_moved, dy_moved;
  const Array& src = in_layout(x, target, x_moved);
  const Array& g_in = in_layout(dy, target, dy_moved);
  Array dx = allocate_agreed(target, x.shape(), x.dtype(), src.runtime_ptr());
  const bool want_scale = scale_->trainable();
  std::optional<Array> contrib;  // dy·x·r, summed over rows below
  if (want_scale) contrib.emplace(allocate_agreed(target, x.shape(), x.dtype(), src.runtime_ptr()));
  const Array scale = effective_scale(*scale_, mesh, options_.unit_offset);
  // In x's dtype; the sums and coefficients in double (kernels/normalization.h).
  const DeviceKind kind = kind_of(dx);
  dx.runtime().pool().parallel_for(dx.local_shards().size(), [&](size_t i) {
    Array::Shard& s = dx.local_shards()[i];
    rms_norm_backward(kind, {.dx = &s,
                             .contrib = contrib ? contrib->shard_at(s.position) : nullptr,
                             .x = src.shard_at(s.position),
                             .dy = g_in.shard_at(s.position),
                             .scale = scale.shard_at(s.position),
                             .features = features_,
                             .epsilon = options_.epsilon,
                             .dtype = dx.dtype()});
  });
  if (contrib) grads.accumulate(*scale_, sum_over_leading(*contrib, 1, scale_->value().layout()));
  if (dx.layout() == x.layout()) return dx;
  return distribute_tensor(dx, x.layout());
}

}  // namespace meshlayout
