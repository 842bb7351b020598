// adafactor_kernels.cu — the CUDA implementations of kernels/adafactor.h (keras.optimizers.
// Adafactor's per-shard kernels, train/adafactor.cc): the partial row and column sums of g² + ε1,
// the row and column means, the row totals, the factored and the plain velocity, the sum of the
// squared updates and the update of θ. Registered by register_cuda_optimizer_kernels
// (optimizer_kernels.cu).
//
// Every output element is computed by one thread with the CPU's operations in the CPU's order
// (kernels/cpu/adafactor.cc): each sum over a box dimension or over blocks is a sequential loop
// in the same index order, each operation rounded once (no FMA), so the results are bit-identical
// to the CPU for F32 and F64. The one exception is adafactor_sum_u_squares, a reduction over the
// whole shard in double (a tree of partial sums, not the CPU's element order): within 1e-12
// relative of the CPU.
//
// Example (what train/adafactor.cc runs per local shard of a gpu:K variable):
//   adafactor_velocity(DeviceKind::kCuda, {.v = &v, .g = &g, .dtype = DType::kF32, …});
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "meshlayout/kernels/adafactor.h"
#include "meshlayout/kernels/cuda/register.h"
#include "meshlayout/kernels/cuda/shard_kernel_util.cuh"
#include "meshlayout/runtime/cuda/cuda_context.h"

namespace meshlayout::cuda_kernels {
namespace {

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double sqrt_rn(double a) { return __dsqrt_rn(a); }

#define MESHLAYOUT_GRID_STRIDE(i, count)                                        \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (count); \
       i += int64_t{gridDim.x} * blockDim.x)

// ---- Kernels (one thread per output element, the CPU's loops inside) ----

// rows[l, i] = Σ_j (g² + ε1), j ascending.
template <typename T>
__global__ void partial_rows_kernel(const T* g, T* rows, int64_t lead, int64_t bm, int64_t bn,
                                    T eps1) {
  MESHLAYOUT_GRID_STRIDE(li, lead * bm) {
    T sum = T(0);
    for (int64_t j = 0; j < bn; ++j) {
      const T x = g[li * bn + j];
      sum = add(sum, add(mul(x, x), eps1));
    }
    rows[li] = sum;
  }
}

// cols[l, j] = Σ_i (g² + ε1), i ascending.
template <typename T>
__global__ void partial_cols_kernel(const T* g, T* cols, int64_t lead, int64_t bm, int64_t bn,
                                    T eps1) {
  MESHLAYOUT_GRID_STRIDE(lj, lead * bn) {
    const int64_t l = lj / bn, j = lj - l * bn;
    T sum = T(0);
    for (int64_t i = 0; i < bm; ++i) {
      const T x = g[(l * bm + i) * bn + j];
      sum = add(sum, add(mul(x, x), eps1));
    }
    cols[lj] = sum;
  }
}

// out[(l, j)] = β·out + (1−β)·(Σ_kb sums[(l·blocks + kb)·inner + j] / size): the rows (inner 1)
// and the columns.
template <typename T>
__global__ void means_kernel(T* out, const T* sums, int64_t count, int64_t inner, int64_t blocks,
                             T size, T beta, T one_minus_beta) {
  MESHLAYOUT_GRID_STRIDE(k, count) {
    const int64_t l = k / inner, j = k - l * inner;
    T sum = T(0);
    for (int64_t kb = 0; kb < blocks; ++kb) sum = add(sum, sums[(l * blocks + kb) * inner + j]);
    out[k] = add(mul(beta, out[k]), mul(one_minus_beta, div(sum, size)));
  }
}

// out[l] = Σ_i r[l, i], i ascending.
template <typename T>
__global__ void row_totals_kernel(const T* r, T* out, int64_t lead, int64_t bm) {
  MESHLAYOUT_GRID_STRIDE(l, lead) {
    T sum = T(0);
    for (int64_t i = 0; i < bm; ++i) sum = add(sum, r[l * bm + i]);
    out[l] = sum;
  }
}

// v[l, i, j] = (r[l, i] / r_mean[l]) · c[l, j].
template <typename T>
__global__ void factored_velocity_kernel(T* v, const T* r, const T* c, const T* totals,
                                         int64_t lead, int64_t bm, int64_t bn, int64_t blocks,
                                         T m) {
  MESHLAYOUT_GRID_STRIDE(k, lead * bm * bn) {
    const int64_t li = k / bn, j = k - li * bn, l = li / bm;
    T sum = T(0);
    for (int64_t kb = 0; kb < blocks; ++kb) sum = add(sum, totals[l * blocks + kb]);
    const T ri = div(r[li], div(sum, m));
    v[k] = mul(ri, c[l * bn + j]);
  }
}

template <typename T>
__global__ void velocity_kernel(T* v, const T* g, int64_t count, T beta, T one_minus_beta, T eps1) {
  MESHLAYOUT_GRID_STRIDE(k, count) {
    const T x = g[k];
    v[k] = add(mul(beta, v[k]), mul(one_minus_beta, add(mul(x, x), eps1)));
  }
}

template <typename T>
__global__ void apply_kernel(T* theta, const T* g, const T* v, int64_t count, T alpha_t,
                             T divisor) {
  MESHLAYOUT_GRID_STRIDE(k, count) {
    const T u = div(g[k], sqrt_rn(v[k]));
    theta[k] = sub(theta[k], mul(alpha_t, div(u, divisor)));
  }
}

constexpr int kReduceBlocks = 1024;
constexpr int kReduceThreads = 256;

// Sums `sums` of kReduceThreads doubles into sums[0] (all threads of the block call it).
__device__ void block_sum(double* sums) {
  __syncthreads();
  for (int half = kReduceThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      sums[threadIdx.x] = __dadd_rn(sums[threadIdx.x], sums[threadIdx.x + half]);
    }
    __syncthreads();
  }
}

// partial[block] = Σ u², u = g/√v in T, squared in double.
template <typename T>
__global__ void u_squares_blocks(const T* g, const T* v, int64_t n, double* partial) {
  __shared__ double sums[kReduceThreads];
  double sum = 0;
  MESHLAYOUT_GRID_STRIDE(k, n) {
    const double u = static_cast<double>(div(g[k], sqrt_rn(v[k])));
    sum = __dadd_rn(sum, __dmul_rn(u, u));
  }
  sums[threadIdx.x] = sum;
  block_sum(sums);
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

__global__ void sum_partials_kernel(const double* partial, int count, double* out) {
  __shared__ double sums[kReduceThreads];
  double sum = 0;
  for (int i = static_cast<int>(threadIdx.x); i < count; i += kReduceThreads) {
    sum = __dadd_rn(sum, partial[i]);
  }
  sums[threadIdx.x] = sum;
  block_sum(sums);
  if (threadIdx.x == 0) *out = sums[0];
}

#undef MESHLAYOUT_GRID_STRIDE

// ---- Ops ----

// (lead, bm, bn) of a box of rank >= 2 with the dimensions dm, dn, as the CPU computes them.
struct Dims {
  int64_t lead, bm, bn;
};
Dims dims_of(const Box& b, int dm, int dn) {
  const int64_t bm = b.shape[static_cast<size_t>(dm)], bn = b.shape[static_cast<size_t>(dn)];
  return {bm * bn == 0 ? 0 : b.num_elements() / (bm * bn), bm, bn};
}

void adafactor_partial_sums_cuda(const AdafactorPartialSums& a) {
  const int64_t id = a.rows->device_id;
  dispatch_f32_f64("adafactor_partial_sums", a.dtype, [&]<typename T>(T* /*tag*/) {
    const Dims d = dims_of(a.g->box, a.dm, a.dn);
    cudaStream_t s = cuda::enter_device(id);
    // As the CPU: every element of rows and cols zeroed, then the sums written.
    const size_t row_bytes = static_cast<size_t>(a.rows->box.num_elements()) * sizeof(T);
    const size_t col_bytes = static_cast<size_t>(a.cols->box.num_elements()) * sizeof(T);
    if (row_bytes) {
      cuda::check(cudaMemsetAsync(a.rows->buffer.data(), 0, row_bytes, s), "adafactor_partial_sums",
                  id);
    }
    if (col_bytes) {
      cuda::check(cudaMemsetAsync(a.cols->buffer.data(), 0, col_bytes, s), "adafactor_partial_sums",
                  id);
    }
    if (d.lead == 0) return;
    const T eps1 = static_cast<T>(a.epsilon_1);
    partial_rows_kernel<T><<<grid_for(d.lead * d.bm), kThreads, 0, s>>>(
        elements<T>(a.g), elements<T>(a.rows), d.lead, d.bm, d.bn, eps1);
    cuda::check_launch("adafactor_partial_sums", id);
    partial_cols_kernel<T><<<grid_for(d.lead * d.bn), kThreads, 0, s>>>(
        elements<T>(a.g), elements<T>(a.cols), d.lead, d.bm, d.bn, eps1);
    cuda::check_launch("adafactor_partial_sums", id);
  });
}

void adafactor_rows_cuda(const AdafactorRows& a) {
  const int64_t id = a.r->device_id;
  dispatch_f32_f64("adafactor_rows", a.dtype, [&]<typename T>(T* /*tag*/) {
    const int64_t count = a.r->box.num_elements();
    if (count == 0) return;
    cudaStream_t s = cuda::enter_device(id);
    means_kernel<T><<<grid_for(count), kThreads, 0, s>>>(
        elements<T>(a.r), elements<T>(a.sums), count, 1, a.blocks, static_cast<T>(a.n),
        static_cast<T>(a.beta), static_cast<T>(a.one_minus_beta));
    cuda::check_launch("adafactor_rows", id);
  });
}

void adafactor_cols_cuda(const AdafactorCols& a) {
  const int64_t id = a.c->device_id;
  dispatch_f32_f64("adafactor_cols", a.dtype, [&]<typename T>(T* /*tag*/) {
    const int64_t bn = a.c->box.shape.back();
    const int64_t count = bn == 0 ? 0 : a.c->box.num_elements();
    if (count == 0) return;
    cudaStream_t s = cuda::enter_device(id);
    means_kernel<T><<<grid_for(count), kThreads, 0, s>>>(
        elements<T>(a.c), elements<T>(a.sums), count, bn, a.blocks, static_cast<T>(a.m),
        static_cast<T>(a.beta), static_cast<T>(a.one_minus_beta));
    cuda::check_launch("adafactor_cols", id);
  });
}

void adafactor_row_totals_cuda(const AdafactorRowTotals& a) {
  const int64_t id = a.out->device_id;
  dispatch_f32_f64("adafactor_row_totals", a.dtype, [&]<typename T>(T* /*tag*/) {
    const int64_t bm = a.r->box.shape.back();
    const int64_t lead = num_elements(a.out->box.shape);
    if (lead == 0) return;
    cudaStream_t s = cuda::enter_device(id);
    row_totals_kernel<T>
        <<<grid_for(lead), kThreads, 0, s>>>(elements<T>(a.r), elements<T>(a.out), lead, bm);
    cuda::check_launch("adafactor_row_totals", id);
  });
}

void adafactor_factored_velocity_cuda(const AdafactorFactoredVelocity& a) {
  const int64_t id = a.v->device_id;
  dispatch_f32_f64("adafactor_factored_velocity", a.dtype, [&]<typename T>(T* /*tag*/) {
    const Dims d = dims_of(a.v->box, a.dm, a.dn);
    const int64_t count = d.lead * d.bm * d.bn;
    if (count == 0) return;
    cudaStream_t s = cuda::enter_device(id);
    factored_velocity_kernel<T><<<grid_for(count), kThreads, 0, s>>>(
        elements<T>(a.v), elements<T>(a.r), elements<T>(a.c), elements<T>(a.totals), d.lead, d.bm,
        d.bn, a.blocks, static_cast<T>(a.m));
    cuda::check_launch("adafactor_factored_velocity", id);
  });
}

void adafactor_velocity_cuda(const AdafactorVelocity& a) {
  const int64_t id = a.v->device_id;
  dispatch_f32_f64("adafactor_velocity", a.dtype, [&]<typename T>(T* /*tag*/) {
    const int64_t count = a.v->box.num_elements();
    if (count == 0) return;
    cudaStream_t s = cuda::enter_device(id);
    velocity_kernel<T><<<grid_for(count), kThreads, 0, s>>>(
        elements<T>(a.v), elements<T>(a.g), count, static_cast<T>(a.beta),
        static_cast<T>(a.one_minus_beta), static_cast<T>(a.epsilon_1));
    cuda::check_launch("adafactor_velocity", id);
  });
}

void adafactor_sum_u_squares_cuda(const AdafactorSumUSquares& a) {
  const int64_t id = a.g->device_id;
  dispatch_f32_f64("adafactor_sum_u_squares", a.dtype, [&]<typename T>(T* /*tag*/) {
    const int64_t n = a.g->box.num_elements();
    if (n == 0) return;
    cudaStream_t s = cuda::enter_device(id);
    const int blocks =
        static_cast<int>(std::min<int64_t>(kReduceBlocks, grid_for(n, kReduceThreads)));
    DeviceScratch partial(sizeof(double) * (static_cast<size_t>(blocks) + 1), s, id);
    double* p = partial.as<double>();
    u_squares_blocks<T><<<blocks, kReduceThreads, 0, s>>>(elements<T>(a.g), elements<T>(a.v), n, p);
    cuda::check_launch("adafactor_sum_u_squares", id);
    sum_partials_kernel<<<1, kReduceThreads, 0, s>>>(p, blocks, p + blocks);
    cuda::check_launch("adafactor_sum_u_squares", id);
    double total = 0;
    cuda::check(cudaMemcpyAsync(&total, p + blocks, sizeof(double), cudaMemcpyDeviceToHost, s),
                "adafactor_sum_u_squares", id);
    cuda::check(cudaStreamSynchronize(s), "adafactor_sum_u_squares", id);
    *a.sum += total;
  });
}

void adafactor_apply_cuda(const AdafactorApply& a) {
  const int64_t id = a.theta->device_id;
  dispatch_f32_f64("adafactor_apply", a.dtype, [&]<typename T>(T* /*tag*/) {
    const int64_t count = a.theta->box.num_elements();
    if (count == 0) return;
    cudaStream_t s = cuda::enter_device(id);
    apply_kernel<T><<<grid_for(count), kThreads, 0, s>>>(
        elements<T>(a.theta), elements<T>(a.g), elements<T>(a.v), count, static_cast<T>(a.alpha_t),
        static_cast<T>(a.divisor));
    cuda::check_launch("adafactor_apply", id);
  });
}

}  // namespace
}  // namespace meshlayout::cuda_kernels

namespace meshlayout::internal_cuda {

void register_cuda_adafactor_kernels() {
  using namespace cuda_kernels;
  adafactor_partial_sums.define(DeviceKind::kCuda, &adafactor_partial_sums_cuda);
  adafactor_rows.define(DeviceKind::kCuda, &adafactor_rows_cuda);
  adafactor_cols.define(DeviceKind::kCuda, &adafactor_cols_cuda);
  adafactor_row_totals.define(DeviceKind::kCuda, &adafactor_row_totals_cuda);
  adafactor_factored_velocity.define(DeviceKind::kCuda, &adafactor_factored_velocity_cuda);
  adafactor_velocity.define(DeviceKind::kCuda, &adafactor_velocity_cuda);
  adafactor_sum_u_squares.define(DeviceKind::kCuda, &adafactor_sum_u_squares_cuda);
  adafactor_apply.define(DeviceKind::kCuda, &adafactor_apply_cuda);
}

}  // namespace meshlayout::internal_cuda
