// layer_kernels.cu — the CUDA implementations of the layer kernels a Llama-family forward needs
// (DESIGN "Compute and memory seam", CUDA): rms_norm_forward and layer_norm_forward
// (kernels/normalization.h), activation_forward (kernels/activation.h), gated_forward
// (kernels/gated_activation.h), soft_cap_shard (kernels/soft_cap.h), embedding_lookup and
// embedding_find_bad_id (kernels/embedding.h); register_cuda_layer_kernels() also registers
// the ops of attention_kernels.cu, attention_backward_kernels.cu, cross_entropy_kernels.cu and
// layer_backward_kernels.cu.
//
// Each op computes what its CPU implementation (kernels/cpu/<family>.cc) computes, in the same
// types and, where the CPU runs a fixed order (RMS's eight E lanes, element-wise formulas), the
// same operation order without FMA contraction, so element-wise results are the CPU's bits and
// reductions differ only by their summation order (layer_kernel_util.cuh). Every kernel runs on
// the shard's device stream (runtime/cuda/cuda_context.h); embedding_find_bad_id writes host
// values and synchronizes the stream first.
#include <cstring>
#include <string>

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

// One warp per row: lanes 0..7 sum the squares of elements j, j + 8, … of the whole blocks of
// eight in E (the CPU's eight lanes); every lane then adds the tail in double and the eight lane
// sums in order (the same values, so the same inverse everywhere) and writes its elements of
// y = x · E(1/sqrt(mean + epsilon)) · scale.
template <typename E>
__device__ void rms_norm_row(E* out, const E* v, const E* g, int64_t row, double epsilon,
                             int lane) {
  const int64_t whole = row / 8 * 8;
  E lane_sum = 0;
  if (lane < 8) {
#pragma unroll 4
    for (int64_t k = lane; k < whole; k += 8) lane_sum = add(lane_sum, mul(v[k], v[k]));
  }
  double squares = 0;
  for (int64_t k = whole; k < row; ++k) squares = add(squares, mul(double(v[k]), double(v[k])));
  for (int j = 0; j < 8; ++j) {
    squares = add(squares, double(__shfl_sync(0xffffffffu, lane_sum, j)));
  }
  const E inv = static_cast<E>(div(1.0, ::sqrt(add(div(squares, double(row)), epsilon))));
  for (int64_t k = lane; k < row; k += 32) out[k] = mul(mul(v[k], inv), g[k]);
  __syncwarp();
}

template <typename E>
__global__ void rms_norm_kernel(E* y, const E* x, const E* g, int64_t rows, int64_t row,
                                double epsilon) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t{gridDim.x} * blockDim.x) >> 5;
  // r is the same on a warp's lanes: whole warps loop and shuffle together.
  for (int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; r < rows;
       r += warps) {
    rms_norm_row(y + r * row, x + r * row, g, row, epsilon, lane);
  }
}

void rms_norm_forward_cuda(const RmsNormForward& a) {
  const int64_t id = a.y->device_id, row = a.features, n = a.y->box.num_elements();
  cudaStream_t s = cuda::enter_device(id);
  if (row <= 0 || n == 0) return;
  const int64_t rows = n / row;
  dispatch_float(a.dtype, "rms_norm_forward", id, [&]<typename E>(E*) {
    rms_norm_kernel<E><<<grid_for(rows * 32), kThreads, 0, s>>>(
        device_ptr<E>(a.y), device_ptr<E>(a.x), device_ptr<E>(a.scale), rows, row, a.epsilon);
  });
  cuda::check_launch("rms_norm_forward", id);
}

// ---- LayerNormalization ----

// One block per row: mean and biased variance in double (block sums), then
// E(((x − mean)·r) [·gamma] [+ beta]) in double, r = 1/sqrt(var + epsilon).
template <typename E>
__global__ void layer_norm_kernel(E* y, const E* g, const E* b, int64_t row, double epsilon) {
  __shared__ double shared[32];
  E* v = y + static_cast<int64_t>(blockIdx.x) * row;
  double part = 0;
  for (int64_t k = threadIdx.x; k < row; k += blockDim.x) part += double(v[k]);
  const double mean = div(block_sum(part, shared), double(row));
  part = 0;
  for (int64_t k = threadIdx.x; k < row; k += blockDim.x) {
    const double d = sub(double(v[k]), mean);
    part = add(part, mul(d, d));
  }
  const double var = div(block_sum(part, shared), double(row));
  const double inv = div(1.0, ::sqrt(add(var, epsilon)));
  for (int64_t k = threadIdx.x; k < row; k += blockDim.x) {
    double out = mul(sub(double(v[k]), mean), inv);
    if (g) out = mul(out, double(g[k]));
    if (b) out = add(out, double(b[k]));
    v[k] = static_cast<E>(out);
  }
}

void layer_norm_forward_cuda(const LayerNormForward& a) {
  const int64_t id = a.y->device_id, row = a.features, n = a.y->box.num_elements();
  cudaStream_t s = cuda::enter_device(id);
  if (row <= 0 || n == 0) return;
  const int64_t rows = n / row;
  dispatch_float(a.dtype, "layer_norm_forward", id, [&]<typename E>(E*) {
    layer_norm_kernel<E><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
        device_ptr<E>(a.y), device_ptr<E>(a.gamma), device_ptr<E>(a.beta), row, a.epsilon);
  });
  cuda::check_launch("layer_norm_forward", id);
}

// ---- Activations ----

template <typename E>
__global__ void activation_kernel(E* p, int64_t n, ActivationFunction f) {
  constexpr double kSqrt2 = 1.4142135623730951;  // std::sqrt(2.0)
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    const E x = p[k];
    switch (f) {
      case ActivationFunction::kRelu:
        p[k] = x > 0 ? x : E(0);
        break;
      case ActivationFunction::kTanh:
        p[k] = tanh_e(x);
        break;
      case ActivationFunction::kGelu:  // exact, in double
        p[k] = static_cast<E>(mul(mul(0.5, double(x)), add(1.0, ::erf(div(double(x), kSqrt2)))));
        break;
      case ActivationFunction::kSilu:  // x / (1 + exp(−x)) in E
        p[k] = div(x, add(E(1), exp_e(-x)));
        break;
      default:
        break;
    }
  }
}

// Softmax over rows of `row`, one block per row: m = max (E), v = E(exp(v − m)), sum of the
// rounded values in double, v = E(v / sum).
template <typename E>
__global__ void softmax_kernel(E* p, int64_t row) {
  __shared__ double shared_d[32];
  __shared__ E shared_e[32];
  E* v = p + static_cast<int64_t>(blockIdx.x) * row;
  E m = v[0];
  for (int64_t k = threadIdx.x; k < row; k += blockDim.x) m = v[k] > m ? v[k] : m;
  m = block_max(m, shared_e);
  double part = 0;
  for (int64_t k = threadIdx.x; k < row; k += blockDim.x) {
    const E e = exp_e(sub(v[k], m));
    v[k] = e;
    part += double(e);
  }
  const double sum = block_sum(part, shared_d);
  for (int64_t k = threadIdx.x; k < row; k += blockDim.x) {
    v[k] = static_cast<E>(div(double(v[k]), sum));
  }
}

void activation_forward_cuda(const ActivationForward& a) {
  const int64_t id = a.y->device_id, n = a.y->box.num_elements();
  cudaStream_t s = cuda::enter_device(id);
  if (a.function == ActivationFunction::kLinear || n == 0) return;
  dispatch_float(a.dtype, "activation_forward", id, [&]<typename E>(E*) {
    if (a.function == ActivationFunction::kSoftmax) {
      if (a.row <= 0 || n / a.row == 0) return;
      softmax_kernel<E>
          <<<static_cast<unsigned>(n / a.row), kThreads, 0, s>>>(device_ptr<E>(a.y), a.row);
    } else {
      activation_kernel<E><<<grid_for(n), kThreads, 0, s>>>(device_ptr<E>(a.y), n, a.function);
    }
  });
  cuda::check_launch("activation_forward", id);
}

// ---- Gated activation (SwiGLU, GeGLU) ----

template <typename E>
__global__ void gated_kernel(E* y, const E* g, const E* u, int64_t n, bool silu) {
  const E c = static_cast<E>(0.7978845608028654), a = static_cast<E>(0.044715);
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    const E x = g[k];
    if (silu) {  // g · σ(g) · u, σ = 1/(1 + exp(−g))
      const E sig = div(E(1), add(E(1), exp_e(-x)));
      y[k] = mul(mul(x, sig), u[k]);
    } else {  // ½·g·(1 + tanh(c·(g + a·g³)))·u
      const E t = tanh_e(mul(c, add(x, mul(mul(mul(a, x), x), x))));
      y[k] = mul(mul(mul(E(0.5), x), add(E(1), t)), u[k]);
    }
  }
}

void gated_forward_cuda(const GatedForward& a) {
  const int64_t id = a.y->device_id, n = a.y->box.num_elements();
  cudaStream_t s = cuda::enter_device(id);
  if (n == 0) return;
  dispatch_float(a.dtype, "gated_forward", id, [&]<typename E>(E*) {
    gated_kernel<E><<<grid_for(n), kThreads, 0, s>>>(device_ptr<E>(a.y), device_ptr<E>(a.g),
                                                     device_ptr<E>(a.u), n,
                                                     a.function == GateFunction::kSilu);
  });
  cuda::check_launch("gated_forward", id);
}

// ---- Soft-capping ----

template <typename E>
__global__ void soft_cap_kernel(E* x, int64_t n, E cap) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    x[k] = mul(cap, tanh_e(div(x[k], cap)));
  }
}

void soft_cap_shard_cuda(const SoftCapShard& a) {
  const int64_t id = a.shard->device_id, n = a.shard->box.num_elements();
  cudaStream_t s = cuda::enter_device(id);
  if (n == 0) return;
  dispatch_float(a.dtype, "soft_cap_shard", id, [&]<typename E>(E*) {
    soft_cap_kernel<E>
        <<<grid_for(n), kThreads, 0, s>>>(device_ptr<E>(a.shard), n, static_cast<E>(a.cap));
  });
  cuda::check_launch("soft_cap_shard", id);
}

// ---- Embedding ----

template <typename I>
__global__ void find_bad_id_kernel(const I* ids, int64_t n, int64_t input_dim,
                                   unsigned long long* first) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t id = static_cast<int64_t>(ids[k]);
    if (id < 0 || id >= input_dim) atomicMin(first, static_cast<unsigned long long>(k));
  }
}

// found[1] = the id at index found[0] (when one was found).
template <typename I>
__global__ void read_bad_id_kernel(const I* ids, unsigned long long* found) {
  if (found[0] != ~0ull) {
    found[1] = static_cast<unsigned long long>(static_cast<int64_t>(ids[found[0]]));
  }
}

// Global row-major index of local element k of `box` in a tensor of `shape` (as the CPU's).
int64_t global_index(const Box& box, const Shape& shape, int64_t k) {
  const int rank = static_cast<int>(shape.size());
  Shape coords(static_cast<size_t>(rank));
  for (int d = rank - 1; d >= 0; --d) {
    const auto i = static_cast<size_t>(d);
    coords[i] = box.offset[i] + (box.shape[i] == 0 ? 0 : k % box.shape[i]);
    if (box.shape[i] != 0) k /= box.shape[i];
  }
  int64_t g = 0;
  for (int d = 0; d < rank; ++d)
    g = g * shape[static_cast<size_t>(d)] + coords[static_cast<size_t>(d)];
  return g;
}

void embedding_find_bad_id_cuda(const EmbeddingFindBadId& a) {
  const Array::Shard& t = *a.tokens;
  const int64_t id = t.device_id, n = t.box.num_elements();
  cudaStream_t s = cuda::enter_device(id);
  if (n == 0) return;
  if (a.id_dtype != DType::kI32 && a.id_dtype != DType::kI64) {
    throw ValueError("embedding_find_bad_id on gpu:" + std::to_string(id) +
                     " needs I32 or I64 ids, got " + std::string(dtype_name(a.id_dtype)));
  }
  StreamScratch scratch(2 * sizeof(unsigned long long), s, "embedding_find_bad_id scratch", id);
  auto* found = scratch.as<unsigned long long>();
  cuda::check(cudaMemsetAsync(found, 0xFF, 2 * sizeof(unsigned long long), s),
              "embedding_find_bad_id memset", id);
  if (a.id_dtype == DType::kI32) {
    find_bad_id_kernel<<<grid_for(n), kThreads, 0, s>>>(device_ptr<int32_t>(&t), n, a.input_dim,
                                                        found);
    read_bad_id_kernel<<<1, 1, 0, s>>>(device_ptr<int32_t>(&t), found);
  } else {
    find_bad_id_kernel<<<grid_for(n), kThreads, 0, s>>>(device_ptr<int64_t>(&t), n, a.input_dim,
                                                        found);
    read_bad_id_kernel<<<1, 1, 0, s>>>(device_ptr<int64_t>(&t), found);
  }
  cuda::check_launch("embedding_find_bad_id", id);
  unsigned long long host[2] = {0, 0};
  cuda::check(cudaMemcpyAsync(host, found, sizeof host, cudaMemcpyDeviceToHost, s),
              "embedding_find_bad_id download", id);
  cuda::check(cudaStreamSynchronize(s), "embedding_find_bad_id sync", id);
  if (host[0] == ~0ull) return;
  const auto k = static_cast<int64_t>(host[0]);
  *a.bad_index = global_index(t.box, *a.shape, k);
  int64_t bad = 0;
  std::memcpy(&bad, &host[1], sizeof bad);
  *a.bad_id = bad;
}

// out[t, :] = the table row of token t's id when the shard holds it, else zeros; W: a word of
// the element size, `cols` words per row.
template <typename I, typename W>
__global__ void lookup_kernel(const I* ids, const W* table, W* out, int64_t n, int64_t cols,
                              int64_t r0, int64_t r1) {
  const int64_t total = n * cols;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = k / cols, c = k % cols;
    const int64_t row = static_cast<int64_t>(ids[t]);
    out[k] = row >= r0 && row < r1 ? table[(row - r0) * cols + c] : W{};
  }
}

template <typename I>
void launch_lookup(const EmbeddingLookup& a, cudaStream_t s, int64_t n, int64_t cols, int64_t r0,
                   int64_t r1) {
  const I* ids = device_ptr<I>(a.tokens);
  const std::byte* table = a.table->buffer.data();
  std::byte* out = a.out->buffer.data();
  const size_t es = a.element_size;
  auto run = [&]<typename W>(W*, int64_t words) {
    lookup_kernel<I, W><<<grid_for(n * words), kThreads, 0, s>>>(
        ids, reinterpret_cast<const W*>(table), reinterpret_cast<W*>(out), n, words, r0, r1);
  };
  if (es == 8) {
    run(static_cast<uint64_t*>(nullptr), cols);
  } else if (es == 4) {
    run(static_cast<uint32_t*>(nullptr), cols);
  } else if (es == 2) {
    run(static_cast<uint16_t*>(nullptr), cols);
  } else {
    run(static_cast<uint8_t*>(nullptr), cols * static_cast<int64_t>(es));
  }
}

void embedding_lookup_cuda(const EmbeddingLookup& a) {
  const int64_t id = a.out->device_id;
  cudaStream_t s = cuda::enter_device(id);
  const int64_t r0 = a.table->box.offset[0], r1 = r0 + a.table->box.shape[0];
  const int64_t cols = a.table->box.shape[1];
  const int64_t n = a.tokens->box.num_elements();
  if (cols <= 0 || n == 0) return;
  if (a.id_dtype == DType::kI32) {
    launch_lookup<int32_t>(a, s, n, cols, r0, r1);
  } else if (a.id_dtype == DType::kI64) {
    launch_lookup<int64_t>(a, s, n, cols, r0, r1);
  } else {
    throw ValueError("embedding_lookup on gpu:" + std::to_string(id) +
                     " needs I32 or I64 ids, got " + std::string(dtype_name(a.id_dtype)));
  }
  cuda::check_launch("embedding_lookup", id);
  const size_t bytes = static_cast<size_t>(n * cols) * a.element_size;
  const int gpu = cuda::physical_gpu_of(id);
  for (Array::Shard* r : a.replicas) {
    if (cuda::physical_gpu_of(r->device_id) == gpu) {  // the same stream: ordered
      cuda::check(cudaMemcpyAsync(r->buffer.data(), a.out->buffer.data(), bytes,
                                  cudaMemcpyDeviceToDevice, s),
                  "embedding_lookup replica copy", r->device_id);
    } else {  // another GPU's stream: its earlier work first, the copy finished before return
      cuda::synchronize_device(r->device_id);
      cuda::enter_device(id);
      cuda::check(cudaMemcpyPeerAsync(r->buffer.data(), cuda::physical_gpu_of(r->device_id),
                                      a.out->buffer.data(), gpu, bytes, s),
                  "embedding_lookup replica copy", r->device_id);
      cuda::check(cudaStreamSynchronize(s), "embedding_lookup replica sync", id);
    }
  }
}

}  // namespace
}  // namespace meshlayout::layer_cuda

namespace meshlayout::internal_cuda {

void register_cuda_layer_kernels() {
  rms_norm_forward.define(DeviceKind::kCuda, &layer_cuda::rms_norm_forward_cuda);
  layer_norm_forward.define(DeviceKind::kCuda, &layer_cuda::layer_norm_forward_cuda);
  activation_forward.define(DeviceKind::kCuda, &layer_cuda::activation_forward_cuda);
  gated_forward.define(DeviceKind::kCuda, &layer_cuda::gated_forward_cuda);
  soft_cap_shard.define(DeviceKind::kCuda, &layer_cuda::soft_cap_shard_cuda);
  embedding_find_bad_id.define(DeviceKind::kCuda, &layer_cuda::embedding_find_bad_id_cuda);
  embedding_lookup.define(DeviceKind::kCuda, &layer_cuda::embedding_lookup_cuda);
  register_cuda_attention_kernels();
  register_cuda_attention_shard_kernels();
  register_cuda_attention_backward_kernels();
  register_cuda_cross_entropy_kernels();
  register_cuda_layer_backward_kernels();
}

}  // namespace meshlayout::internal_cuda
