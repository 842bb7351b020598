// transformer_reference.h — float64 references written from the formulas for the transformer
// tests (test-only): row-major matmul, rotate-half RoPE and causal grouped-query attention.
//
// Example:
//   Vec q = ref_matmul(x, wq, B * T, d, H * D);
//   ref_rope(q, B, T, H, D, /*start=*/0, 10000.0);
//   Vec o = ref_causal_attention(q, k, v, B, T, H, Hkv, D);   // (B, T, H, D)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace meshlayout::testing {

using Vec = std::vector<double>;

/// (rows, k) · (k, n), row-major.
inline Vec ref_matmul(const Vec& a, const Vec& b, int64_t rows, int64_t k, int64_t n) {
  Vec out(static_cast<size_t>(rows * n), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      const double x = a[static_cast<size_t>(r * k + i)];
      const double* brow = b.data() + i * n;
      double* orow = out.data() + r * n;
      for (int64_t c = 0; c < n; ++c) orow[c] += x * brow[c];
    }
  }
  return out;
}

/// x (B, T, H, D) rotated in place at positions start + t (HF rotate_half).
inline void ref_rope(Vec& x, int64_t B, int64_t T, int64_t H, int64_t D, int64_t start, double theta) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        double* v = x.data() + ((b * T + t) * H + h) * D;
        for (int64_t i = 0; i < D / 2; ++i) {
          const double a = static_cast<double>(start + t) *
                           std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
          const double x1 = v[i], x2 = v[i + D / 2];
          v[i] = x1 * std::cos(a) - x2 * std::sin(a);
          v[i + D / 2] = x2 * std::cos(a) + x1 * std::sin(a);
        }
      }
    }
  }
}

/// Causal softmax(q kᵀ / sqrt(D)) v: q (B, T, H, D), k and v (B, T, Hkv, D), query head h using
/// key/value head h / (H / Hkv). Returns (B, T, H, D).
inline Vec ref_causal_attention(const Vec& q, const Vec& k, const Vec& v, int64_t B, int64_t T,
                                int64_t H, int64_t Hkv, int64_t D) {
  Vec o(static_cast<size_t>(B * T * H * D), 0.0);
  const auto at = [](int64_t b, int64_t t, int64_t heads, int64_t h, int64_t T_, int64_t D_) {
    return static_cast<size_t>(((b * T_ + t) * heads + h) * D_);
  };
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t j = h / (H / Hkv);
      for (int64_t t = 0; t < T; ++t) {
        Vec w(static_cast<size_t>(t + 1));
        double mx = -INFINITY, sum = 0;
        for (int64_t s = 0; s <= t; ++s) {
          double dot = 0;
          for (int64_t e = 0; e < D; ++e) dot += q[at(b, t, H, h, T, D) + e] * k[at(b, s, Hkv, j, T, D) + e];
          mx = std::max(mx, w[static_cast<size_t>(s)] = dot / std::sqrt(static_cast<double>(D)));
        }
        for (double& e : w) sum += (e = std::exp(e - mx));
        for (int64_t s = 0; s <= t; ++s) {
          for (int64_t e = 0; e < D; ++e) {
            o[at(b, t, H, h, T, D) + e] += w[static_cast<size_t>(s)] / sum * v[at(b, s, Hkv, j, T, D) + e];
          }
        }
      }
    }
  }
  return o;
}

}  // namespace meshlayout::testing
