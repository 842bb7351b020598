// cpu/activation.cc — the CPU implementation of kernels/activation.h.
#include "meshlayout/kernels/activation.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace meshlayout {
namespace {

// E: float (F32, as before F64 existed) or double (F64).
template <typename E>
void activate_in_place(ActivationFunction activation, int64_t row, Array::Shard& s) {
  E* p = reinterpret_cast<E*>(s.buffer.data());
  const int64_t n = s.box.num_elements();
  switch (activation) {
    case ActivationFunction::kRelu:
      for (int64_t k = 0; k < n; ++k) p[k] = p[k] > 0 ? p[k] : E(0);
      break;
    case ActivationFunction::kTanh:
      for (int64_t k = 0; k < n; ++k) p[k] = std::tanh(p[k]);
      break;
    case ActivationFunction::kGelu:  // exact GELU, as keras.activations.gelu(approximate=False)
      for (int64_t k = 0; k < n; ++k) {
        p[k] = static_cast<E>(0.5 * p[k] * (1.0 + std::erf(p[k] / std::sqrt(2.0))));
      }
      break;
    case ActivationFunction::kSoftmax:
      for (int64_t r = 0; row > 0 && r < n / row; ++r) {
        E* v = p + r * row;
        E m = v[0];
        for (int64_t k = 1; k < row; ++k) m = std::max(m, v[k]);
        double sum = 0;
        for (int64_t k = 0; k < row; ++k) sum += (v[k] = std::exp(v[k] - m));
        for (int64_t k = 0; k < row; ++k) v[k] = static_cast<E>(v[k] / sum);
      }
      break;
    case ActivationFunction::kSilu:  // x · sigmoid(x) in E (float, as keras-hub runs it in fp32)
      for (int64_t k = 0; k < n; ++k) p[k] = p[k] / (E(1) + std::exp(-p[k]));
      break;
    case ActivationFunction::kLinear:
      break;
  }
}

// dz = dy · f'(z) in place in `s` (holding dy), `zs` the same box of z; softmax rows whole. E:
// float (F32) or double (F64), the element type of z and g; the derivatives in double either way.
template <typename E>
void activation_backward_in_place(ActivationFunction activation, int64_t row, Array::Shard& s,
                                  const Array::Shard& zs) {
  E* d = reinterpret_cast<E*>(s.buffer.data());
  const E* v = reinterpret_cast<const E*>(zs.buffer.data());
  const int64_t n = s.box.num_elements();
  switch (activation) {
    case ActivationFunction::kRelu:
      for (int64_t k = 0; k < n; ++k) d[k] = v[k] > 0 ? d[k] : E(0);
      break;
    case ActivationFunction::kTanh:
      for (int64_t k = 0; k < n; ++k) {
        const double t = std::tanh(static_cast<double>(v[k]));
        d[k] = static_cast<E>(d[k] * (1.0 - t * t));
      }
      break;
    case ActivationFunction::kGelu:  // exact GELU: Φ(z) + z·φ(z)
      for (int64_t k = 0; k < n; ++k) {
        const double x = v[k];
        const double cdf = 0.5 * (1.0 + std::erf(x / std::numbers::sqrt2));
        const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
        d[k] = static_cast<E>(d[k] * (cdf + x * pdf));
      }
      break;
    case ActivationFunction::kSilu:
      for (int64_t k = 0; k < n; ++k) {
        const double x = v[k], sig = 1.0 / (1.0 + std::exp(-x));
        d[k] = static_cast<E>(d[k] * sig * (1.0 + x * (1.0 - sig)));
      }
      break;
    case ActivationFunction::kSoftmax:
      for (int64_t r = 0; row > 0 && r < n / row; ++r) {
        const E* zr = v + r * row;
        E* dr = d + r * row;
        double m = zr[0];
        for (int64_t k = 1; k < row; ++k) m = std::max(m, static_cast<double>(zr[k]));
        double sum = 0;
        for (int64_t k = 0; k < row; ++k) sum += std::exp(zr[k] - m);
        double dot = 0;  // Σ dy·y
        for (int64_t k = 0; k < row; ++k) dot += dr[k] * (std::exp(zr[k] - m) / sum);
        for (int64_t k = 0; k < row; ++k) {
          dr[k] = static_cast<E>(std::exp(zr[k] - m) / sum * (dr[k] - dot));
        }
      }
      break;
    case ActivationFunction::kLinear:
      break;
  }
}

}  // namespace

void activation_forward_cpu(const ActivationForward& args) {
  if (args.dtype == DType::kF32) {
    activate_in_place<float>(args.function, args.row, *args.y);
  } else {
    activate_in_place<double>(args.function, args.row, *args.y);
  }
}

void activation_backward_cpu(const ActivationBackward& args) {
  if (args.dtype == DType::kF32) {
    activation_backward_in_place<float>(args.function, args.row, *args.g, *args.z);
  } else {
    activation_backward_in_place<double>(args.function, args.row, *args.g, *args.z);
  }
}

}  // namespace meshlayout
