// cpu/normalization.cc — the CPU implementation of kernels/normalization.h: the loops of
// nn/layers/normalization/{layer,rms,batch}_normalization.cc, moved unchanged (the same
// operations in the same order and types), their common arithmetic shared below.
#include "meshlayout/kernels/normalization.h"

#include <cmath>

#include "meshlayout/kernels/cpu/float_dispatch.h"

namespace meshlayout {
namespace {

template <typename E>
E* elements(Array::Shard* s) {
  return reinterpret_cast<E*>(s->buffer.data());
}
template <typename E>
const E* elements(const Array::Shard* s) {
  return s ? reinterpret_cast<const E*>(s->buffer.data()) : nullptr;
}

// ---- The arithmetic the layers share ----

// 1/sqrt(variance + epsilon): Layer's row variance, RMS's row mean square, Batch's variance.
inline double inverse_std(double variance, double epsilon) {
  return 1.0 / std::sqrt(variance + epsilon);
}

// x̂ = (x - mean)·r (Layer and Batch).
inline double normalized(double x, double mean, double inv) { return (x - mean) * inv; }

// out [·g[k]] [+ b[k]], rounded to E (the calls of Layer and Batch).
template <typename E>
E scale_shift(double out, const E* g, const E* b, int64_t k) {
  if (g) out *= g[k];
  if (b) out += b[k];
  return static_cast<E>(out);
}

// A row's mean and 1/sqrt(var + epsilon), the biased variance in a second pass (Layer's call
// and backward).
struct RowMoments {
  double mean, inv;
};
template <typename E>
RowMoments row_moments(const E* v, int64_t row, double epsilon) {
  double mean = 0;
  for (int64_t k = 0; k < row; ++k) mean += v[k];
  mean /= static_cast<double>(row);
  double var = 0;
  for (int64_t k = 0; k < row; ++k) var += (v[k] - mean) * (v[k] - mean);
  var /= static_cast<double>(row);
  return {mean, inverse_std(var, epsilon)};
}

// Calls f(o) with the offset o of each whole row of `row` elements in the box (none when the
// row or the box is empty).
template <typename F>
void for_each_row(const Box& box, int64_t row, F&& f) {
  if (row == 0 || box.num_elements() == 0) return;
  const int64_t rows = box.num_elements() / row;
  for (int64_t r = 0; r < rows; ++r) f(r * row);
}

// Calls f(k, c) for each element k of the box (row-major) with c its feature (its index in the
// last dimension).
template <typename F>
void for_each_feature(const Box& box, F&& f) {
  const int64_t cols = box.shape.empty() ? 0 : box.shape.back();
  if (cols == 0 || box.num_elements() == 0) return;
  for (int64_t r = 0; r < box.num_elements() / cols; ++r) {
    for (int64_t c = 0; c < cols; ++c) f(r * cols + c, c);
  }
}

}  // namespace

// ---- LayerNormalization ----

void layer_norm_forward_cpu(const LayerNormForward& args) {
  const int64_t row = args.features;
  const double epsilon = args.epsilon;
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    E* p = elements<E>(args.y);
    const E* g = elements<E>(args.gamma);
    const E* b = elements<E>(args.beta);
    for_each_row(args.y->box, row, [&](int64_t o) {
      E* v = p + o;
      const RowMoments m = row_moments(v, row, epsilon);
      for (int64_t k = 0; k < row; ++k)
        v[k] = scale_shift(normalized(v[k], m.mean, m.inv), g, b, k);
    });
  });
}

void layer_norm_backward_cpu(const LayerNormBackward& args) {
  const int64_t row = args.features;
  const double epsilon = args.epsilon;
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    E* out = elements<E>(args.dx);
    E* c = args.xhat_dy ? elements<E>(args.xhat_dy) : nullptr;
    const E* v = elements<E>(args.x);
    const E* d = elements<E>(args.dy);
    const E* g = elements<E>(args.gamma);
    for_each_row(args.dx->box, row, [&](int64_t o) {
      const RowMoments m = row_moments(v + o, row, epsilon);
      const double mean = m.mean, inv = m.inv;
      double mean_d = 0, mean_dx = 0;  // mean(d), mean(d·x̂), d = dy·gamma
      for (int64_t k = 0; k < row; ++k) {
        const double dk = g ? static_cast<double>(d[o + k]) * g[k] : d[o + k];
        mean_d += dk;
        mean_dx += dk * (v[o + k] - mean) * inv;
      }
      mean_d /= static_cast<double>(row);
      mean_dx /= static_cast<double>(row);
      for (int64_t k = 0; k < row; ++k) {
        const double xhat = normalized(v[o + k], mean, inv);
        const double dk = g ? static_cast<double>(d[o + k]) * g[k] : d[o + k];
        out[o + k] = static_cast<E>(inv * (dk - mean_d - xhat * mean_dx));
        if (c) c[o + k] = static_cast<E>(d[o + k] * xhat);
      }
    });
  });
}

// ---- RMSNormalization ----

void rms_norm_forward_cpu(const RmsNormForward& args) {
  const int64_t row = args.features;
  const double epsilon = args.epsilon;
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    E* p = elements<E>(args.y);
    const E* in = elements<E>(args.x);
    const E* g = elements<E>(args.scale);
    for_each_row(args.y->box, row, [&](int64_t o) {
      const E* v = in + o;
      E* out = p + o;
      // Eight E lanes (vectorised), summed in double: F32 within float rounding of a double sum.
      E lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t k = 0;
      for (; k + 8 <= row; k += 8) {
        for (int j = 0; j < 8; ++j) lanes[j] += v[k + j] * v[k + j];
      }
      double squares = 0;
      for (; k < row; ++k) squares += static_cast<double>(v[k]) * v[k];
      for (E lane : lanes) squares += lane;
      const E inv = static_cast<E>(inverse_std(squares / static_cast<double>(row), epsilon));
      for (k = 0; k < row; ++k) out[k] = v[k] * inv * g[k];
    });
  });
}

void rms_norm_backward_cpu(const RmsNormBackward& args) {
  const int64_t row = args.features;
  const double epsilon = args.epsilon;
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    E* out = elements<E>(args.dx);
    E* c = args.contrib ? elements<E>(args.contrib) : nullptr;
    const E* in = elements<E>(args.x);
    const E* d = elements<E>(args.dy);
    const E* g = elements<E>(args.scale);
    for_each_row(args.dx->box, row, [&](int64_t o) {
      double squares = 0, dot = 0;  // Σ x², Σ g·dy·x
      for (int64_t k = 0; k < row; ++k) {
        squares += static_cast<double>(in[o + k]) * in[o + k];
        dot += static_cast<double>(g[k]) * d[o + k] * in[o + k];
      }
      const double inv = inverse_std(squares / static_cast<double>(row), epsilon);
      const double coef = inv * inv * inv * dot / static_cast<double>(row);
      for (int64_t k = 0; k < row; ++k) {
        out[o + k] = static_cast<E>(inv * g[k] * d[o + k] - coef * in[o + k]);
        if (c) c[o + k] = static_cast<E>(static_cast<double>(d[o + k]) * in[o + k] * inv);
      }
    });
  });
}

// ---- BatchNormalization ----

void scale_elements_cpu(const ScaleElements& args) {
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    const E factor = static_cast<E>(args.factor);
    E* p = elements<E>(args.a);
    for (int64_t k = 0; k < args.a->box.num_elements(); ++k) p[k] *= factor;
  });
}

void squared_deviations_cpu(const SquaredDeviations& args) {
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    const E* v = elements<E>(args.x);
    const E* m = elements<E>(args.mean);
    E* p = elements<E>(args.squares);
    for_each_feature(args.squares->box, [&](int64_t k, int64_t c) {
      const double d = static_cast<double>(v[k]) - m[c];
      p[k] = static_cast<E>(d * d);
    });
  });
}

void moving_average_update_cpu(const MovingAverageUpdate& args) {
  const double momentum = args.momentum;
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    E* p = elements<E>(args.moving);
    const E* b = elements<E>(args.batch);
    for (int64_t k = 0; k < args.moving->box.num_elements(); ++k) {
      p[k] = static_cast<E>(p[k] * momentum + b[k] * (1.0 - momentum));
    }
  });
}

void batch_norm_forward_cpu(const BatchNormForward& args) {
  const double epsilon = args.epsilon;
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    const E* g = elements<E>(args.gamma);
    const E* b = elements<E>(args.beta);
    const E* m = elements<E>(args.mean);
    const E* v = elements<E>(args.variance);
    E* p = elements<E>(args.y);
    for_each_feature(args.y->box, [&](int64_t k, int64_t c) {
      const double out =
          (p[k] - static_cast<double>(m[c])) / std::sqrt(static_cast<double>(v[c]) + epsilon);
      p[k] = scale_shift(out, g, b, c);
    });
  });
}

void batch_norm_xhat_dy_cpu(const BatchNormXhatDy& args) {
  const double epsilon = args.epsilon;
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    const E *v = elements<E>(args.x), *dv = elements<E>(args.dy), *m = elements<E>(args.mean),
            *var = elements<E>(args.variance);
    E* p = elements<E>(args.xhat_dy);
    for_each_feature(args.xhat_dy->box, [&](int64_t k, int64_t c) {
      p[k] = static_cast<E>(dv[k] * normalized(v[k], m[c], inverse_std(var[c], epsilon)));
    });
  });
}

void batch_norm_backward_cpu(const BatchNormBackward& args) {
  const double epsilon = args.epsilon;
  const int64_t n = args.count;
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    const E *v = elements<E>(args.x), *dv = elements<E>(args.dy), *m = elements<E>(args.mean),
            *var = elements<E>(args.variance);
    const E* g = elements<E>(args.gamma);
    const E* sd = elements<E>(args.sum_dy);
    const E* sx = elements<E>(args.sum_xhat_dy);
    const bool training = sd != nullptr;
    E* p = elements<E>(args.dx);
    for_each_feature(args.dx->box, [&](int64_t k, int64_t c) {
      const double inv = inverse_std(var[c], epsilon), scale = g ? g[c] * inv : inv;
      double out = dv[k];
      if (training) {
        const double xhat = normalized(v[k], m[c], inv);
        out -= (sd[c] + xhat * sx[c]) / static_cast<double>(n);
      }
      p[k] = static_cast<E>(scale * out);
    });
  });
}

}  // namespace meshlayout
