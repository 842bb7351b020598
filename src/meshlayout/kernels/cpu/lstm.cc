// cpu/lstm.cc — the CPU implementation of kernels/lstm.h.
#include "meshlayout/kernels/lstm.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "meshlayout/kernels/cpu/blas.h"

namespace meshlayout {
namespace {

template <typename T>
T sigmoid(T v) {
  return T(1) / (T(1) + std::exp(-v));
}

/// One device's rows: x (rows, steps, features) → out (rows, steps, u) or (rows, u).
template <typename T>
void run_rows(const T* x, int64_t rows, int64_t steps, int64_t features, const T* kernel,
              const T* recurrent, const T* bias, int64_t u, bool sequences, T* out) {
  const int64_t g = 4 * u;
  std::vector<T> xz(static_cast<size_t>(rows * steps * g));
  cpu_kernels::gemm<T>(rows * steps, g, features, x, features, kernel, g, xz.data(), g);
  std::vector<T> h(static_cast<size_t>(rows * u), T(0)), c(h.size(), T(0));
  std::vector<T> hz(static_cast<size_t>(rows * g));
  for (int64_t t = 0; t < steps; ++t) {
    cpu_kernels::gemm<T>(rows, g, u, h.data(), u, recurrent, g, hz.data(), g);
    for (int64_t r = 0; r < rows; ++r) {
      const T* zx = &xz[static_cast<size_t>((r * steps + t) * g)];
      const T* zh = &hz[static_cast<size_t>(r * g)];
      for (int64_t j = 0; j < u; ++j) {
        auto z = [&](int64_t gate) {
          const int64_t k = gate * u + j;
          return zx[k] + zh[k] + (bias ? bias[k] : T(0));
        };
        const T i = sigmoid(z(0)), f = sigmoid(z(1)), cand = std::tanh(z(2)), o = sigmoid(z(3));
        T& cell = c[static_cast<size_t>(r * u + j)];
        cell = f * cell + i * cand;
        h[static_cast<size_t>(r * u + j)] = o * std::tanh(cell);
      }
      if (sequences) {
        std::memcpy(out + (r * steps + t) * u, &h[static_cast<size_t>(r * u)],
                    sizeof(T) * static_cast<size_t>(u));
      }
    }
  }
  if (!sequences) std::memcpy(out, h.data(), sizeof(T) * h.size());
}

}  // namespace

void lstm_forward_cpu(const LstmForward& args) {
  Array::Shard& o = *args.out;
  const int64_t rows = o.box.shape[0], u = args.units;
  if (rows == 0 || u == 0) return;
  cpu_kernels::use_single_threaded_blas();
  const auto ptr = [](const Array::Shard* s) { return s->buffer.data(); };
  if (args.dtype == DType::kF32) {
    run_rows<float>(reinterpret_cast<const float*>(ptr(args.x)), rows, args.steps, args.features,
                    reinterpret_cast<const float*>(ptr(args.kernel)),
                    reinterpret_cast<const float*>(ptr(args.recurrent)),
                    args.bias ? reinterpret_cast<const float*>(ptr(args.bias)) : nullptr, u,
                    args.return_sequences, reinterpret_cast<float*>(o.buffer.data()));
  } else {
    run_rows<double>(reinterpret_cast<const double*>(ptr(args.x)), rows, args.steps, args.features,
                     reinterpret_cast<const double*>(ptr(args.kernel)),
                     reinterpret_cast<const double*>(ptr(args.recurrent)),
                     args.bias ? reinterpret_cast<const double*>(ptr(args.bias)) : nullptr, u,
                     args.return_sequences, reinterpret_cast<double*>(o.buffer.data()));
  }
}

}  // namespace meshlayout
