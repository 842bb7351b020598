// cpu/losses.cc — the CPU implementation of kernels/losses.h, moved unchanged from
// train/losses.cc.
#include "meshlayout/kernels/losses.h"

namespace meshlayout {
namespace {

template <typename T>
const T* as(const Array::Shard& s) {
  return reinterpret_cast<const T*>(s.buffer.data());
}
template <typename T>
T* as(Array::Shard& s) {
  return reinterpret_cast<T*>(s.buffer.data());
}

double read(const Array::Shard& s, DType d, int64_t i) {
  return d == DType::kF32 ? static_cast<double>(as<float>(s)[i]) : as<double>(s)[i];
}

}  // namespace

void mse_sum_cpu(const MseSum& args) {
  const Array::Shard& ps = *args.pred;
  const Array::Shard& ts = *args.target;
  const int64_t n = ps.box.num_elements();
  double s = 0;
  for (int64_t k = 0; k < n; ++k) {
    const double d = read(ps, args.pred_dtype, k) - read(ts, args.target_dtype, k);
    s += d * d;
  }
  *args.sum = s;
}

void mse_gradient_cpu(const MseGradient& args) {
  Array::Shard& gs = *args.grad;
  const Array::Shard& ps = *args.pred;
  const Array::Shard& ts = *args.target;
  const double coef = args.coef;
  const int64_t m = gs.box.num_elements();
  for (int64_t k = 0; k < m; ++k) {
    const double v = coef * (read(ps, args.pred_dtype, k) - read(ts, args.target_dtype, k));
    if (args.grad_dtype == DType::kF32) {
      as<float>(gs)[k] = static_cast<float>(v);
    } else {
      as<double>(gs)[k] = v;
    }
  }
}

void mse_row_means_cpu(const MseRowMeans& args) {
  Array::Shard& os = *args.out;
  const Array::Shard& ps = *args.pred;
  const Array::Shard& ts = *args.target;
  const int64_t last = args.last;
  const int64_t rows = os.box.num_elements();
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t j = 0; j < last; ++j) {
      const double d =
          read(ps, args.pred_dtype, r * last + j) - read(ts, args.target_dtype, r * last + j);
      s += d * d;
    }
    const double v = s / static_cast<double>(last);  // NaN for an empty last dim, as Keras' mean
    if (args.out_dtype == DType::kF32) {
      as<float>(os)[r] = static_cast<float>(v);
    } else {
      as<double>(os)[r] = v;
    }
  }
}

}  // namespace meshlayout
