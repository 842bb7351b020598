// linear_kernels.cu — the CUDA implementations of kernels/matmul.h's matmul_rows (cuBLAS),
// add_into and sum_piece, bias.h's add_bias, elementwise.h's combine_shards and
// normalization.h's scale_elements; permute_kernels.cu adds transpose_box, permute_shard and
// concatenate_shards. register_cuda_linear_kernels() defines them all.
//
// matmul_rows: one cuBLAS handle per physical GPU, created on first use (thread-safe), bound
// to the GPU's stream and used under a mutex (a handle must not be used by two threads at
// once). Row-major products are column-major ones with the operands swapped:
// outᵀ (n × rows) = wᵀ (n × k) · xᵀ (k × rows). F32 runs cublasSgemm in CUBLAS_DEFAULT_MATH
// (no TF32), F64 cublasDgemm; BF16 operands and output (beyond the CPU op, which has F32 and
// F64) run cublasGemmEx with F32 accumulation (CUBLAS_COMPUTE_32F). k = 0 writes zeros.
// The element-wise ops are exact (the CPU's operations, rounded the same way); sum_piece adds
// each element's sources in the CPU's order, so it is bit-identical too.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <optional>
#include <vector>

#include "meshlayout/kernels/bias.h"
#include "meshlayout/kernels/cuda/register.h"
#include "meshlayout/kernels/cuda/shard_kernel_util.cuh"
#include "meshlayout/kernels/elementwise.h"
#include "meshlayout/kernels/matmul.h"
#include "meshlayout/kernels/normalization.h"

namespace meshlayout::internal_cuda {
void register_cuda_permute_kernels();  // permute_kernels.cu
}  // namespace meshlayout::internal_cuda

namespace meshlayout::cuda_kernels {
namespace {

// ---- cuBLAS ----

constexpr int kMaxGpus = 64;

struct Blas {
  std::array<cublasHandle_t, kMaxGpus> handles{};
  std::array<std::once_flag, kMaxGpus> once;
  std::array<std::mutex, kMaxGpus> mutexes;
};

Blas& blas() {
  static Blas* const b = new Blas;  // never destroyed, as the streams
  return *b;
}

void check_blas(cublasStatus_t status, std::string_view what, int64_t id) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const std::string message =
      concat({"cuBLAS error on gpu:", std::to_string(id), " in ", what, ": ",
              cublasGetStatusName(status), ": ", cublasGetStatusString(status)});
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw ResourceExhaustedError(message);
  throw InternalError(message);
}

// The handle of gpu:id's physical GPU (current: the caller entered the device).
cublasHandle_t handle_of(int64_t id, cudaStream_t s) {
  const size_t gpu = static_cast<size_t>(cuda::physical_gpu_of(id));
  Blas& b = blas();
  std::call_once(b.once[gpu], [&] {
    cublasHandle_t h = nullptr;
    check_blas(cublasCreate(&h), "cublasCreate", id);
    check_blas(cublasSetStream(h, s), "cublasSetStream", id);
    // Full F32 precision: no TF32, no reduced-precision split-K reductions.
    check_blas(cublasSetMathMode(
                   h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
               "cublasSetMathMode", id);
    b.handles[gpu] = h;
  });
  return b.handles[gpu];
}

int blas_int(int64_t v, std::string_view what) {
  if (v < 0 || v > INT_MAX) {
    throw ValueError(
        concat({"matmul_rows on CUDA: ", what, " = ", std::to_string(v), " exceeds cuBLAS's int"}));
  }
  return static_cast<int>(v);
}

void matmul_rows_cuda(const MatmulRows& c) {
  if (c.dtype != DType::kF32 && c.dtype != DType::kF64 && c.dtype != DType::kBF16) {
    unsupported_dtype("matmul_rows", c.dtype, "F32, F64 or BF16");
  }
  if (c.rows <= 0 || c.n <= 0) return;
  const int64_t id = c.out->device_id;
  cudaStream_t s = cuda::enter_device(id);
  const size_t elem = dtype_size(c.dtype);
  std::byte* out = c.out->buffer.data() + static_cast<size_t>(c.row * c.n) * elem;
  const size_t out_bytes = static_cast<size_t>(c.rows * c.n) * elem;
  if (c.k == 0) {
    cuda::check(cudaMemsetAsync(out, 0, out_bytes, s), "matmul_rows (k = 0)", id);
  } else {
    const int m = blas_int(c.n, "n"), n = blas_int(c.rows, "rows"), k = blas_int(c.k, "k");
    const std::byte* x = c.x->buffer.data() + static_cast<size_t>(c.row * c.k) * elem;
    const std::byte* w = c.w->buffer.data();
    cublasHandle_t h = handle_of(id, s);
    std::lock_guard<std::mutex> lock(
        blas().mutexes[static_cast<size_t>(cuda::physical_gpu_of(id))]);
    if (c.dtype == DType::kF32) {
      const float one = 1, zero = 0;
      check_blas(
          cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, reinterpret_cast<const float*>(w),
                      m, reinterpret_cast<const float*>(x), k, &zero, reinterpret_cast<float*>(out),
                      m),
          "matmul_rows (cublasSgemm)", id);
    } else if (c.dtype == DType::kF64) {
      const double one = 1, zero = 0;
      check_blas(
          cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one,
                      reinterpret_cast<const double*>(w), m, reinterpret_cast<const double*>(x), k,
                      &zero, reinterpret_cast<double*>(out), m),
          "matmul_rows (cublasDgemm)", id);
    } else {
      const float one = 1, zero = 0;
      check_blas(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, w, CUDA_R_16BF, m, x,
                              CUDA_R_16BF, k, &zero, out, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 "matmul_rows (cublasGemmEx BF16)", id);
    }
  }
  for (Array::Shard* r : c.replicas) {
    std::byte* to = r->buffer.data() + static_cast<size_t>(c.row * c.n) * elem;
    cuda::check(cudaMemcpyAsync(to, out, out_bytes, cudaMemcpyDefault, s),
                "matmul_rows (replica copy)", id);
    if (cuda::physical_gpu_of(r->device_id) != cuda::physical_gpu_of(id)) {
      wait_for_device(cuda::stream_of(r->device_id), r->device_id, id);
      cuda::enter_device(id);
    }
  }
}

// ---- Element-wise ----

template <typename T>
__device__ __forceinline__ T add(T a, T b) {
  if constexpr (sizeof(T) == 4) {
    return __fadd_rn(a, b);
  } else {
    return __dadd_rn(a, b);
  }
}
template <typename T>
__device__ __forceinline__ T mul(T a, T b) {
  if constexpr (sizeof(T) == 4) {
    return __fmul_rn(a, b);
  } else {
    return __dmul_rn(a, b);
  }
}

#define MESHLAYOUT_GRID_LOOP(i, n)                                          \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

template <typename T>
__global__ void add_into_kernel(T* d, const T* a, int64_t n) {
  MESHLAYOUT_GRID_LOOP(i, n) { d[i] = add(d[i], a[i]); }
}

template <typename T>
__global__ void multiply_into_kernel(T* d, const T* a, int64_t n) {
  MESHLAYOUT_GRID_LOOP(i, n) { d[i] = mul(d[i], a[i]); }
}

template <typename T>
__global__ void add_bias_kernel(T* y, const T* b, int64_t inner, int64_t n) {
  MESHLAYOUT_GRID_LOOP(i, n) { y[i] = add(y[i], b[i % inner]); }
}

template <typename T>
__global__ void scale_elements_kernel(T* p, T factor, int64_t n) {
  MESHLAYOUT_GRID_LOOP(i, n) { p[i] = mul(p[i], factor); }
}

void add_into_cuda(const AddInto& a) {
  if (a.n <= 0) return;
  const int64_t id = a.dst->device_id;
  cudaStream_t s = cuda::enter_device(id);
  dispatch_f32_f64("add_into", a.dtype, [&]<typename T>(T* /*tag*/) {
    add_into_kernel<T>
        <<<grid_for(a.n), kThreads, 0, s>>>(elements<T>(a.dst), elements<T>(a.src), a.n);
  });
  cuda::check_launch("add_into", id);
}

void combine_shards_cuda(const CombineShards& a) {
  const int64_t n = a.y->box.num_elements();
  if (n == 0) return;
  const int64_t id = a.y->device_id;
  cudaStream_t s = cuda::enter_device(id);
  dispatch_f32_f64("combine_shards", a.dtype, [&]<typename T>(T* /*tag*/) {
    if (a.function == Binary::kAdd) {
      add_into_kernel<T><<<grid_for(n), kThreads, 0, s>>>(elements<T>(a.y), elements<T>(a.x), n);
    } else {
      multiply_into_kernel<T>
          <<<grid_for(n), kThreads, 0, s>>>(elements<T>(a.y), elements<T>(a.x), n);
    }
  });
  cuda::check_launch("combine_shards", id);
}

void add_bias_cuda(const AddBias& a) {
  if (a.inner == 0) return;
  const int64_t n = a.y->box.num_elements() / a.inner * a.inner;
  if (n == 0) return;
  const int64_t id = a.y->device_id;
  cudaStream_t s = cuda::enter_device(id);
  dispatch_f32_f64("add_bias", a.dtype, [&]<typename T>(T* /*tag*/) {
    add_bias_kernel<T>
        <<<grid_for(n), kThreads, 0, s>>>(elements<T>(a.y), elements<T>(a.bias), a.inner, n);
  });
  cuda::check_launch("add_bias", id);
}

void scale_elements_cuda(const ScaleElements& a) {
  const int64_t n = a.a->box.num_elements();
  if (n == 0) return;
  const int64_t id = a.a->device_id;
  cudaStream_t s = cuda::enter_device(id);
  dispatch_f32_f64("scale_elements", a.dtype, [&]<typename T>(T* /*tag*/) {
    scale_elements_kernel<T>
        <<<grid_for(n), kThreads, 0, s>>>(elements<T>(a.a), static_cast<T>(a.factor), n);
  });
  cuda::check_launch("scale_elements", id);
}

// ---- sum_piece ----

constexpr int kPieceRank = 8;
constexpr int kInlineSources = 16;
constexpr int kInlineAlso = 8;

// A source of the sum: the address of its element at the region's origin and its element
// strides along the (merged) region dimensions.
struct SourceRef {
  const void* base;
  int64_t stride[kPieceRank];
};

struct PieceArgs {
  void* dst;  // at the region's origin
  int64_t dst_stride[kPieceRank];
  int rank;
  int64_t shape[kPieceRank];
  int terms, sources, also_count;
  // Inline when they fit, else in device scratch (external_*).
  SourceRef refs[kInlineSources];
  int term_size[kInlineSources];
  void* also[kInlineAlso];
  const SourceRef* external_refs;
  const int* external_term_size;
  void* const* external_also;
};

template <typename T>
__global__ void sum_piece_kernel(const __grid_constant__ PieceArgs a, int64_t total) {
  const SourceRef* refs = a.external_refs ? a.external_refs : a.refs;
  const int* term_size = a.external_term_size ? a.external_term_size : a.term_size;
  void* const* also = a.external_also ? a.external_also : a.also;
  MESHLAYOUT_GRID_LOOP(i, total) {
    int64_t c[kPieceRank];
    int64_t rest = i, d_off = 0;
    for (int d = a.rank - 1; d >= 0; --d) {
      c[d] = rest % a.shape[d];
      rest /= a.shape[d];
      d_off += c[d] * a.dst_stride[d];
    }
    auto load = [&](int r) {
      int64_t off = 0;
      for (int d = 0; d < a.rank; ++d) off += c[d] * refs[r].stride[d];
      return static_cast<const T*>(refs[r].base)[off];
    };
    // cpu/matmul.cc sum_run: acc = term 0's sum, then acc += each later term's sum, a term's
    // sum being ((s0 + s1) + s2) + …
    T acc = 0;
    int r = 0;
    for (int t = 0; t < a.terms; ++t) {
      T sum = load(r);
      for (int j = 1; j < term_size[t]; ++j) sum = add(sum, load(r + j));
      r += term_size[t];
      acc = t == 0 ? sum : add(acc, sum);
    }
    static_cast<T*>(a.dst)[d_off] = acc;
    for (int k = 0; k < a.also_count; ++k) static_cast<T*>(also[k])[d_off] = acc;
  }
}

// Element strides of `box` along the region's dimensions, and the element offset of the
// region's origin in it.
std::pair<std::vector<int64_t>, int64_t> strides_in(const Box& box, const Box& region) {
  const size_t rank = region.shape.size();
  std::vector<int64_t> strides(rank);
  int64_t stride = 1, origin = 0;
  for (size_t d = rank; d-- > 0;) {
    strides[d] = stride;
    origin += (region.offset[d] - box.offset[d]) * stride;
    stride *= box.shape[d];
  }
  return {strides, origin};
}

void sum_piece_cuda(const SumPiece& job) {
  if (job.region.num_elements() == 0) return;
  const int64_t id = job.dst->device_id;
  const DType dtype = job.dtype;
  if (dtype != DType::kF32 && dtype != DType::kF64) unsupported_dtype("sum_piece", dtype);
  const size_t elem = dtype_size(dtype);
  cudaStream_t s = cuda::enter_device(id);

  // Operand 0 is dst (its strides also serve the replicas in `also`, which hold dst's box);
  // then each source in term order.
  std::vector<std::vector<int64_t>> strides;
  std::vector<const void*> bases;
  std::vector<int> term_size;
  auto [dst_strides, dst_origin] = strides_in(job.dst->box, job.region);
  strides.push_back(dst_strides);
  for (const auto& term : job.terms) {
    if (term.empty()) throw InternalError("sum_piece on CUDA: a term has no source");
    term_size.push_back(static_cast<int>(term.size()));
    for (const Array::Shard* src : term) {
      auto [st, origin] = strides_in(src->box, job.region);
      strides.push_back(st);
      bases.push_back(src->buffer.data() + static_cast<size_t>(origin) * elem);
      ensure_peer_access(id, src->device_id);
      wait_for_device(s, id, src->device_id);
    }
  }
  for (const Array::Shard* r : job.also) ensure_peer_access(id, r->device_id);

  // Merge dimensions every operand walks contiguously; drop extents of 1.
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> merged(strides.size());
  for (size_t d = 0; d < job.region.shape.size(); ++d) {
    const int64_t extent = job.region.shape[d];
    if (extent == 1) continue;
    bool joins = !shape.empty();
    for (size_t o = 0; joins && o < strides.size(); ++o) {
      joins = merged[o].back() == strides[o][d] * extent;
    }
    if (joins) {
      shape.back() *= extent;
      for (size_t o = 0; o < strides.size(); ++o) merged[o].back() = strides[o][d];
    } else {
      shape.push_back(extent);
      for (size_t o = 0; o < strides.size(); ++o) merged[o].push_back(strides[o][d]);
    }
  }
  if (shape.size() > static_cast<size_t>(kPieceRank)) {
    throw ValueError(
        concat({"sum_piece on CUDA: the region ", job.region.to_string(), " has more than ",
                std::to_string(kPieceRank), " non-contiguous dimensions"}));
  }

  PieceArgs a{};
  a.dst = job.dst->buffer.data() + static_cast<size_t>(dst_origin) * elem;
  a.rank = static_cast<int>(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    a.shape[d] = shape[d];
    a.dst_stride[d] = merged[0][d];
  }
  a.terms = static_cast<int>(term_size.size());
  a.sources = static_cast<int>(bases.size());
  a.also_count = static_cast<int>(job.also.size());
  std::vector<SourceRef> refs(bases.size());
  for (size_t r = 0; r < bases.size(); ++r) {
    refs[r].base = bases[r];
    for (size_t d = 0; d < shape.size(); ++d) refs[r].stride[d] = merged[r + 1][d];
  }
  std::vector<void*> also;
  for (Array::Shard* r : job.also) {
    also.push_back(r->buffer.data() + static_cast<size_t>(dst_origin) * elem);
  }
  std::optional<DeviceScratch> scratch;
  if (a.sources <= kInlineSources && a.also_count <= kInlineAlso) {
    std::copy(refs.begin(), refs.end(), a.refs);
    std::copy(term_size.begin(), term_size.end(), a.term_size);
    std::copy(also.begin(), also.end(), a.also);
  } else {
    // Descriptors in device scratch (uploaded from pageable memory: consumed at return).
    const size_t refs_bytes = refs.size() * sizeof(SourceRef);
    const size_t also_bytes = also.size() * sizeof(void*);
    const size_t sizes_bytes = term_size.size() * sizeof(int);
    scratch.emplace(refs_bytes + also_bytes + sizes_bytes, s, id);
    std::byte* base = scratch->as<std::byte>();
    copy_host_to_device(base, refs.data(), refs_bytes, s, id, "sum_piece (descriptors)");
    copy_host_to_device(base + refs_bytes, also.data(), also_bytes, s, id,
                        "sum_piece (descriptors)");
    copy_host_to_device(base + refs_bytes + also_bytes, term_size.data(), sizes_bytes, s, id,
                        "sum_piece (descriptors)");
    a.external_refs = reinterpret_cast<const SourceRef*>(base);
    a.external_also = reinterpret_cast<void* const*>(base + refs_bytes);
    a.external_term_size = reinterpret_cast<const int*>(base + refs_bytes + also_bytes);
  }
  const int64_t total = job.region.num_elements();
  if (dtype == DType::kF32) {
    sum_piece_kernel<float><<<grid_for(total), kThreads, 0, s>>>(a, total);
  } else {
    sum_piece_kernel<double><<<grid_for(total), kThreads, 0, s>>>(a, total);
  }
  cuda::check_launch("sum_piece", id);
  // Replicas on other GPUs: their streams see the sum before their next work.
  for (const Array::Shard* r : job.also) {
    if (cuda::physical_gpu_of(r->device_id) != cuda::physical_gpu_of(id)) {
      wait_for_device(cuda::stream_of(r->device_id), r->device_id, id);
      cuda::enter_device(id);
    }
  }
}

}  // namespace
}  // namespace meshlayout::cuda_kernels

namespace meshlayout::internal_cuda {

void register_cuda_linear_kernels() {
  using namespace cuda_kernels;
  matmul_rows.define(DeviceKind::kCuda, &matmul_rows_cuda);
  add_into.define(DeviceKind::kCuda, &add_into_cuda);
  sum_piece.define(DeviceKind::kCuda, &sum_piece_cuda);
  add_bias.define(DeviceKind::kCuda, &add_bias_cuda);
  combine_shards.define(DeviceKind::kCuda, &combine_shards_cuda);
  scale_elements.define(DeviceKind::kCuda, &scale_elements_cuda);
  register_cuda_permute_kernels();
}

}  // namespace meshlayout::internal_cuda
