// transformer_reference.h — float64 references written from the formulas for the transformer
// tests (test-only): row-major matmul, rotate-half RoPE and causal grouped-query attention, and
// the backward of each (transpose, RoPE's inverse rotation, attention's dq, dk, dv).
//
// Example:
//   Vec q = ref_matmul(x, wq, B * T, d, H * D);
//   ref_rope(q, B, T, H, D, /*start=*/0, 10000.0);
//   Vec o = ref_causal_attention(q, k, v, B, T, H, Hkv, D);   // (B, T, H, D)
//   AttentionGrads g = ref_causal_attention_backward(q, k, v, d_o, B, T, H, Hkv, D);
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
/// Llama 3's rope_scaling in the reference's words (Hugging Face _compute_llama3_parameters).
struct RefLlama3Scaling {
  double factor = 8, low_freq_factor = 1, high_freq_factor = 4, original_max_positions = 8192;
};

/// The D/2 rotary inverse frequencies theta^(−2i/D), rescaled by `scaling` when given: a
/// wavelength 2π/f above original/low_freq_factor divides f by the factor, one below
/// original/high_freq_factor keeps it, the others blend the two.
inline Vec ref_inverse_frequencies(int64_t D, double theta,
                                   const RefLlama3Scaling* scaling = nullptr) {
  Vec f(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) {
    double inv = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(D));
    if (scaling != nullptr) {
      const RefLlama3Scaling& s = *scaling;
      const double wavelength = 2.0 * 3.14159265358979323846 / inv;
      if (wavelength > s.original_max_positions / s.low_freq_factor) {
        inv = inv / s.factor;
      } else if (wavelength >= s.original_max_positions / s.high_freq_factor) {
        const double smooth = (s.original_max_positions / wavelength - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        inv = (1 - smooth) * inv / s.factor + smooth * inv;
      }
    }
    f[static_cast<size_t>(i)] = inv;
  }
  return f;
}

/// Rotate-half RoPE of x (B, T, H, D) at positions start + t with the given inverse frequencies.
inline void ref_rope_frequencies(Vec& x, int64_t B, int64_t T, int64_t H, int64_t D, int64_t start,
                                 const Vec& inverse_frequencies) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        double* v = x.data() + ((b * T + t) * H + h) * D;
        for (int64_t i = 0; i < D / 2; ++i) {
          const double a =
              static_cast<double>(start + t) * inverse_frequencies[static_cast<size_t>(i)];
          const double x1 = v[i], x2 = v[i + D / 2];
          v[i] = x1 * std::cos(a) - x2 * std::sin(a);
          v[i + D / 2] = x2 * std::cos(a) + x1 * std::sin(a);
        }
      }
    }
  }
}

/// RMS normalisation of every run of D values of x (each head of each position: Qwen 3's
/// q_norm/k_norm), times scale (D,): v · (mean(v²) + eps)^(−1/2) · scale.
inline void ref_rms_norm_rows(Vec& x, int64_t D, const Vec& scale, double eps) {
  for (size_t r = 0; r + static_cast<size_t>(D) <= x.size(); r += static_cast<size_t>(D)) {
    double sq = 0;
    for (int64_t i = 0; i < D; ++i)
      sq += x[r + static_cast<size_t>(i)] * x[r + static_cast<size_t>(i)];
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(D) + eps);
    for (int64_t i = 0; i < D; ++i)
      x[r + static_cast<size_t>(i)] *= inv * scale[static_cast<size_t>(i)];
  }
}

inline void ref_rope(Vec& x, int64_t B, int64_t T, int64_t H, int64_t D, int64_t start,
                     double theta) {
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
          for (int64_t e = 0; e < D; ++e)
            dot += q[at(b, t, H, h, T, D) + e] * k[at(b, s, Hkv, j, T, D) + e];
          mx = std::max(mx, w[static_cast<size_t>(s)] = dot / std::sqrt(static_cast<double>(D)));
        }
        for (double& e : w) sum += (e = std::exp(e - mx));
        for (int64_t s = 0; s <= t; ++s) {
          for (int64_t e = 0; e < D; ++e) {
            o[at(b, t, H, h, T, D) + e] +=
                w[static_cast<size_t>(s)] / sum * v[at(b, s, Hkv, j, T, D) + e];
          }
        }
      }
    }
  }
  return o;
}

/// The (cols, rows) transpose of a row-major (rows, cols) matrix: with ref_matmul, the matmul
/// backward (dW = xᵀ·dy, dx = dy·Wᵀ).
inline Vec ref_transpose(const Vec& a, int64_t rows, int64_t cols) {
  Vec out(a.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      out[static_cast<size_t>(c * rows + r)] = a[static_cast<size_t>(r * cols + c)];
  }
  return out;
}

/// The backward of ref_rope, in place: dy (B, T, H, D) → dx, each pair rotated by the opposite
/// angle (the rotation's transpose).
inline void ref_rope_backward(Vec& dy, int64_t B, int64_t T, int64_t H, int64_t D, int64_t start,
                              double theta) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        double* v = dy.data() + ((b * T + t) * H + h) * D;
        for (int64_t i = 0; i < D / 2; ++i) {
          const double a = static_cast<double>(start + t) *
                           std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
          const double y1 = v[i], y2 = v[i + D / 2];
          v[i] = y1 * std::cos(a) + y2 * std::sin(a);
          v[i + D / 2] = y2 * std::cos(a) - y1 * std::sin(a);
        }
      }
    }
  }
}

struct AttentionGrads {
  Vec dq, dk, dv;  // shaped as q, k, v
};

/// The backward of ref_causal_attention for the output gradient d_o (B, T, H, D), the
/// probabilities recomputed: with p = softmax(s), dp_s = d_o·v_s, ds = p·(dp − Σ p·dp);
/// dq_t = Σ_s ds_s k_s / sqrt(D), dk_s += ds_s q_t / sqrt(D), dv_s += p_s d_o_t (summed over the
/// query heads sharing a key/value head).
inline AttentionGrads ref_causal_attention_backward(const Vec& q, const Vec& k, const Vec& v,
                                                    const Vec& d_o, int64_t B, int64_t T, int64_t H,
                                                    int64_t Hkv, int64_t D) {
  AttentionGrads g{Vec(q.size(), 0.0), Vec(k.size(), 0.0), Vec(v.size(), 0.0)};
  const auto at = [](int64_t b, int64_t t, int64_t heads, int64_t h, int64_t T_, int64_t D_) {
    return static_cast<size_t>(((b * T_ + t) * heads + h) * D_);
  };
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t j = h / (H / Hkv);
      for (int64_t t = 0; t < T; ++t) {
        const size_t qt = at(b, t, H, h, T, D);
        Vec p(static_cast<size_t>(t + 1)), dp(static_cast<size_t>(t + 1));
        double mx = -INFINITY, sum = 0;
        for (int64_t s = 0; s <= t; ++s) {
          double dot = 0;
          for (int64_t e = 0; e < D; ++e) dot += q[qt + e] * k[at(b, s, Hkv, j, T, D) + e];
          mx = std::max(mx, p[static_cast<size_t>(s)] = dot * scale);
        }
        for (double& e : p) sum += (e = std::exp(e - mx));
        double p_dot_dp = 0;
        for (int64_t s = 0; s <= t; ++s) {
          const size_t vs = at(b, s, Hkv, j, T, D);
          double& ps = p[static_cast<size_t>(s)];
          ps /= sum;
          double dot = 0;
          for (int64_t e = 0; e < D; ++e) {
            dot += d_o[qt + e] * v[vs + e];
            g.dv[vs + e] += ps * d_o[qt + e];
          }
          dp[static_cast<size_t>(s)] = dot;
          p_dot_dp += ps * dot;
        }
        for (int64_t s = 0; s <= t; ++s) {
          const size_t ks = at(b, s, Hkv, j, T, D);
          const double ds =
              p[static_cast<size_t>(s)] * (dp[static_cast<size_t>(s)] - p_dot_dp) * scale;
          for (int64_t e = 0; e < D; ++e) {
            g.dq[qt + e] += ds * k[ks + e];
            g.dk[ks + e] += ds * q[qt + e];
          }
        }
      }
    }
  }
  return g;
}

}  // namespace meshlayout::testing
