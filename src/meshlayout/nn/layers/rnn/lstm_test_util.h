// lstm_test_util.h — a float64 LSTM reference (Keras' equations, gates i, f, c, o) for the
// in-process and mpirun LSTM tests (test-only).
#pragma once

#include <cmath>
#include <vector>

#include "meshlayout/array/host_tensor.h"

namespace meshlayout::testing {

inline double as_double(const HostTensor& t, int64_t i) {
  return t.dtype() == DType::kF32 ? double{t.data_as<float>()[i]} : t.data_as<double>()[i];
}

/// x (batch, steps, features), kernel (features, 4u), recurrent (u, 4u), bias (4u) or empty →
/// (batch, steps, u) when `sequences`, else (batch, u), row-major.
inline std::vector<double> lstm_reference(const HostTensor& x, const HostTensor& kernel,
                                          const HostTensor& recurrent, const HostTensor* bias,
                                          bool sequences) {
  const int64_t batch = x.shape()[0], steps = x.shape()[1], features = x.shape()[2];
  const int64_t u = recurrent.shape()[0], g = 4 * u;
  std::vector<double> out;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> h(static_cast<size_t>(u), 0.0), c(h);
    for (int64_t t = 0; t < steps; ++t) {
      std::vector<double> z(static_cast<size_t>(g), 0.0);
      for (int64_t k = 0; k < g; ++k) {
        double s = bias ? as_double(*bias, k) : 0.0;
        for (int64_t f = 0; f < features; ++f)
          s += as_double(x, (b * steps + t) * features + f) * as_double(kernel, f * g + k);
        for (int64_t j = 0; j < u; ++j)
          s += h[static_cast<size_t>(j)] * as_double(recurrent, j * g + k);
        z[static_cast<size_t>(k)] = s;
      }
      auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
      for (int64_t j = 0; j < u; ++j) {
        const size_t J = static_cast<size_t>(j), U = static_cast<size_t>(u);
        c[J] = sig(z[U + J]) * c[J] + sig(z[J]) * std::tanh(z[2 * U + J]);
        h[J] = sig(z[3 * U + J]) * std::tanh(c[J]);
      }
      if (sequences) out.insert(out.end(), h.begin(), h.end());
    }
    if (!sequences) out.insert(out.end(), h.begin(), h.end());
  }
  return out;
}

}  // namespace meshlayout::testing
