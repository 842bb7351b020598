// adafactor.h — the per-shard kernels of keras.optimizers.Adafactor (train/adafactor.h): the
// partial row and column sums of G = g² + ε1 over a variable box, the updates of the factored
// slots r and c from the replicated block sums, mean(r, −1)'s partial sums, the velocity (factored
// or not), the sum of u² (u = g/√v) and the step θ −= α_t · u / divisor. Scalars are computed by
// the caller in the variable's type T and passed as double (exact for F32), cast back to T here.
//
// Example (per local shard xs of the variable x, g its prepared gradient):
//   adafactor_velocity(kind_of(x), {.v = v.shard_at(xs.position), .g = g.shard_at(xs.position),
//                                   .dtype = x.dtype(), .beta = beta, .one_minus_beta = 1 - beta,
//                                   .epsilon_1 = eps1});
#pragma once

#include <cstdint>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// The partial sums of G = g² + ε1 over one box of a variable of rank >= 2 (dm = rank − 2,
/// dn = rank − 1): rows[l, i] = Σ_j G[l, i, j] (the box's shape with dn cut to one) and
/// cols[l, j] = Σ_i G[l, i, j] (with dm cut to one), each zeroed first.
struct AdafactorPartialSums {
  const Array::Shard* g;  // the prepared gradient of the box
  Array::Shard* rows;
  Array::Shard* cols;
  DType dtype;
  int dm, dn;
  double epsilon_1;
};

/// r[k] = β·r[k] + (1−β)·(Σ_kb sums[k·blocks + kb] / n): the row means from every block's
/// partial sums.
struct AdafactorRows {
  Array::Shard* r;
  const Array::Shard* sums;  // rows replicated over the blocks of dimension dn
  DType dtype;
  int64_t blocks;  // the blocks of dn
  int64_t n;       // the variable's size along dn
  double beta, one_minus_beta;
};

/// c[l, j] = β·c[l, j] + (1−β)·(Σ_kb sums[l, kb, j] / m): the column means.
struct AdafactorCols {
  Array::Shard* c;
  const Array::Shard* sums;  // cols replicated over the blocks of dimension dm
  DType dtype;
  int64_t blocks;  // the blocks of dm
  int64_t m;       // the variable's size along dm
  double beta, one_minus_beta;
};

/// out[l] = Σ_i r[l, i] over the shard's last dimension (mean(r, −1)'s partial sums).
struct AdafactorRowTotals {
  const Array::Shard* r;
  Array::Shard* out;
  DType dtype;
};

/// v[l, i, j] = (r[l, i] / r_mean[l]) · c[l, j] on one variable box, r_mean[l] = Σ_kb
/// totals[l, kb] / m.
struct AdafactorFactoredVelocity {
  Array::Shard* v;  // the velocity's shard: the variable box
  const Array::Shard* r;
  const Array::Shard* c;
  const Array::Shard* totals;  // the row totals replicated over the blocks of dm
  DType dtype;
  int dm, dn;
  int64_t blocks;  // the blocks of dm
  int64_t m;
};

/// v[k] = β·v[k] + (1−β)·(g[k]² + ε1) (a variable of rank < 2).
struct AdafactorVelocity {
  Array::Shard* v;
  const Array::Shard* g;
  DType dtype;
  double beta, one_minus_beta, epsilon_1;
};

/// *sum += Σ u[k]² (u = g/√v in T, squared in double), in element order.
struct AdafactorSumUSquares {
  const Array::Shard* g;
  const Array::Shard* v;
  DType dtype;
  double* sum;
};

/// θ[k] −= α_t · (u[k] / divisor).
struct AdafactorApply {
  Array::Shard* theta;
  const Array::Shard* g;
  const Array::Shard* v;
  DType dtype;
  double alpha_t, divisor;
};

void adafactor_partial_sums_cpu(const AdafactorPartialSums& args);
void adafactor_rows_cpu(const AdafactorRows& args);
void adafactor_cols_cpu(const AdafactorCols& args);
void adafactor_row_totals_cpu(const AdafactorRowTotals& args);
void adafactor_factored_velocity_cpu(const AdafactorFactoredVelocity& args);
void adafactor_velocity_cpu(const AdafactorVelocity& args);
void adafactor_sum_u_squares_cpu(const AdafactorSumUSquares& args);
void adafactor_apply_cpu(const AdafactorApply& args);

inline KernelOp<void(const AdafactorPartialSums&)> adafactor_partial_sums{
    "adafactor_partial_sums", &adafactor_partial_sums_cpu};
inline KernelOp<void(const AdafactorRows&)> adafactor_rows{"adafactor_rows", &adafactor_rows_cpu};
inline KernelOp<void(const AdafactorCols&)> adafactor_cols{"adafactor_cols", &adafactor_cols_cpu};
inline KernelOp<void(const AdafactorRowTotals&)> adafactor_row_totals{"adafactor_row_totals",
                                                                      &adafactor_row_totals_cpu};
inline KernelOp<void(const AdafactorFactoredVelocity&)> adafactor_factored_velocity{
    "adafactor_factored_velocity", &adafactor_factored_velocity_cpu};
inline KernelOp<void(const AdafactorVelocity&)> adafactor_velocity{"adafactor_velocity",
                                                                   &adafactor_velocity_cpu};
inline KernelOp<void(const AdafactorSumUSquares&)> adafactor_sum_u_squares{
    "adafactor_sum_u_squares", &adafactor_sum_u_squares_cpu};
inline KernelOp<void(const AdafactorApply&)> adafactor_apply{"adafactor_apply",
                                                             &adafactor_apply_cpu};

}  // namespace meshlayout
