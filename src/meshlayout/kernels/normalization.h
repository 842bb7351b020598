// normalization.h — the per-shard kernels of the normalisation layers
// (nn/layers/normalization/): LayerNormalization and RMSNormalization normalise whole rows of the
// last dimension (the row statistics computed on the shard), BatchNormalization normalises per
// feature with statistics it sums across the global batch (sum_over_leading) and hands in.
//
// One family, one CPU file (cpu/normalization.cc): where the three compute the same thing with
// the same arithmetic they share it there — 1/sqrt(variance + epsilon) (Layer's row variance,
// RMS's row mean square, Batch's per-feature variance in its backward), the row mean and
// variance (LayerNormalization's call and backward), x̂ = (x - mean)·r (Layer and Batch), the
// scale and shift x̂·gamma + beta (Layer and Batch calls). Where the arithmetic differs the ops
// differ: RMS's call sums squares in eight E lanes, its backward in double; Batch's call divides
// by sqrt(variance + epsilon) where Layer multiplies by its inverse. Every loop is the one the
// layer ran before (same operation order and types: the same bits).
//
// Dtypes: F32 or F64 (E = float or double), every shard of one call of that dtype; statistics
// and coefficients in double unless said otherwise. Rows (Layer, RMS): a shard's box holds whole
// rows of `features` elements; features (per-feature ops): the box's last dimension, the
// per-feature shards (gamma, beta, mean, …) holding that dimension's slice.
//
// Example (per local shard s of y, in nn/layers/normalization/layer_normalization.cc):
//   layer_norm_forward(kind, {.y = &s, .gamma = gamma->shard_at(s.position), .beta = nullptr,
//                             .features = d, .epsilon = 1e-6, .dtype = y.dtype()});
#pragma once

#include <cstdint>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

// ---- Rows: LayerNormalization ----

/// y = (x - mean)·r [·gamma] [+ beta] per row, r = 1/sqrt(var + epsilon) (biased variance).
struct LayerNormForward {
  Array::Shard* y;            // holds x on entry, the result on return
  const Array::Shard* gamma;  // null, or gamma whole (features,)
  const Array::Shard* beta;   // null, or beta whole (features,)
  int64_t features;
  double epsilon;
  DType dtype;
};

/// dx = r·(d - mean(d) - x̂·mean(d·x̂)) per row, d = dy [·gamma]; xhat_dy = dy·x̂ (gamma's
/// gradient before the sum over rows).
struct LayerNormBackward {
  Array::Shard* dx;       // written
  Array::Shard* xhat_dy;  // null, or written
  const Array::Shard* x;
  const Array::Shard* dy;
  const Array::Shard* gamma;  // null, or gamma whole
  int64_t features;
  double epsilon;
  DType dtype;
};

// ---- Rows: RMSNormalization ----

/// y = x · E(rsqrt(mean(x²) + epsilon)) · scale per row, the squares summed in eight E lanes
/// added in double, the product in E.
struct RmsNormForward {
  Array::Shard* y;  // written (y may be x's shard)
  const Array::Shard* x;
  const Array::Shard* scale;  // scale whole (features,)
  int64_t features;
  double epsilon;
  DType dtype;
};

/// dx = r·scale·dy - x·r³·Σ(scale·dy·x)/n per row (r = rsqrt(mean(x²) + epsilon), sums in
/// double); contrib = dy·x·r (the scale's gradient before the sum over rows).
struct RmsNormBackward {
  Array::Shard* dx;       // written
  Array::Shard* contrib;  // null, or written
  const Array::Shard* x;
  const Array::Shard* dy;
  const Array::Shard* scale;
  int64_t features;
  double epsilon;
  DType dtype;
};

// ---- Features: BatchNormalization ----

/// a *= E(factor), element by element in E (a sum into a mean).
struct ScaleElements {
  Array::Shard* a;
  double factor;
  DType dtype;
};

/// squares = (x - mean)² per element (in double, rounded to E), mean per feature.
struct SquaredDeviations {
  Array::Shard* squares;  // written, x's box
  const Array::Shard* x;
  const Array::Shard* mean;
  DType dtype;
};

/// moving = moving·momentum + batch·(1 - momentum) (Keras' moving statistics), in double.
struct MovingAverageUpdate {
  Array::Shard* moving;
  const Array::Shard* batch;
  double momentum;
  DType dtype;
};

/// y = (x - mean)/sqrt(variance + epsilon) [·gamma] [+ beta] per feature.
struct BatchNormForward {
  Array::Shard* y;            // holds x on entry, the result on return
  const Array::Shard* gamma;  // null, or the features' slice
  const Array::Shard* beta;   // null, or the features' slice
  const Array::Shard* mean;
  const Array::Shard* variance;
  double epsilon;
  DType dtype;
};

/// xhat_dy = dy·x̂, x̂ = (x - mean)·r, r = 1/sqrt(variance + epsilon).
struct BatchNormXhatDy {
  Array::Shard* xhat_dy;  // written
  const Array::Shard* x;
  const Array::Shard* dy;
  const Array::Shard* mean;
  const Array::Shard* variance;
  double epsilon;
  DType dtype;
};

/// dx = gamma·r·(dy - (Σdy + x̂·Σ(dy·x̂))/count) with the batch sums (training), gamma·r·dy
/// without them (inference: sum_dy and sum_xhat_dy null).
struct BatchNormBackward {
  Array::Shard* dx;  // written
  const Array::Shard* x;
  const Array::Shard* dy;
  const Array::Shard* mean;
  const Array::Shard* variance;
  const Array::Shard* gamma;        // null, or the features' slice
  const Array::Shard* sum_dy;       // null (inference), or Σdy per feature
  const Array::Shard* sum_xhat_dy;  // null (inference), or Σ(dy·x̂) per feature
  int64_t count;                    // N, the global count per feature
  double epsilon;
  DType dtype;
};

void layer_norm_forward_cpu(const LayerNormForward& args);
void layer_norm_backward_cpu(const LayerNormBackward& args);
void rms_norm_forward_cpu(const RmsNormForward& args);
void rms_norm_backward_cpu(const RmsNormBackward& args);
void scale_elements_cpu(const ScaleElements& args);
void squared_deviations_cpu(const SquaredDeviations& args);
void moving_average_update_cpu(const MovingAverageUpdate& args);
void batch_norm_forward_cpu(const BatchNormForward& args);
void batch_norm_xhat_dy_cpu(const BatchNormXhatDy& args);
void batch_norm_backward_cpu(const BatchNormBackward& args);

inline KernelOp<void(const LayerNormForward&)> layer_norm_forward{"layer_norm_forward",
                                                                  &layer_norm_forward_cpu};
inline KernelOp<void(const LayerNormBackward&)> layer_norm_backward{"layer_norm_backward",
                                                                    &layer_norm_backward_cpu};
inline KernelOp<void(const RmsNormForward&)> rms_norm_forward{"rms_norm_forward",
                                                              &rms_norm_forward_cpu};
inline KernelOp<void(const RmsNormBackward&)> rms_norm_backward{"rms_norm_backward",
                                                                &rms_norm_backward_cpu};
inline KernelOp<void(const ScaleElements&)> scale_elements{"scale_elements", &scale_elements_cpu};
inline KernelOp<void(const SquaredDeviations&)> squared_deviations{"squared_deviations",
                                                                   &squared_deviations_cpu};
inline KernelOp<void(const MovingAverageUpdate&)> moving_average_update{"moving_average_update",
                                                                        &moving_average_update_cpu};
inline KernelOp<void(const BatchNormForward&)> batch_norm_forward{"batch_norm_forward",
                                                                  &batch_norm_forward_cpu};
inline KernelOp<void(const BatchNormXhatDy&)> batch_norm_xhat_dy{"batch_norm_xhat_dy",
                                                                 &batch_norm_xhat_dy_cpu};
inline KernelOp<void(const BatchNormBackward&)> batch_norm_backward{"batch_norm_backward",
                                                                    &batch_norm_backward_cpu};

}  // namespace meshlayout
