// layer_backward_kernels.cu — the CUDA implementations of the backward layer kernels a training
// step of the Llama families reaches besides matmul and attention: rms_norm_backward and
// layer_norm_backward (kernels/normalization.h), activation_backward (kernels/activation.h),
// gated_backward (kernels/gated_activation.h), soft_cap_backward_shard (kernels/soft_cap.h) and
// embedding_scatter_add (kernels/embedding.h), registered by register_cuda_layer_kernels().
//
// As layer_kernels.cu: the CPU's formulas in its types and operation order without FMA
// contraction; row sums in double as block sums. embedding_scatter_add adds each table row's dy
// rows in token order, as the CPU does (so the same bits): it reads the ids back to the host,
// groups the tokens by row there, and synchronizes the stream before returning.
#include <string>
#include <vector>

#include "meshlayout/kernels/activation.h"
#include "meshlayout/kernels/cuda/layer_kernel_util.cuh"
#include "meshlayout/kernels/cuda/register.h"
#include "meshlayout/kernels/embedding.h"
#include "meshlayout/kernels/gated_activation.h"
#include "meshlayout/kernels/normalization.h"
#include "meshlayout/kernels/soft_cap.h"

namespace meshlayout::layer_cuda {
namespace {

// ---- RMSNormalization ----

// One block per row: Σx², Σ g·dy·x in double; dx = r·g·dy − coef·x, coef = r³·Σ(g·dy·x)/n;
// contrib = dy·x·r.
template <typename E>
__global__ void rms_norm_backward_kernel(E* dx, E* contrib, const E* x, const E* dy, const E* g,
                                         int64_t row, double epsilon) {
  __shared__ double shared[32];
  const int64_t o = static_cast<int64_t>(blockIdx.x) * row;
  double sq = 0, dt = 0;
  for (int64_t k = threadIdx.x; k < row; k += blockDim.x) {
    sq = add(sq, mul(double(x[o + k]), double(x[o + k])));
    dt = add(dt, mul(mul(double(g[k]), double(dy[o + k])), double(x[o + k])));
  }
  const double squares = block_sum(sq, shared), dot = block_sum(dt, shared);
  const double inv = div(1.0, ::sqrt(add(div(squares, double(row)), epsilon)));
  const double coef = div(mul(mul(mul(inv, inv), inv), dot), double(row));
  for (int64_t k = threadIdx.x; k < row; k += blockDim.x) {
    const double xk = x[o + k], dk = dy[o + k];
    dx[o + k] = static_cast<E>(sub(mul(mul(inv, double(g[k])), dk), mul(coef, xk)));
    if (contrib) contrib[o + k] = static_cast<E>(mul(mul(dk, xk), inv));
  }
}

void rms_norm_backward_cuda(const RmsNormBackward& a) {
  const int64_t id = a.dx->device_id, row = a.features, n = a.dx->box.num_elements();
  cudaStream_t s = cuda::enter_device(id);
  if (row <= 0 || n / row == 0) return;
  dispatch_float(a.dtype, "rms_norm_backward", id, [&]<typename E>(E*) {
    rms_norm_backward_kernel<E><<<static_cast<unsigned>(n / row), kThreads, 0, s>>>(
        device_ptr<E>(a.dx), device_ptr<E>(a.contrib), device_ptr<E>(a.x), device_ptr<E>(a.dy),
        device_ptr<E>(a.scale), row, a.epsilon);
  });
  cuda::check_launch("rms_norm_backward", id);
}

// ---- LayerNormalization ----

// One block per row: the row's mean and r as the forward, mean(d) and mean(d·x̂) (d = dy·gamma),
// dx = r·(d − mean(d) − x̂·mean(d·x̂)), xhat_dy = dy·x̂.
template <typename E>
__global__ void layer_norm_backward_kernel(E* dx, E* xhat_dy, const E* x, const E* dy, const E* g,
                                           int64_t row, double epsilon) {
  __shared__ double shared[32];
  const int64_t o = static_cast<int64_t>(blockIdx.x) * row;
  double part = 0;
  for (int64_t k = threadIdx.x; k < row; k += blockDim.x) part += double(x[o + k]);
  const double mean = div(block_sum(part, shared), double(row));
  part = 0;
  for (int64_t k = threadIdx.x; k < row; k += blockDim.x) {
    const double d = sub(double(x[o + k]), mean);
    part = add(part, mul(d, d));
  }
  const double inv = div(1.0, ::sqrt(add(div(block_sum(part, shared), double(row)), epsilon)));
  double pd = 0, pdx = 0;
  for (int64_t k = threadIdx.x; k < row; k += blockDim.x) {
    const double dk = g ? mul(double(dy[o + k]), double(g[k])) : double(dy[o + k]);
    pd = add(pd, dk);
    pdx = add(pdx, mul(mul(dk, sub(double(x[o + k]), mean)), inv));
  }
  const double mean_d = div(block_sum(pd, shared), double(row));
  const double mean_dx = div(block_sum(pdx, shared), double(row));
  for (int64_t k = threadIdx.x; k < row; k += blockDim.x) {
    const double xhat = mul(sub(double(x[o + k]), mean), inv);
    const double dk = g ? mul(double(dy[o + k]), double(g[k])) : double(dy[o + k]);
    dx[o + k] = static_cast<E>(mul(inv, sub(sub(dk, mean_d), mul(xhat, mean_dx))));
    if (xhat_dy) xhat_dy[o + k] = static_cast<E>(mul(double(dy[o + k]), xhat));
  }
}

void layer_norm_backward_cuda(const LayerNormBackward& a) {
  const int64_t id = a.dx->device_id, row = a.features, n = a.dx->box.num_elements();
  cudaStream_t s = cuda::enter_device(id);
  if (row <= 0 || n / row == 0) return;
  dispatch_float(a.dtype, "layer_norm_backward", id, [&]<typename E>(E*) {
    layer_norm_backward_kernel<E><<<static_cast<unsigned>(n / row), kThreads, 0, s>>>(
        device_ptr<E>(a.dx), device_ptr<E>(a.xhat_dy), device_ptr<E>(a.x), device_ptr<E>(a.dy),
        device_ptr<E>(a.gamma), row, a.epsilon);
  });
  cuda::check_launch("layer_norm_backward", id);
}

// ---- Activations ----

// d = dy · f'(z) in place (d holds dy), the derivatives in double.
template <typename E>
__global__ void activation_backward_kernel(E* d, const E* z, int64_t n, ActivationFunction f) {
  constexpr double kSqrt2 = 1.4142135623730951;             // std::numbers::sqrt2
  const double sqrt_2pi = ::sqrt(2.0 * 3.141592653589793);  // std::sqrt(2.0 * std::numbers::pi)
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    const double x = z[k], dk = d[k];
    switch (f) {
      case ActivationFunction::kRelu:
        d[k] = z[k] > 0 ? d[k] : E(0);
        break;
      case ActivationFunction::kTanh: {
        const double t = ::tanh(x);
        d[k] = static_cast<E>(mul(dk, sub(1.0, mul(t, t))));
        break;
      }
      case ActivationFunction::kGelu: {  // Φ(z) + z·φ(z)
        const double cdf = mul(0.5, add(1.0, ::erf(div(x, kSqrt2))));
        const double pdf = div(::exp(mul(mul(-0.5, x), x)), sqrt_2pi);
        d[k] = static_cast<E>(mul(dk, add(cdf, mul(x, pdf))));
        break;
      }
      case ActivationFunction::kSilu: {
        const double sig = div(1.0, add(1.0, ::exp(-x)));
        d[k] = static_cast<E>(mul(mul(dk, sig), add(1.0, mul(x, sub(1.0, sig)))));
        break;
      }
      default:
        break;
    }
  }
}

// Softmax rows, one block per row: y = exp(z − m)/Σ, d = y·(dy − Σ dy·y), in double.
template <typename E>
__global__ void softmax_backward_kernel(E* d, const E* z, int64_t row) {
  __shared__ double shared[32];
  const int64_t o = static_cast<int64_t>(blockIdx.x) * row;
  double m = z[o];
  for (int64_t k = threadIdx.x; k < row; k += blockDim.x) m = max_e(m, double(z[o + k]));
  m = block_max(m, shared);
  double part = 0;
  for (int64_t k = threadIdx.x; k < row; k += blockDim.x) {
    part = add(part, ::exp(sub(double(z[o + k]), m)));
  }
  const double sum = block_sum(part, shared);
  part = 0;
  for (int64_t k = threadIdx.x; k < row; k += blockDim.x) {
    part = add(part, mul(double(d[o + k]), div(::exp(sub(double(z[o + k]), m)), sum)));
  }
  const double dot = block_sum(part, shared);
  for (int64_t k = threadIdx.x; k < row; k += blockDim.x) {
    const double y = div(::exp(sub(double(z[o + k]), m)), sum);
    d[o + k] = static_cast<E>(mul(y, sub(double(d[o + k]), dot)));
  }
}

void activation_backward_cuda(const ActivationBackward& a) {
  const int64_t id = a.g->device_id, n = a.g->box.num_elements();
  cudaStream_t s = cuda::enter_device(id);
  if (a.function == ActivationFunction::kLinear || n == 0) return;
  dispatch_float(a.dtype, "activation_backward", id, [&]<typename E>(E*) {
    if (a.function == ActivationFunction::kSoftmax) {
      if (a.row <= 0 || n / a.row == 0) return;
      softmax_backward_kernel<E><<<static_cast<unsigned>(n / a.row), kThreads, 0, s>>>(
          device_ptr<E>(a.g), device_ptr<E>(a.z), a.row);
    } else {
      activation_backward_kernel<E>
          <<<grid_for(n), kThreads, 0, s>>>(device_ptr<E>(a.g), device_ptr<E>(a.z), n, a.function);
    }
  });
  cuda::check_launch("activation_backward", id);
}

// ---- Gated activation ----

template <typename E>
__global__ void gated_backward_kernel(E* dg, E* du, const E* g, const E* u, const E* dy, int64_t n,
                                      bool silu) {
  const E c = static_cast<E>(0.7978845608028654), a = static_cast<E>(0.044715);
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    const E x = g[k], d = dy[k], uk = u[k];
    if (silu) {
      const E sig = div(E(1), add(E(1), exp_e(-x)));
      const E si = mul(x, sig);
      du[k] = mul(d, si);
      dg[k] = mul(mul(d, uk), add(sig, mul(si, sub(E(1), sig))));
    } else {
      const E t = tanh_e(mul(c, add(x, mul(mul(mul(a, x), x), x))));
      const E gelu = mul(mul(E(0.5), x), add(E(1), t));
      const E dgelu =
          add(mul(E(0.5), add(E(1), t)), mul(mul(mul(mul(E(0.5), x), sub(E(1), mul(t, t))), c),
                                             add(E(1), mul(mul(mul(E(3), a), x), x))));
      du[k] = mul(d, gelu);
      dg[k] = mul(mul(d, uk), dgelu);
    }
  }
}

void gated_backward_cuda(const GatedBackward& a) {
  const int64_t id = a.dg->device_id, n = a.dg->box.num_elements();
  cudaStream_t s = cuda::enter_device(id);
  if (n == 0) return;
  dispatch_float(a.dtype, "gated_backward", id, [&]<typename E>(E*) {
    gated_backward_kernel<E><<<grid_for(n), kThreads, 0, s>>>(
        device_ptr<E>(a.dg), device_ptr<E>(a.du), device_ptr<E>(a.g), device_ptr<E>(a.u),
        device_ptr<E>(a.dy), n, a.function == GateFunction::kSilu);
  });
  cuda::check_launch("gated_backward", id);
}

// ---- Soft-capping ----

template <typename E>
__global__ void soft_cap_backward_kernel(E* dy, const E* y, int64_t n, E cap) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    const E t = div(y[k], cap);
    dy[k] = mul(dy[k], sub(E(1), mul(t, t)));
  }
}

void soft_cap_backward_shard_cuda(const SoftCapBackwardShard& a) {
  const int64_t id = a.dy->device_id, n = a.dy->box.num_elements();
  cudaStream_t s = cuda::enter_device(id);
  if (n == 0) return;
  dispatch_float(a.dtype, "soft_cap_backward_shard", id, [&]<typename E>(E*) {
    soft_cap_backward_kernel<E><<<grid_for(n), kThreads, 0, s>>>(
        device_ptr<E>(a.dy), device_ptr<E>(a.y), n, static_cast<E>(a.cap));
  });
  cuda::check_launch("soft_cap_backward_shard", id);
}

// ---- Embedding scatter-add ----

// out[row, c] = 0 + Σ dy[t, c] over the tokens t of `row` (tokens[starts[row] .. starts[row+1]),
// in token order).
template <typename E>
__global__ void scatter_rows_kernel(E* out, const E* dy, const int64_t* starts,
                                    const int64_t* tokens, int64_t rows, int64_t cols) {
  const int64_t total = rows * cols;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = k / cols, c = k % cols;
    E acc = 0;
    for (int64_t i = starts[row]; i < starts[row + 1]; ++i)
      acc = add(acc, dy[tokens[i] * cols + c]);
    out[k] = acc;
  }
}

void embedding_scatter_add_cuda(const EmbeddingScatterAdd& a) {
  Array::Shard& p = *a.table_grad;
  const int64_t id = p.device_id;
  cudaStream_t s = cuda::enter_device(id);
  const int64_t r0 = p.box.offset[0], rows = p.box.shape[0], cols = p.box.shape[1];
  const int64_t n = a.tokens->box.num_elements();
  if (rows * cols == 0) return;
  if (a.id_dtype != DType::kI32 && a.id_dtype != DType::kI64) {
    throw ValueError("embedding_scatter_add on gpu:" + std::to_string(id) +
                     " needs I32 or I64 ids, got " + std::string(dtype_name(a.id_dtype)));
  }
  // The ids on the host, the tokens of each row of the block in token order (CSR).
  std::vector<int64_t> ids(static_cast<size_t>(n));
  if (n > 0) {
    if (a.id_dtype == DType::kI64) {
      cuda::check(cudaMemcpyAsync(ids.data(), a.tokens->buffer.data(), ids.size() * 8,
                                  cudaMemcpyDeviceToHost, s),
                  "embedding_scatter_add ids download", id);
      cuda::check(cudaStreamSynchronize(s), "embedding_scatter_add sync", id);
    } else {
      std::vector<int32_t> narrow(static_cast<size_t>(n));
      cuda::check(cudaMemcpyAsync(narrow.data(), a.tokens->buffer.data(), narrow.size() * 4,
                                  cudaMemcpyDeviceToHost, s),
                  "embedding_scatter_add ids download", id);
      cuda::check(cudaStreamSynchronize(s), "embedding_scatter_add sync", id);
      for (size_t i = 0; i < narrow.size(); ++i) ids[i] = narrow[i];
    }
  }
  std::vector<int64_t> csr(static_cast<size_t>(rows + 1) + static_cast<size_t>(n), 0);
  int64_t* starts = csr.data();
  int64_t* tokens = csr.data() + rows + 1;
  for (int64_t id_t : ids) {
    if (id_t >= r0 && id_t < r0 + rows) ++starts[id_t - r0 + 1];
  }
  for (int64_t r = 0; r < rows; ++r) starts[r + 1] += starts[r];
  std::vector<int64_t> fill(starts, starts + rows);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t row = ids[static_cast<size_t>(t)];
    if (row >= r0 && row < r0 + rows) tokens[fill[static_cast<size_t>(row - r0)]++] = t;
  }
  const size_t used = static_cast<size_t>(rows + 1 + starts[rows]);
  StreamScratch scratch(used * sizeof(int64_t), s, "embedding_scatter_add scratch", id);
  cuda::check(cudaMemcpyAsync(scratch.as<int64_t>(), csr.data(), used * sizeof(int64_t),
                              cudaMemcpyHostToDevice, s),
              "embedding_scatter_add upload", id);
  dispatch_float(a.dtype, "embedding_scatter_add", id, [&]<typename E>(E*) {
    scatter_rows_kernel<E><<<grid_for(rows * cols), kThreads, 0, s>>>(
        device_ptr<E>(&p), device_ptr<E>(a.dy), scratch.as<int64_t>(),
        scratch.as<int64_t>() + rows + 1, rows, cols);
  });
  cuda::check_launch("embedding_scatter_add", id);
  // `csr` is pageable host memory read by the copy: it stays alive until the stream has run it.
  cuda::check(cudaStreamSynchronize(s), "embedding_scatter_add sync", id);
}

}  // namespace
}  // namespace meshlayout::layer_cuda

namespace meshlayout::internal_cuda {

void register_cuda_layer_backward_kernels() {
  rms_norm_backward.define(DeviceKind::kCuda, &layer_cuda::rms_norm_backward_cuda);
  layer_norm_backward.define(DeviceKind::kCuda, &layer_cuda::layer_norm_backward_cuda);
  activation_backward.define(DeviceKind::kCuda, &layer_cuda::activation_backward_cuda);
  gated_backward.define(DeviceKind::kCuda, &layer_cuda::gated_backward_cuda);
  soft_cap_backward_shard.define(DeviceKind::kCuda, &layer_cuda::soft_cap_backward_shard_cuda);
  embedding_scatter_add.define(DeviceKind::kCuda, &layer_cuda::embedding_scatter_add_cuda);
}

}  // namespace meshlayout::internal_cuda
