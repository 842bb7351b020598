// initializer_kernels.cu — the CUDA implementation of kernels/memory.h's fill_initializer:
// each thread computes one element of the shard's box from its global index g, the same pure
// function of (key, g) as the CPU's fill_box (init/initializers.cc NOTE [Initializer streams]),
// so a GPU shard holds the CPU's bytes bit for bit:
//   - zeros / ones / constant (any dtype): the element's bytes come from the CPU's own fill_box
//     of one element (its checks and rounding), then a pattern fill on the GPU;
//   - random_uniform, random_normal, truncated_normal, variance_scaling and its six named forms
//     in F32, F64, BF16, F16: Philox4x32-10 of counter g (redraws of truncated normals from
//     counter (g, attempt)) and init/sampling_math.h's transforms on the GPU. Those transforms
//     use only +, −, ×, ÷, sqrt, integer and bit operations, built by the CPU with
//     -ffp-contract=off; here every floating operation is an explicitly rounded intrinsic
//     (__fadd_rn, __fmul_rn, __fdiv_rn, __fsqrt_rn and their double forms: never fused into an
//     FMA, IEEE round-to-nearest, no flush to zero), so each value rounds as on the CPU;
//   - orthogonal (a QR of the whole matrix), and ranks above kMaxInitRank: generated on the
//     host by the CPU op into a host buffer and copied up.
// Fused fills (`runs`, one initializer per run of the last axis) launch one fill per run.
// Registered by register_cuda_memory_kernels() (memory_kernels.cu).
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "meshlayout/init/float_convert.h"
#include "meshlayout/init/initializers.h"
#include "meshlayout/init/philox.h"
#include "meshlayout/kernels/cuda/shard_kernel_util.cuh"
#include "meshlayout/kernels/memory.h"

namespace meshlayout::cuda_kernels {
namespace {

constexpr int kMaxInitRank = 10;

enum class Sampler : int { kUniform, kNormal, kTruncatedNormal };
enum class OutType : int { kF32, kF64, kBF16, kF16 };

// One fill launch: the elements of `sub` (a box of a tensor whose row-major strides are
// `global_stride`), written row by row of the last axis into `out` at column `col0` of rows of
// `width` elements (width == sub's last extent, col0 == 0 unless a run of a fused fill).
struct InitLaunch {
  std::byte* out;
  int rank;
  int64_t sub_shape[kMaxInitRank];
  uint64_t g0;  // the global index of sub's first element
  uint64_t global_stride[kMaxInitRank];
  int64_t width, col0;
  // Random: the sampler and its parameters (float forms for F32/BF16/F16, double for F64).
  Sampler sampler;
  float lo_f, span_f;  // uniform: lo + span·u
  double lo_d, span_d;
  float mean_f, stddev_f;  // normals: mean + stddev·z
  double mean_d, stddev_d;
  uint32_t k0, k1;
  // Constant: the element's bytes.
  uint64_t pattern;
};

// ---- Philox4x32-10 and init/sampling_math.h, on the device ----

struct Words {
  uint32_t w0, w1, w2, w3;
};

__device__ __forceinline__ Words philox(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                        uint32_t k0, uint32_t k1) {
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = __umulhi(kPhiloxM0, c0), lo0 = kPhiloxM0 * c0;
    const uint32_t hi1 = __umulhi(kPhiloxM1, c2), lo1 = kPhiloxM1 * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return {c0, c1, c2, c3};
}

__device__ __forceinline__ float unit_float(uint32_t w) {
  return __fmul_rn(__int2float_rn(static_cast<int32_t>(w >> 8)), 0x1p-24f);
}
__device__ __forceinline__ float open_unit_float(uint32_t w) {
  return __fmul_rn(__int2float_rn(static_cast<int32_t>(w >> 8) + 1), 0x1p-24f);
}
__device__ __forceinline__ double unit_double(uint32_t w0, uint32_t w1) {
  return __dadd_rn(__dmul_rn(__int2double_rn(static_cast<int32_t>(w0 >> 6)), 0x1p-26),
                   __dmul_rn(__int2double_rn(static_cast<int32_t>(w1 >> 5)), 0x1p-53));
}

// c[0] + x·(c[1] + x·(c[2] + …)), in that order.
template <int N>
__device__ __forceinline__ float horner(float x, const float (&c)[N]) {
  float r = c[N - 1];
#pragma unroll
  for (int i = 1; i < N; ++i) r = __fadd_rn(c[N - 1 - i], __fmul_rn(x, r));
  return r;
}
template <int N>
__device__ __forceinline__ double horner(double x, const double (&c)[N]) {
  double r = c[N - 1];
#pragma unroll
  for (int i = 1; i < N; ++i) r = __dadd_rn(c[N - 1 - i], __dmul_rn(x, r));
  return r;
}

__device__ __forceinline__ float log_unit(float x) {
  uint32_t ix = __float_as_uint(x) + (0x3F800000u - 0x3F3504F3u);
  const float k = __int2float_rn(static_cast<int32_t>(ix >> 23) - 127);
  ix = (ix & 0x007FFFFFu) + 0x3F3504F3u;
  const float f = __fsub_rn(__uint_as_float(ix), 1.0f);
  const float s = __fdiv_rn(f, __fadd_rn(2.0f, f));
  const float z = __fmul_rn(s, s);
  const float kAtanh[] = {1.0f / 3, 1.0f / 5, 1.0f / 7, 1.0f / 9};
  const float p = __fmul_rn(z, horner(z, kAtanh));
  const float two_s = __fmul_rn(2.0f, s);
  constexpr float kLn2Hi = 0.693145751953125f;
  constexpr float kLn2Lo = 1.42860682030941723212e-06f;
  return __fadd_rn(__fmul_rn(k, kLn2Hi),
                   __fadd_rn(__fadd_rn(two_s, __fmul_rn(two_s, p)), __fmul_rn(k, kLn2Lo)));
}

__device__ __forceinline__ double log_unit(double x) {
  uint64_t ix = static_cast<uint64_t>(__double_as_longlong(x)) +
                (0x3FF0000000000000ull - 0x3FE6A09E667F3BCDull);
  const double k = __int2double_rn(static_cast<int32_t>(ix >> 52) - 1023);
  ix = (ix & 0x000FFFFFFFFFFFFFull) + 0x3FE6A09E667F3BCDull;
  const double f = __dsub_rn(__longlong_as_double(static_cast<long long>(ix)), 1.0);
  const double s = __ddiv_rn(f, __dadd_rn(2.0, f));
  const double z = __dmul_rn(s, s);
  const double kAtanh[] = {1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9,  1.0 / 11,
                           1.0 / 13, 1.0 / 15, 1.0 / 17, 1.0 / 19, 1.0 / 21};
  const double p = __dmul_rn(z, horner(z, kAtanh));
  const double two_s = __dmul_rn(2.0, s);
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  return __dadd_rn(__dmul_rn(k, kLn2Hi),
                   __dadd_rn(__dadd_rn(two_s, __dmul_rn(two_s, p)), __dmul_rn(k, kLn2Lo)));
}

__device__ __forceinline__ float cos_2pi(float u) {
  const float t = __fmul_rn(4.0f, u);
  const int32_t q = __float2int_rz(__fadd_rn(t, 0.5f));
  const float x = __fmul_rn(__fsub_rn(t, __int2float_rn(q)), 1.57079632679489661923f);
  const float x2 = __fmul_rn(x, x);
  const float kSin[] = {-1.0f / 6, 1.0f / 120, -1.0f / 5040, 1.0f / 362880};
  const float kCos[] = {1.0f / 24, -1.0f / 720, 1.0f / 40320, -1.0f / 3628800};
  const float sin_x = __fadd_rn(x, __fmul_rn(__fmul_rn(x, x2), horner(x2, kSin)));
  const float cos_x = __fadd_rn(__fsub_rn(1.0f, __fmul_rn(0.5f, x2)),
                                __fmul_rn(__fmul_rn(x2, x2), horner(x2, kCos)));
  const uint32_t odd = 0u - static_cast<uint32_t>(q & 1);
  const uint32_t r = (__float_as_uint(sin_x) & odd) | (__float_as_uint(cos_x) & ~odd);
  const uint32_t negate = static_cast<uint32_t>((q + 1) & 2) << 30;
  return __uint_as_float(r ^ negate);
}

__device__ __forceinline__ double cos_2pi(double u) {
  const double t = __dmul_rn(4.0, u);
  const int32_t q = __double2int_rz(__dadd_rn(t, 0.5));
  const double x = __dmul_rn(__dsub_rn(t, __int2double_rn(q)), 1.57079632679489661923);
  const double x2 = __dmul_rn(x, x);
  const double kSin[] = {
      -1.0 / 6,        1.0 / 120,        -1.0 / 5040,          1.0 / 362880,
      -1.0 / 39916800, 1.0 / 6227020800, -1.0 / 1307674368000, 1.0 / 355687428096000};
  const double kCos[] = {
      1.0 / 24,        -1.0 / 720,         1.0 / 40320,          -1.0 / 3628800,
      1.0 / 479001600, -1.0 / 87178291200, 1.0 / 20922789888000, -1.0 / 6402373705728000};
  const double sin_x = __dadd_rn(x, __dmul_rn(__dmul_rn(x, x2), horner(x2, kSin)));
  const double cos_x =
      __dadd_rn(__dsub_rn(1.0, __dmul_rn(0.5, x2)), __dmul_rn(__dmul_rn(x2, x2), horner(x2, kCos)));
  const uint64_t odd = 0ull - static_cast<uint64_t>(q & 1);
  const uint64_t r = (static_cast<uint64_t>(__double_as_longlong(sin_x)) & odd) |
                     (static_cast<uint64_t>(__double_as_longlong(cos_x)) & ~odd);
  const uint64_t negate = static_cast<uint64_t>((q + 1) & 2) << 62;
  return __longlong_as_double(static_cast<long long>(r ^ negate));
}

__device__ __forceinline__ float normal_float(uint32_t w0, uint32_t w1) {
  return __fmul_rn(__fsqrt_rn(__fmul_rn(-2.0f, log_unit(open_unit_float(w0)))),
                   cos_2pi(unit_float(w1)));
}

__device__ __forceinline__ double normal_double(const Words& w) {
  const double u1 = __dsub_rn(1.0, unit_double(w.w0, w.w1));
  return __dmul_rn(__dsqrt_rn(__dmul_rn(-2.0, log_unit(u1))), cos_2pi(unit_double(w.w2, w.w3)));
}

// bf16_from_float / f16_from_float of init/float_convert.h.
__device__ __forceinline__ uint16_t bf16_bits(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>((x & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

__device__ __forceinline__ uint16_t f16_bits(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7FFFFFFFu;
  const uint32_t n = a - 0x38000000u;
  const uint32_t normal = (n + 0x0FFFu + ((n >> 13) & 1u)) >> 13;
  const float biased = __fadd_rn(__uint_as_float(a), 0.5f);
  const uint32_t subnormal = __float_as_uint(biased) - 0x3F000000u;
  const uint32_t is_normal = 0u - static_cast<uint32_t>(a >= 0x38800000u);
  const uint32_t is_inf = 0u - static_cast<uint32_t>(a >= 0x477FF000u);
  const uint32_t is_nan = 0u - static_cast<uint32_t>(a > 0x7F800000u);
  uint32_t h = (normal & is_normal) | (subnormal & ~is_normal);
  h = (0x7C00u & is_inf) | (h & ~is_inf);
  h = (0x7E00u & is_nan) | (h & ~is_nan);
  return static_cast<uint16_t>(sign | h);
}

// The value of global element g, as the CPU's sample_floats / sample_doubles compute it.
__device__ __forceinline__ float sample_float(const InitLaunch& a, uint64_t g) {
  const uint32_t c0 = static_cast<uint32_t>(g), c1 = static_cast<uint32_t>(g >> 32);
  const Words w = philox(c0, c1, 0, 0, a.k0, a.k1);
  if (a.sampler == Sampler::kUniform)
    return __fadd_rn(a.lo_f, __fmul_rn(a.span_f, unit_float(w.w0)));
  float z = normal_float(w.w0, w.w1);
  if (a.sampler == Sampler::kTruncatedNormal) {
    for (uint64_t attempt = 1; !(fabsf(z) <= 2.0f); ++attempt) {
      const Words r = philox(c0, c1, static_cast<uint32_t>(attempt),
                             static_cast<uint32_t>(attempt >> 32), a.k0, a.k1);
      z = normal_float(r.w0, r.w1);
    }
  }
  return __fadd_rn(a.mean_f, __fmul_rn(a.stddev_f, z));
}

__device__ __forceinline__ double sample_double(const InitLaunch& a, uint64_t g) {
  const uint32_t c0 = static_cast<uint32_t>(g), c1 = static_cast<uint32_t>(g >> 32);
  const Words w = philox(c0, c1, 0, 0, a.k0, a.k1);
  if (a.sampler == Sampler::kUniform) {
    return __dadd_rn(a.lo_d, __dmul_rn(a.span_d, unit_double(w.w0, w.w1)));
  }
  double z = normal_double(w);
  if (a.sampler == Sampler::kTruncatedNormal) {
    for (uint64_t attempt = 1; !(fabs(z) <= 2.0); ++attempt) {
      z = normal_double(philox(c0, c1, static_cast<uint32_t>(attempt),
                               static_cast<uint32_t>(attempt >> 32), a.k0, a.k1));
    }
  }
  return __dadd_rn(a.mean_d, __dmul_rn(a.stddev_d, z));
}

// Element i of the launch's sub-box: its global index and its position in `out`.
__device__ __forceinline__ void locate(const InitLaunch& a, int64_t i, uint64_t* g,
                                       int64_t* out_index) {
  int64_t rest = i;
  uint64_t index = a.g0;
  for (int d = a.rank - 1; d >= 0; --d) {
    const int64_t c = rest % a.sub_shape[d];
    rest /= a.sub_shape[d];
    index += static_cast<uint64_t>(c) * a.global_stride[d];
  }
  const int64_t last = a.rank == 0 ? 1 : a.sub_shape[a.rank - 1];
  const int64_t row = i / last;
  *g = index;
  *out_index = row * a.width + a.col0 + (i - row * last);
}

template <OutType kOut>
__global__ void random_fill_kernel(const InitLaunch a, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint64_t g = 0;
    int64_t at = 0;
    locate(a, i, &g, &at);
    if constexpr (kOut == OutType::kF64) {
      reinterpret_cast<double*>(a.out)[at] = sample_double(a, g);
    } else if constexpr (kOut == OutType::kF32) {
      reinterpret_cast<float*>(a.out)[at] = sample_float(a, g);
    } else if constexpr (kOut == OutType::kBF16) {
      reinterpret_cast<uint16_t*>(a.out)[at] = bf16_bits(sample_float(a, g));
    } else {
      reinterpret_cast<uint16_t*>(a.out)[at] = f16_bits(sample_float(a, g));
    }
  }
}

template <typename W>
__global__ void pattern_fill_kernel(const InitLaunch a, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint64_t g = 0;
    int64_t at = 0;
    locate(a, i, &g, &at);
    reinterpret_cast<W*>(a.out)[at] = static_cast<W>(a.pattern);
  }
}

// ---- Host side ----

void check_box(const Shape& shape, const Box& box) {
  bool ok = box.offset.size() == shape.size() && box.shape.size() == shape.size();
  for (size_t d = 0; ok && d < shape.size(); ++d) {
    ok = box.offset[d] >= 0 && box.shape[d] >= 0 && box.offset[d] + box.shape[d] <= shape[d];
  }
  if (!ok) {
    throw ValueError(concat({"fill_initializer on CUDA: box ", box.to_string(),
                             " does not fit in a tensor of shape ", shape_to_string(shape)}));
  }
}

// sampler_for() of init/initializers.cc: the same double arithmetic on the host.
void set_sampler(const Initializer& init, const Shape& shape, InitLaunch& l, DType dtype) {
  double a = 0, b = 1;
  switch (init.kind()) {
    case InitializerKind::kRandomUniform:
      l.sampler = Sampler::kUniform, a = init.minval(), b = init.maxval();
      break;
    case InitializerKind::kRandomNormal:
      l.sampler = Sampler::kNormal, a = init.mean(), b = init.stddev();
      break;
    case InitializerKind::kTruncatedNormal:
      l.sampler = Sampler::kTruncatedNormal, a = init.mean(), b = init.stddev();
      break;
    default: {
      const Fans fans = compute_fans(shape);
      double fan = 0;
      switch (init.mode()) {
        case FanMode::kFanIn:
          fan = static_cast<double>(fans.fan_in);
          break;
        case FanMode::kFanOut:
          fan = static_cast<double>(fans.fan_out);
          break;
        case FanMode::kFanAvg:
          fan = static_cast<double>(fans.fan_in + fans.fan_out) / 2.0;
          break;
      }
      const double scale = init.scale() / std::max(1.0, fan);
      switch (init.distribution()) {
        case VarianceDistribution::kUniform: {
          const double limit = std::sqrt(3.0 * scale);
          l.sampler = Sampler::kUniform, a = -limit, b = limit;
          break;
        }
        case VarianceDistribution::kUntruncatedNormal:
          l.sampler = Sampler::kNormal, a = 0.0, b = std::sqrt(scale);
          break;
        case VarianceDistribution::kTruncatedNormal:
          l.sampler = Sampler::kTruncatedNormal, a = 0.0,
          b = std::sqrt(scale) / 0.87962566103423978;
          break;
      }
    }
  }
  (void)dtype;
  l.lo_f = static_cast<float>(a), l.span_f = static_cast<float>(b - a);
  l.lo_d = a, l.span_d = b - a;
  l.mean_f = static_cast<float>(a), l.stddev_f = static_cast<float>(b);
  l.mean_d = a, l.stddev_d = b;
}

// Fills `sub` of a tensor of `shape` drawn by `init` (keyed by `key`) into `out`, rows of
// `width` elements starting at column col0.
void fill_part(const Initializer& init, const Shape& shape, const Box& sub, DType dtype,
               uint64_t key, std::byte* out, int64_t width, int64_t col0, cudaStream_t s,
               int64_t id) {
  check_box(shape, sub);
  const size_t rank = shape.size();
  InitLaunch l{};
  l.out = out;
  l.rank = static_cast<int>(rank);
  l.width = rank == 0 ? 1 : width;
  l.col0 = col0;
  uint64_t stride = 1;
  for (size_t d = rank; d-- > 0;) {
    l.sub_shape[d] = sub.shape[d];
    l.global_stride[d] = stride;
    l.g0 += static_cast<uint64_t>(sub.offset[d]) * stride;
    stride *= static_cast<uint64_t>(shape[d]);
  }
  const int64_t total = sub.num_elements();
  if (!init.is_random()) {
    std::byte element[8] = {};  // the CPU's bytes of one element (and its value checks)
    fill_box(init, Shape{1}, Box{{0}, {1}}, dtype, element, key);
    if (total == 0) return;
    const size_t size = dtype_size(dtype);
    uint64_t pattern = 0;
    std::memcpy(&pattern, element, size);  // little-endian: the low bytes
    l.pattern = pattern;
    const unsigned grid = grid_for(total);
    if (size == 8) pattern_fill_kernel<uint64_t><<<grid, kThreads, 0, s>>>(l, total);
    if (size == 4) pattern_fill_kernel<uint32_t><<<grid, kThreads, 0, s>>>(l, total);
    if (size == 2) pattern_fill_kernel<uint16_t><<<grid, kThreads, 0, s>>>(l, total);
    if (size == 1) pattern_fill_kernel<uint8_t><<<grid, kThreads, 0, s>>>(l, total);
    cuda::check_launch("fill_initializer", id);
    return;
  }
  if (!is_floating(dtype)) {
    throw ValueError(
        concat({"initializer '", init.to_string(), "' cannot fill dtype ", dtype_name(dtype),
                ": random initializers need a floating dtype (F32, F64, BF16 or "
                "F16)"}));
  }
  if (total == 0) return;
  set_sampler(init, shape, l, dtype);
  const uint64_t k = init_key(init.seed(), key);
  l.k0 = static_cast<uint32_t>(k), l.k1 = static_cast<uint32_t>(k >> 32);
  const unsigned grid = grid_for(total);
  switch (dtype) {
    case DType::kF32:
      random_fill_kernel<OutType::kF32><<<grid, kThreads, 0, s>>>(l, total);
      break;
    case DType::kF64:
      random_fill_kernel<OutType::kF64><<<grid, kThreads, 0, s>>>(l, total);
      break;
    case DType::kBF16:
      random_fill_kernel<OutType::kBF16><<<grid, kThreads, 0, s>>>(l, total);
      break;
    default:
      random_fill_kernel<OutType::kF16><<<grid, kThreads, 0, s>>>(l, total);
      break;
  }
  cuda::check_launch("fill_initializer", id);
}

// The CPU op into a host buffer, then one copy up (orthogonal; ranks above kMaxInitRank).
void fill_on_host(const FillInitializer& a, cudaStream_t s) {
  Array::Shard& sh = *a.shard;
  std::vector<std::byte> host(static_cast<size_t>(sh.box.num_elements()) * dtype_size(a.dtype));
  Array::Shard staged{sh.position, sh.device_id, sh.box,
                      DeviceBuffer::borrowed(host.data(), host.size())};
  FillInitializer on_host = a;
  on_host.shard = &staged;
  fill_initializer_cpu(on_host);
  copy_host_to_device(sh.buffer.data(), host.data(), host.size(), s, sh.device_id,
                      "fill_initializer (host-generated upload)");
}

void fill_initializer_cuda(const FillInitializer& a) {
  Array::Shard& sh = *a.shard;
  const int64_t id = sh.device_id;
  cudaStream_t s = cuda::enter_device(id);
  const Shape& shape = *a.shape;
  bool host = shape.size() > static_cast<size_t>(kMaxInitRank);
  if (a.runs.empty()) {
    host = host || a.initializer->kind() == InitializerKind::kOrthogonal;
  } else {
    for (const InitializerRun& r : a.runs) {
      host = host || r.initializer->kind() == InitializerKind::kOrthogonal;
    }
  }
  if (host) return fill_on_host(a, s);
  const Box& box = sh.box;
  if (a.runs.empty()) {
    const int64_t width = shape.empty() ? 1 : box.shape.back();
    fill_part(*a.initializer, shape, box, a.dtype, a.key, sh.buffer.data(), width, 0, s, id);
    return;
  }
  // fill_runs_box of cpu/memory.cc: run i is a tensor of its own (the run's last extent), key+i.
  check_box(shape, box);
  const size_t last = shape.size() - 1;
  const int64_t width = box.shape[last], rows = width == 0 ? 0 : box.num_elements() / width;
  int64_t start = 0;
  for (size_t i = 0; i < a.runs.size(); ++i) {
    const int64_t lo = std::max(start, box.offset[last]);
    const int64_t hi = std::min(start + a.runs[i].length, box.offset[last] + width);
    if (lo < hi && rows > 0) {
      Shape seg_shape = shape;
      seg_shape[last] = a.runs[i].length;
      Box sub = box;
      sub.offset[last] = lo - start;
      sub.shape[last] = hi - lo;
      fill_part(*a.runs[i].initializer, seg_shape, sub, a.dtype, a.key + i, sh.buffer.data(), width,
                lo - box.offset[last], s, id);
    }
    start += a.runs[i].length;
  }
}

}  // namespace
}  // namespace meshlayout::cuda_kernels

namespace meshlayout::internal_cuda {

void register_cuda_initializer_kernels() {
  fill_initializer.define(DeviceKind::kCuda, &cuda_kernels::fill_initializer_cuda);
}

}  // namespace meshlayout::internal_cuda
