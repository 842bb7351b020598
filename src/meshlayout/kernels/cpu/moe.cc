// cpu/moe.cc — the CPU implementation of kernels/moe.h: the router's top-k in the element type,
// and each expert of a block as three BLAS products over the rows routed to it (gathered into
// scratch), the gate in the element type as kernels/gated_activation.h computes it.
#include "meshlayout/kernels/moe.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "meshlayout/kernels/cpu/blas.h"
#include "meshlayout/kernels/cpu/float_dispatch.h"

namespace meshlayout {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;  // √(2/π)
constexpr double kCubic = 0.044715;

template <typename E>
E* data_of(Array::Shard* s) {
  return reinterpret_cast<E*>(s->buffer.data());
}
template <typename E>
const E* data_of(const Array::Shard* s) {
  return reinterpret_cast<const E*>(s->buffer.data());
}

// Zeros n elements at p; an empty buffer (a device with no experts or rows: null data) is left.
template <typename E>
void zero(E* p, int64_t n) {
  if (n > 0) std::memset(p, 0, static_cast<size_t>(n) * sizeof(E));
}

// act(g) as gated_activation.h computes it, and its derivative.
template <typename E>
E activate(GateFunction f, E g) {
  if (f == GateFunction::kSilu) return g * (E(1) / (E(1) + std::exp(-g)));
  const E t = std::tanh(E(kSqrt2OverPi) * (g + E(kCubic) * g * g * g));
  return E(0.5) * g * (E(1) + t);
}
template <typename E>
E activate_derivative(GateFunction f, E g) {
  if (f == GateFunction::kSilu) {
    const E s = E(1) / (E(1) + std::exp(-g));
    return s + g * s * (E(1) - s);
  }
  const E t = std::tanh(E(kSqrt2OverPi) * (g + E(kCubic) * g * g * g));
  return E(0.5) * (E(1) + t) +
         E(0.5) * g * (E(1) - t * t) * E(kSqrt2OverPi) * (E(1) + E(3 * kCubic) * g * g);
}

// The (row, slot) pairs routed to each expert of [first, first + count), rows ascending.
std::vector<std::vector<std::pair<int64_t, int64_t>>> routed_rows(const int32_t* ids, int64_t rows,
                                                                  int64_t top_k, int64_t first,
                                                                  int64_t count) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> out(static_cast<size_t>(count));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t e = ids[r * top_k + j] - first;
      if (e >= 0 && e < count) out[static_cast<size_t>(e)].emplace_back(r, j);
    }
  }
  return out;
}

template <typename E>
void route(const MoeRoute& a) {
  const E* logits = data_of<E>(a.logits);
  E* probs = data_of<E>(a.probs);
  E* weights = data_of<E>(a.weights);
  int32_t* ids = data_of<int32_t>(a.ids);
  const int64_t n = a.experts, k = a.top_k;
  std::vector<bool> taken(static_cast<size_t>(n));
  for (int64_t r = 0; r < a.rows; ++r) {
    const E* l = logits + r * n;
    E* p = probs + r * n;
    E top = l[0];
    for (int64_t e = 1; e < n; ++e) top = std::max(top, l[e]);
    E sum = 0;
    for (int64_t e = 0; e < n; ++e) sum += p[e] = std::exp(l[e] - top);
    for (int64_t e = 0; e < n; ++e) p[e] /= sum;
    std::fill(taken.begin(), taken.end(), false);
    E chosen = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < n; ++e) {
        if (!taken[static_cast<size_t>(e)] && (best < 0 || p[e] > p[best])) best = e;
      }
      taken[static_cast<size_t>(best)] = true;
      ids[r * k + j] = static_cast<int32_t>(best);
      weights[r * k + j] = p[best];
      chosen += p[best];
    }
    if (a.normalize) {
      for (int64_t j = 0; j < k; ++j) weights[r * k + j] /= chosen;
    }
  }
}

template <typename E>
void route_backward(const MoeRouteBackward& a) {
  const E* probs = data_of<E>(a.probs);
  const E* dweights = data_of<E>(a.dweights);
  const int32_t* ids = data_of<int32_t>(a.ids);
  E* dlogits = data_of<E>(a.dlogits);
  const int64_t n = a.experts, k = a.top_k;
  std::vector<double> dp(static_cast<size_t>(n));
  for (int64_t r = 0; r < a.rows; ++r) {
    const E* p = probs + r * n;
    for (int64_t e = 0; e < n; ++e) dp[static_cast<size_t>(e)] = a.probs_grad ? a.probs_grad[e] : 0;
    const int32_t* chosen = ids + r * k;
    const E* dw = dweights + r * k;
    if (a.normalize) {  // w_j = p_j / S: dL/dp_j = (dw_j − Σ_i dw_i w_i) / S
      double s = 0;
      for (int64_t j = 0; j < k; ++j) s += p[chosen[j]];
      double dot = 0;
      for (int64_t j = 0; j < k; ++j) dot += double(dw[j]) * (p[chosen[j]] / s);
      for (int64_t j = 0; j < k; ++j) dp[static_cast<size_t>(chosen[j])] += (dw[j] - dot) / s;
    } else {
      for (int64_t j = 0; j < k; ++j) dp[static_cast<size_t>(chosen[j])] += dw[j];
    }
    double dot = 0;  // softmax: dlogit_e = p_e (dp_e − Σ p dp)
    for (int64_t e = 0; e < n; ++e) dot += double(p[e]) * dp[static_cast<size_t>(e)];
    for (int64_t e = 0; e < n; ++e) {
      dlogits[r * n + e] = static_cast<E>(p[e] * (dp[static_cast<size_t>(e)] - dot));
    }
  }
}

// The rows of x routed to one expert, gathered: xe (m × d).
template <typename E>
void gather_rows(const E* x, int64_t d, const std::vector<std::pair<int64_t, int64_t>>& routed,
                 E* xe) {
  for (size_t i = 0; i < routed.size(); ++i) {
    std::memcpy(xe + static_cast<int64_t>(i) * d, x + routed[i].first * d,
                static_cast<size_t>(d) * sizeof(E));
  }
}

template <typename E>
void experts_forward(const MoeExpertsForward& a) {
  const E* x = data_of<E>(a.x);
  const E* w = data_of<E>(a.weights);
  const int32_t* ids = data_of<int32_t>(a.ids);
  E* out = data_of<E>(a.out);
  const int64_t d = a.d, f = a.f;
  zero(out, a.rows * d);
  if (f == 0) return;
  const auto routed = routed_rows(ids, a.rows, a.top_k, a.first_expert, a.experts);
  std::vector<E> xe, g, u, o;
  for (int64_t e = 0; e < a.experts; ++e) {
    const auto& rows = routed[static_cast<size_t>(e)];
    const int64_t m = static_cast<int64_t>(rows.size());
    if (m == 0) continue;
    xe.resize(static_cast<size_t>(m * d));
    g.resize(static_cast<size_t>(m * f));
    u.resize(static_cast<size_t>(m * f));
    o.resize(static_cast<size_t>(m * d));
    gather_rows(x, d, rows, xe.data());
    cpu_kernels::gemm<E>(m, f, d, xe.data(), d, data_of<E>(a.gate) + e * d * f, f, g.data(), f);
    cpu_kernels::gemm<E>(m, f, d, xe.data(), d, data_of<E>(a.up) + e * d * f, f, u.data(), f);
    for (int64_t i = 0; i < m * f; ++i) g[i] = activate(a.function, g[i]) * u[i];
    cpu_kernels::gemm<E>(m, d, f, g.data(), f, data_of<E>(a.down) + e * f * d, d, o.data(), d);
    for (int64_t i = 0; i < m; ++i) {
      const auto [r, j] = rows[static_cast<size_t>(i)];
      const E weight = w[r * a.top_k + j];
      E* dst = out + r * d;
      const E* src = o.data() + i * d;
      for (int64_t c = 0; c < d; ++c) dst[c] += src[c] * weight;
    }
  }
}

template <typename E>
void experts_backward(const MoeExpertsBackward& a) {
  const E* x = data_of<E>(a.x);
  const E* w = data_of<E>(a.weights);
  const E* dy = data_of<E>(a.dy);
  const int32_t* ids = data_of<int32_t>(a.ids);
  const int64_t d = a.d, f = a.f, k = a.top_k;
  E* dx = a.dx ? data_of<E>(a.dx) : nullptr;
  E* dw = a.dweights ? data_of<E>(a.dweights) : nullptr;
  if (dx) zero(dx, a.rows * d);
  if (dw) zero(dw, a.rows * k);
  zero(data_of<E>(a.dgate), a.experts * d * f);
  zero(data_of<E>(a.dup), a.experts * d * f);
  zero(data_of<E>(a.ddown), a.experts * f * d);
  if (f == 0) return;
  const auto routed = routed_rows(ids, a.rows, k, a.first_expert, a.experts);
  std::vector<E> xe, g, u, h, o, dout, dh, dxe, tmp;
  for (int64_t e = 0; e < a.experts; ++e) {
    const auto& rows = routed[static_cast<size_t>(e)];
    const int64_t m = static_cast<int64_t>(rows.size());
    if (m == 0) continue;
    const E* wg = data_of<E>(a.gate) + e * d * f;
    const E* wu = data_of<E>(a.up) + e * d * f;
    const E* wd = data_of<E>(a.down) + e * f * d;
    xe.resize(static_cast<size_t>(m * d));
    g.resize(static_cast<size_t>(m * f));
    u.resize(static_cast<size_t>(m * f));
    h.resize(static_cast<size_t>(m * f));
    dout.resize(static_cast<size_t>(m * d));
    dh.resize(static_cast<size_t>(m * f));
    gather_rows(x, d, rows, xe.data());
    cpu_kernels::gemm<E>(m, f, d, xe.data(), d, wg, f, g.data(), f);
    cpu_kernels::gemm<E>(m, f, d, xe.data(), d, wu, f, u.data(), f);
    for (int64_t i = 0; i < m * f; ++i) h[i] = activate(a.function, g[i]) * u[i];
    // The output before its weight, for dL/dweights: o = h · down_e.
    if (dw) {
      o.resize(static_cast<size_t>(m * d));
      cpu_kernels::gemm<E>(m, d, f, h.data(), f, wd, d, o.data(), d);
    }
    for (int64_t i = 0; i < m; ++i) {
      const auto [r, j] = rows[static_cast<size_t>(i)];
      const E weight = w[r * k + j];
      const E* dyr = dy + r * d;
      E* dor = dout.data() + i * d;
      for (int64_t c = 0; c < d; ++c) dor[c] = dyr[c] * weight;
      if (dw) {
        E dot = 0;
        const E* orow = o.data() + i * d;
        for (int64_t c = 0; c < d; ++c) dot += dyr[c] * orow[c];
        dw[r * k + j] = dot;
      }
    }
    // down: d(down_e) = hᵀ · dout; dh = dout · down_eᵀ.
    cpu_kernels::gemm_tn<E>(f, d, m, h.data(), f, dout.data(), d, data_of<E>(a.ddown) + e * f * d,
                            d);
    cpu_kernels::gemm_nt<E>(m, f, d, dout.data(), d, wd, d, dh.data(), f);
    // The gate: dg = dh · u · act'(g) (into g), du = dh · act(g) (into u).
    for (int64_t i = 0; i < m * f; ++i) {
      const E act = activate(a.function, g[i]);
      const E dgi = dh[i] * u[i] * activate_derivative(a.function, g[i]);
      u[i] = dh[i] * act;
      g[i] = dgi;
    }
    cpu_kernels::gemm_tn<E>(d, f, m, xe.data(), d, g.data(), f, data_of<E>(a.dgate) + e * d * f, f);
    cpu_kernels::gemm_tn<E>(d, f, m, xe.data(), d, u.data(), f, data_of<E>(a.dup) + e * d * f, f);
    if (dx) {
      dxe.resize(static_cast<size_t>(m * d));
      tmp.resize(static_cast<size_t>(m * d));
      cpu_kernels::gemm_nt<E>(m, d, f, g.data(), f, wg, f, dxe.data(), d);
      cpu_kernels::gemm_nt<E>(m, d, f, u.data(), f, wu, f, tmp.data(), d);
      for (int64_t i = 0; i < m; ++i) {
        E* dst = dx + rows[static_cast<size_t>(i)].first * d;
        const E* s1 = dxe.data() + i * d;
        const E* s2 = tmp.data() + i * d;
        for (int64_t c = 0; c < d; ++c) dst[c] += s1[c] + s2[c];
      }
    }
  }
}

}  // namespace

void moe_route_cpu(const MoeRoute& args) {
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) { route<E>(args); });
}

void moe_route_backward_cpu(const MoeRouteBackward& args) {
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) { route_backward<E>(args); });
}

void moe_count_cpu(const MoeCount& args) {
  const int32_t* ids = data_of<int32_t>(args.ids);
  for (int64_t i = 0; i < args.rows * args.top_k; ++i) {
    if (ids[i] >= 0 && ids[i] < args.experts) args.counts[ids[i]] += 1;
  }
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    const E* p = data_of<E>(args.probs);
    for (int64_t r = 0; r < args.rows; ++r) {
      for (int64_t e = 0; e < args.experts; ++e) args.prob_sums[e] += p[r * args.experts + e];
    }
  });
}

void moe_experts_forward_cpu(const MoeExpertsForward& args) {
  cpu_kernels::use_single_threaded_blas();
  cpu_kernels::dispatch_float(args.dtype,
                              [&]<typename E>(E* /*tag*/) { experts_forward<E>(args); });
}

void moe_experts_backward_cpu(const MoeExpertsBackward& args) {
  cpu_kernels::use_single_threaded_blas();
  cpu_kernels::dispatch_float(args.dtype,
                              [&]<typename E>(E* /*tag*/) { experts_backward<E>(args); });
}

void moe_copy_rows_cpu(const MoeCopyRows& a) {
  const std::byte* src = data_of<std::byte>(a.src);
  std::byte* dst = data_of<std::byte>(a.dst);
  for (int64_t i = 0; i < a.count; ++i) {
    std::memcpy(dst + static_cast<size_t>(a.dst_rows[i]) * a.row_bytes,
                src + static_cast<size_t>(a.src_rows[i]) * a.row_bytes, a.row_bytes);
  }
}

void moe_add_rows_cpu(const MoeAddRows& a) {
  cpu_kernels::dispatch_float(a.dtype, [&]<typename E>(E* /*tag*/) {
    const E* src = data_of<E>(a.src);
    E* dst = data_of<E>(a.dst);
    for (int64_t i = 0; i < a.count; ++i) {
      const E* s = src + a.src_rows[i] * a.width;
      E* d = dst + a.dst_rows[i] * a.width;
      for (int64_t c = 0; c < a.width; ++c) d[c] += s[c];
    }
  });
}

void moe_routed_rows_cpu(const MoeRoutedRows& a) {
  const int32_t* ids = data_of<int32_t>(a.ids);
  a.out->clear();
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t j = 0; j < a.top_k; ++j) {
      const int64_t e = ids[r * a.top_k + j] - a.first_expert;
      if (e >= 0 && e < a.experts) {
        a.out->push_back(r);
        break;
      }
    }
  }
}

}  // namespace meshlayout
