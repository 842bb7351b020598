// orthogonal.cc — see orthogonal.h.
//
// Keras (keras/src/initializers/random_initializers.py, OrthogonalInitializer): flat shape
// (max(rows, n), min(rows, n)), a = normal(0, 1); q, r = qr(a); q *= sign(diag(r)); transpose
// when rows < n; gain * q. Here the QR is classical Gram–Schmidt applied twice ("CGS2", as
// accurate as Householder for full-rank matrices), which gives R a positive diagonal directly,
// so no sign fix is needed; a column that vanishes (probability 0) would give a zero column.
#include "meshlayout/init/orthogonal.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <tuple>

#include "meshlayout/core/errors.h"
#include "meshlayout/init/float_convert.h"

namespace meshlayout::internal_init {
namespace {

struct CacheEntry {
  Initializer init;
  Shape shape;
  uint64_t key = 0;  // init_key: the variable and the seed in effect
  std::shared_ptr<const std::vector<double>> matrix;
};

std::mutex g_cache_mu;
CacheEntry g_cache;  // the last matrix: every shard of one variable reuses it

std::shared_ptr<const std::vector<double>> cached_matrix(const Initializer& init,
                                                         const Shape& shape, uint64_t variable_key,
                                                         uint64_t key) {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  if (g_cache.matrix && g_cache.init == init && g_cache.shape == shape && g_cache.key == key) {
    return g_cache.matrix;
  }
  auto m =
      std::make_shared<const std::vector<double>>(orthogonal_matrix(init, shape, variable_key));
  g_cache = {init, shape, key, m};
  return m;
}

}  // namespace

std::vector<double> orthogonal_matrix(const Initializer& init, const Shape& shape,
                                      uint64_t variable_key) {
  if (shape.size() < 2) {
    throw ValueError(
        fmt::format("The tensor to initialize must be at least two-dimensional. "
                    "Received: shape={} of rank {}.",
                    shape_to_string(shape), shape.size()));
  }
  const int64_t n = shape.back();
  const int64_t rows = num_elements(shape) / std::max<int64_t>(n, 1);
  const int64_t tall = std::max(rows, n), wide = std::min(rows, n);
  std::vector<double> out(static_cast<size_t>(rows * n));
  if (out.empty()) return out;
  // a (tall, wide), column j contiguous at a[j * tall]: drawn row-major (tall, wide) from the
  // variable's normal stream, then stored by column.
  std::vector<double> drawn(static_cast<size_t>(tall * wide));
  fill_box(Initializer::random_normal({.mean = 0.0, .stddev = 1.0, .seed = init.seed()}),
           {tall, wide}, Box{{0, 0}, {tall, wide}}, DType::kF64,
           reinterpret_cast<std::byte*>(drawn.data()), variable_key);
  std::vector<double> q(drawn.size());
  for (int64_t i = 0; i < tall; ++i) {
    for (int64_t j = 0; j < wide; ++j)
      q[static_cast<size_t>(j * tall + i)] = drawn[static_cast<size_t>(i * wide + j)];
  }
  for (int64_t j = 0; j < wide; ++j) {
    double* v = &q[static_cast<size_t>(j * tall)];
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t k = 0; k < j; ++k) {
        const double* u = &q[static_cast<size_t>(k * tall)];
        double dot = 0;
        for (int64_t i = 0; i < tall; ++i) dot += u[i] * v[i];
        for (int64_t i = 0; i < tall; ++i) v[i] -= dot * u[i];
      }
    }
    double norm = 0;
    for (int64_t i = 0; i < tall; ++i) norm += v[i] * v[i];
    norm = std::sqrt(norm);
    for (int64_t i = 0; i < tall; ++i) v[i] = norm > 0 ? v[i] / norm : 0.0;
  }
  // Q (tall, wide); the result is Q when rows >= n, else Q^T: element (r, c) of (rows, n).
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      const double value =
          rows >= n ? q[static_cast<size_t>(c * tall + r)] : q[static_cast<size_t>(r * tall + c)];
      out[static_cast<size_t>(r * n + c)] = init.gain() * value;
    }
  }
  return out;
}

void fill_orthogonal_box(const Initializer& init, const Shape& shape, const Box& box, DType dtype,
                         std::byte* out, uint64_t variable_key) {
  // The cache is keyed by the Philox key too: it changes with the global seed.
  const std::shared_ptr<const std::vector<double>> m =
      cached_matrix(init, shape, variable_key, init_key(init.seed(), variable_key));
  if (box.empty()) return;
  const size_t rank = shape.size();
  std::vector<int64_t> index(rank, 0);
  const int64_t count = box.num_elements();
  for (int64_t e = 0; e < count; ++e) {
    int64_t flat = 0;
    for (size_t d = 0; d < rank; ++d) flat = flat * shape[d] + box.offset[d] + index[d];
    const double v = (*m)[static_cast<size_t>(flat)];
    switch (dtype) {
      case DType::kF64:
        std::memcpy(out + e * 8, &v, 8);
        break;
      case DType::kF32: {
        const float f = static_cast<float>(v);
        std::memcpy(out + e * 4, &f, 4);
        break;
      }
      case DType::kBF16: {
        const uint16_t b = bf16_from_float(static_cast<float>(v));
        std::memcpy(out + e * 2, &b, 2);
        break;
      }
      case DType::kF16: {
        const uint16_t h = f16_from_float(static_cast<float>(v));
        std::memcpy(out + e * 2, &h, 2);
        break;
      }
      default:
        throw InternalError("orthogonal fill of a non-floating dtype");
    }
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < box.shape[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace meshlayout::internal_init
