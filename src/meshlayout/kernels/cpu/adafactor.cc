// cpu/adafactor.cc — the CPU implementation of kernels/adafactor.h, the loops moved unchanged
// from train/adafactor.cc.
#include "meshlayout/kernels/adafactor.h"

#include <algorithm>
#include <cmath>

#include "meshlayout/kernels/cpu/float_dispatch.h"

namespace meshlayout {
namespace {

template <typename T>
T* data(Array::Shard* s) {
  return reinterpret_cast<T*>(s->buffer.data());
}
template <typename T>
const T* data(const Array::Shard* s) {
  return reinterpret_cast<const T*>(s->buffer.data());
}

}  // namespace

void adafactor_partial_sums_cpu(const AdafactorPartialSums& args) {
  cpu_kernels::dispatch_float(args.dtype, [&]<typename T>(T* /*tag*/) {
    const T eps1 = static_cast<T>(args.epsilon_1);
    const auto reg = [&](T gk) { return gk * gk + eps1; };
    const int dm = args.dm, dn = args.dn;
    const Box& b = args.g->box;
    const int64_t bm = b.shape[static_cast<size_t>(dm)], bn = b.shape[static_cast<size_t>(dn)];
    const int64_t lead = bm * bn == 0 ? 0 : b.num_elements() / (bm * bn);
    const T* gp = data<T>(args.g);
    T* row = data<T>(args.rows);
    T* col = data<T>(args.cols);
    std::fill(row, row + num_elements(args.rows->box.shape), T(0));
    std::fill(col, col + num_elements(args.cols->box.shape), T(0));
    for (int64_t l = 0; l < lead; ++l) {
      for (int64_t i = 0; i < bm; ++i) {
        for (int64_t j = 0; j < bn; ++j) {
          const T q = reg(gp[(l * bm + i) * bn + j]);
          row[l * bm + i] += q;
          col[l * bn + j] += q;
        }
      }
    }
  });
}

void adafactor_rows_cpu(const AdafactorRows& args) {
  cpu_kernels::dispatch_float(args.dtype, [&]<typename T>(T* /*tag*/) {
    const T beta = static_cast<T>(args.beta), one_minus_beta = static_cast<T>(args.one_minus_beta);
    const int64_t kn = args.blocks, n = args.n;
    const int64_t count = args.r->box.num_elements();
    const T* sums = data<T>(args.sums);
    T* r = data<T>(args.r);
    for (int64_t k = 0; k < count; ++k) {
      T sum = T(0);
      for (int64_t kb = 0; kb < kn; ++kb) sum += sums[k * kn + kb];
      r[k] = beta * r[k] + one_minus_beta * (sum / static_cast<T>(n));
    }
  });
}

void adafactor_cols_cpu(const AdafactorCols& args) {
  cpu_kernels::dispatch_float(args.dtype, [&]<typename T>(T* /*tag*/) {
    const T beta = static_cast<T>(args.beta), one_minus_beta = static_cast<T>(args.one_minus_beta);
    const int64_t km = args.blocks, m = args.m;
    const int64_t bn = args.c->box.shape.back();
    const int64_t lead = bn == 0 ? 0 : args.c->box.num_elements() / bn;
    const T* sums = data<T>(args.sums);
    T* c = data<T>(args.c);
    for (int64_t l = 0; l < lead; ++l) {
      for (int64_t j = 0; j < bn; ++j) {
        T sum = T(0);
        for (int64_t kb = 0; kb < km; ++kb) sum += sums[(l * km + kb) * bn + j];
        c[l * bn + j] = beta * c[l * bn + j] + one_minus_beta * (sum / static_cast<T>(m));
      }
    }
  });
}

void adafactor_row_totals_cpu(const AdafactorRowTotals& args) {
  cpu_kernels::dispatch_float(args.dtype, [&]<typename T>(T* /*tag*/) {
    const int64_t bm = args.r->box.shape.back();
    T* out = data<T>(args.out);
    const int64_t lead = num_elements(args.out->box.shape);
    const T* r = data<T>(args.r);
    for (int64_t l = 0; l < lead; ++l) {
      T sum = T(0);
      for (int64_t i = 0; i < bm; ++i) sum += r[l * bm + i];
      out[l] = sum;
    }
  });
}

void adafactor_factored_velocity_cpu(const AdafactorFactoredVelocity& args) {
  cpu_kernels::dispatch_float(args.dtype, [&]<typename T>(T* /*tag*/) {
    const int dm = args.dm, dn = args.dn;
    const int64_t km = args.blocks, m = args.m;
    const Box& b = args.v->box;
    const int64_t bm = b.shape[static_cast<size_t>(dm)], bn = b.shape[static_cast<size_t>(dn)];
    const int64_t lead = bm * bn == 0 ? 0 : b.num_elements() / (bm * bn);
    const T* r = data<T>(args.r);
    const T* c = data<T>(args.c);
    const T* rs = data<T>(args.totals);
    T* v = data<T>(args.v);
    for (int64_t l = 0; l < lead; ++l) {
      T sum = T(0);
      for (int64_t kb = 0; kb < km; ++kb) sum += rs[l * km + kb];
      const T r_mean = sum / static_cast<T>(m);
      for (int64_t i = 0; i < bm; ++i) {
        const T ri = r[l * bm + i] / r_mean;
        for (int64_t j = 0; j < bn; ++j) v[(l * bm + i) * bn + j] = ri * c[l * bn + j];
      }
    }
  });
}

void adafactor_velocity_cpu(const AdafactorVelocity& args) {
  cpu_kernels::dispatch_float(args.dtype, [&]<typename T>(T* /*tag*/) {
    const T beta = static_cast<T>(args.beta), one_minus_beta = static_cast<T>(args.one_minus_beta);
    const T eps1 = static_cast<T>(args.epsilon_1);
    const auto reg = [&](T gk) { return gk * gk + eps1; };
    const int64_t count = args.v->box.num_elements();
    const T* gp = data<T>(args.g);
    T* v = data<T>(args.v);
    for (int64_t k = 0; k < count; ++k) v[k] = beta * v[k] + one_minus_beta * reg(gp[k]);
  });
}

void adafactor_sum_u_squares_cpu(const AdafactorSumUSquares& args) {
  cpu_kernels::dispatch_float(args.dtype, [&]<typename T>(T* /*tag*/) {
    const T* gp = data<T>(args.g);
    const T* vp = data<T>(args.v);
    const int64_t n = args.g->box.num_elements();
    double& sum = *args.sum;
    for (int64_t k = 0; k < n; ++k) {
      const T uk = gp[k] / std::sqrt(vp[k]);
      const double u = uk;
      sum += u * u;
    }
  });
}

void adafactor_apply_cpu(const AdafactorApply& args) {
  cpu_kernels::dispatch_float(args.dtype, [&]<typename T>(T* /*tag*/) {
    const T alpha_t = static_cast<T>(args.alpha_t), divisor = static_cast<T>(args.divisor);
    const T* gp = data<T>(args.g);
    const T* vp = data<T>(args.v);
    T* theta = data<T>(args.theta);
    const int64_t count = args.theta->box.num_elements();
    for (int64_t k = 0; k < count; ++k) {
      const T u = gp[k] / std::sqrt(vp[k]);
      theta[k] -= alpha_t * (u / divisor);
    }
  });
}

}  // namespace meshlayout
