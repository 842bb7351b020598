// memory_kernels_test.cc — the CUDA memory kernels (memory_kernels.cu, initializer_kernels.cu,
// checkpoint_kernels.cu) against their CPU implementations on the same inputs: copies, fills,
// scales, initializer fills (every initializer in F32, F64, BF16 and F16, bit for bit), the
// checkpoint permutation and conversion, the non-finite search (bit for bit), and the sums of
// squares (1e-12). Each GPU block starts poisoned (0xFF bytes) and each CPU buffer with the same
// bytes, so a byte an op should leave alone, or fails to write, shows as a difference.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/init/float_convert.h"
#include "meshlayout/init/initializers.h"
#include "meshlayout/kernels/cuda/cuda_test_util.h"
#include "meshlayout/kernels/hf_checkpoint.h"
#include "meshlayout/kernels/memory.h"
#include "meshlayout/kernels/optimizer.h"

namespace meshlayout {
namespace {

using testing_cuda::GpuBlock;
using testing_cuda::host_shard;
using testing_cuda::random_values;
using testing_cuda::relative_error;

constexpr DeviceKind kCpu = DeviceKind::kCpu;
constexpr DeviceKind kCuda = DeviceKind::kCuda;

std::vector<uint8_t> poisoned(size_t n) { return std::vector<uint8_t>(n, 0xFF); }

std::vector<uint8_t> pattern(size_t n, unsigned seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed * 17 + 3);
  return v;
}

template <typename T>
int64_t first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

#define EXPECT_SAME_BITS(gpu, cpu) \
  EXPECT_EQ(first_difference(gpu, cpu), -1) << "the first element whose bits differ (GPU vs CPU)"

// A byte buffer on both kinds: `host` (the CPU op's) and a GPU block starting with its bytes.
struct Both {
  explicit Both(std::vector<uint8_t> bytes) : host(std::move(bytes)), gpu(host) {}
  Array::Shard cpu_shard(const Box& box) { return host_shard(host, box); }
  Array::Shard gpu_shard(const Box& box) { return gpu.shard(box); }
  std::vector<uint8_t> host;
  GpuBlock gpu;
};

// ---- Copies ----

void check_copy_runs(CopyRuns args, size_t src_bytes, size_t dst_bytes) {
  SCOPED_TRACE("runs " + std::to_string(args.runs) + " of " + std::to_string(args.run_bytes) +
               ", strides " + std::to_string(args.dst_stride) + "/" +
               std::to_string(args.src_stride) + ", offsets " + std::to_string(args.dst_offset) +
               "/" + std::to_string(args.src_offset));
  Both src(pattern(src_bytes, 1)), dst(poisoned(dst_bytes));
  const Box sb{{0}, {static_cast<int64_t>(src_bytes)}}, db{{0}, {static_cast<int64_t>(dst_bytes)}};
  Array::Shard cs = src.cpu_shard(sb), cd = dst.cpu_shard(db);
  Array::Shard gs = src.gpu_shard(sb), gd = dst.gpu_shard(db);
  CopyRuns c = args, g = args;
  c.src = &cs, c.dst = &cd, g.src = &gs, g.dst = &gd;
  copy_runs(kCpu, c);
  copy_runs(kCuda, g);
  std::vector<uint8_t> got = dst.gpu.download<uint8_t>();
  EXPECT_SAME_BITS(got, dst.host);
}

TEST(CudaMemoryKernelsTest, CopyRunsMatchesCpu) {
  MESHLAYOUT_REQUIRE_GPU();
  // cudaMemcpy2DAsync: pitches >= run.
  check_copy_runs({.dst_offset = 8,
                   .dst_stride = 40,
                   .src_offset = 4,
                   .src_stride = 24,
                   .runs = 5,
                   .run_bytes = 20},
                  200, 256);
  // One run (strides unused), odd sizes and offsets.
  check_copy_runs({.dst_offset = 3, .src_offset = 5, .runs = 1, .run_bytes = 77}, 100, 100);
  // Contiguous runs: merged into one copy.
  check_copy_runs({.dst_stride = 16, .src_stride = 16, .runs = 9, .run_bytes = 16}, 160, 160);
  // A source stride of 0 (the same run broadcast): the kernel.
  check_copy_runs({.dst_offset = 2,
                   .dst_stride = 13,
                   .src_offset = 1,
                   .src_stride = 0,
                   .runs = 7,
                   .run_bytes = 13},
                  50, 100);
  // Misaligned runs of 8-byte multiples: byte words.
  check_copy_runs({.dst_offset = 1,
                   .dst_stride = 33,
                   .src_offset = 0,
                   .src_stride = 8,
                   .runs = 4,
                   .run_bytes = 8},
                  64, 200);
  check_copy_runs({.dst_offset = 0,
                   .dst_stride = 8,
                   .src_offset = 0,
                   .src_stride = 8,
                   .runs = 3,
                   .run_bytes = 0},
                  64, 64);  // nothing
}

TEST(CudaMemoryKernelsTest, CopyFromHostPageableAndPinned) {
  MESHLAYOUT_REQUIRE_GPU();
  Both dst(poisoned(300));
  std::vector<uint8_t> src = pattern(257, 2);
  const Box box{{0}, {300}};
  Array::Shard cd = dst.cpu_shard(box), gd = dst.gpu_shard(box);
  copy_from_host(kCpu, {.dst = &cd,
                        .dst_offset = 7,
                        .host = reinterpret_cast<std::byte*>(src.data()),
                        .bytes = src.size()});
  copy_from_host(kCuda, {.dst = &gd,
                         .dst_offset = 7,
                         .host = reinterpret_cast<std::byte*>(src.data()),
                         .bytes = src.size()});
  std::fill(src.begin(), src.end(), 0);  // reusing the host bytes right away is allowed
  EXPECT_SAME_BITS(dst.gpu.download<uint8_t>(), dst.host);

  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 64), cudaSuccess);
  std::memset(pinned, 0x5A, 64);
  copy_from_host(
      kCpu, {.dst = &cd, .dst_offset = 100, .host = static_cast<std::byte*>(pinned), .bytes = 64});
  copy_from_host(
      kCuda, {.dst = &gd, .dst_offset = 100, .host = static_cast<std::byte*>(pinned), .bytes = 64});
  std::memset(pinned, 0, 64);  // returns after the copy: the GPU has the 0x5A bytes
  EXPECT_SAME_BITS(dst.gpu.download<uint8_t>(), dst.host);
  cudaFreeHost(pinned);
}

void check_copy_box(const Box& src_box, const Box& dst_box, const Box& region, size_t elem) {
  SCOPED_TRACE(src_box.to_string() + " -> " + dst_box.to_string() + " region " +
               region.to_string() + " elem " + std::to_string(elem));
  Both src(pattern(static_cast<size_t>(src_box.num_elements()) * elem, 3));
  Both dst(poisoned(static_cast<size_t>(dst_box.num_elements()) * elem));
  Array::Shard cs = src.cpu_shard(src_box), cd = dst.cpu_shard(dst_box);
  Array::Shard gs = src.gpu_shard(src_box), gd = dst.gpu_shard(dst_box);
  copy_box_on_device(kCpu, {.dst = &cd,
                            .dst_box = dst_box,
                            .src = &cs,
                            .src_box = src_box,
                            .region = region,
                            .elem = elem});
  copy_box_on_device(kCuda, {.dst = &gd,
                             .dst_box = dst_box,
                             .src = &gs,
                             .src_box = src_box,
                             .region = region,
                             .elem = elem});
  EXPECT_SAME_BITS(dst.gpu.download<uint8_t>(), dst.host);
}

TEST(CudaMemoryKernelsTest, CopyBoxOnDeviceMatchesCpu) {
  MESHLAYOUT_REQUIRE_GPU();
  for (size_t elem : {1, 2, 4, 8}) {
    // Rank 3, partial in every dimension: the strided kernel.
    check_copy_box({{0, 0, 0}, {7, 13, 5}}, {{2, 3, 1}, {6, 9, 4}}, {{3, 4, 1}, {4, 7, 3}}, elem);
    // Whole trailing dimensions: merged into rows (cudaMemcpy2DAsync).
    check_copy_box({{0, 0, 0}, {7, 13, 5}}, {{1, 0, 0}, {9, 13, 5}}, {{2, 0, 0}, {5, 13, 5}}, elem);
    // Rank 2, rows of a wider buffer.
    check_copy_box({{0, 0}, {257, 33}}, {{10, 5}, {100, 20}}, {{10, 5}, {100, 20}}, elem);
    // Rank 1 and a single element.
    check_copy_box({{0}, {100}}, {{10}, {50}}, {{17}, {29}}, elem);
    check_copy_box({{0, 0}, {3, 3}}, {{1, 1}, {1, 1}}, {{1, 1}, {1, 1}}, elem);
  }
}

TEST(CudaMemoryKernelsTest, CopyReplicaShardAndWriteScalar) {
  MESHLAYOUT_REQUIRE_GPU();
  Both src(pattern(1001, 4)), dst(poisoned(1001));
  const Box box{{0}, {1001}};
  Array::Shard cs = src.cpu_shard(box), cd = dst.cpu_shard(box);
  Array::Shard gs = src.gpu_shard(box), gd = dst.gpu_shard(box);
  copy_replica_shard(kCpu, {.dst = &cd, .src = &cs});
  copy_replica_shard(kCuda, {.dst = &gd, .src = &gs});
  EXPECT_SAME_BITS(dst.gpu.download<uint8_t>(), dst.host);
  const double value = 0.1;
  write_scalar(kCpu, {.shard = &cd, .value = &value, .bytes = sizeof(value)});
  write_scalar(kCuda, {.shard = &gd, .value = &value, .bytes = sizeof(value)});
  EXPECT_SAME_BITS(dst.gpu.download<uint8_t>(), dst.host);
  std::byte* bytes = reinterpret_cast<std::byte*>(&dst);
  shard_host_bytes(kCuda, {.shard = &gd, .bytes = &bytes});
  EXPECT_EQ(bytes, nullptr) << "GPU memory is not host-addressable";
}

// ---- Fills and scales ----

TEST(CudaMemoryKernelsTest, FillScalarAndScaleShardMatchCpu) {
  MESHLAYOUT_REQUIRE_GPU();
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (int64_t n : {1, 7, 257 * 33}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n " + std::to_string(n));
      const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
      std::vector<uint8_t> start(bytes);
      if (dtype == DType::kF32) {
        std::vector<float> v = random_values<float>(static_cast<size_t>(n), 5, -3, 3);
        std::memcpy(start.data(), v.data(), bytes);
      } else {
        std::vector<double> v = random_values<double>(static_cast<size_t>(n), 5, -3, 3);
        std::memcpy(start.data(), v.data(), bytes);
      }
      const Box box{{0}, {n}};
      Both a(start);
      Array::Shard ca = a.cpu_shard(box), ga = a.gpu_shard(box);
      scale_shard(kCpu, {.shard = &ca, .dtype = dtype, .factor = 1.0 / 3.0});
      scale_shard(kCuda, {.shard = &ga, .dtype = dtype, .factor = 1.0 / 3.0});
      EXPECT_SAME_BITS(a.gpu.download<uint8_t>(), a.host);
      Both f(poisoned(bytes + 8));  // 8 bytes past the box stay poisoned
      Array::Shard cf = f.cpu_shard(box), gf = f.gpu_shard(box);
      fill_scalar(kCpu, {.shard = &cf, .dtype = dtype, .value = 0.3f});
      fill_scalar(kCuda, {.shard = &gf, .dtype = dtype, .value = 0.3f});
      EXPECT_SAME_BITS(f.gpu.download<uint8_t>(), f.host);
    }
  }
}

void check_fill(const Initializer& init, const Shape& shape, const Box& box, DType dtype,
                std::span<const InitializerRun> runs = {}) {
  SCOPED_TRACE(init.to_string() + " " + std::string(dtype_name(dtype)) + " shape " +
               shape_to_string(shape) + " box " + box.to_string() +
               (runs.empty() ? "" : " (runs)"));
  Both out(poisoned(static_cast<size_t>(box.num_elements()) * dtype_size(dtype)));
  Array::Shard c = out.cpu_shard(box), g = out.gpu_shard(box);
  const uint64_t key = variable_key("dense/kernel");
  fill_initializer(kCpu, {.shard = &c,
                          .initializer = &init,
                          .runs = runs,
                          .shape = &shape,
                          .dtype = dtype,
                          .key = key});
  fill_initializer(kCuda, {.shard = &g,
                           .initializer = &init,
                           .runs = runs,
                           .shape = &shape,
                           .dtype = dtype,
                           .key = key});
  std::vector<uint8_t> got = out.gpu.download<uint8_t>();
  const int64_t diff = first_difference(got, out.host);
  EXPECT_EQ(diff, -1) << "first differing byte (element "
                      << diff / static_cast<int64_t>(dtype_size(dtype)) << ")";
}

std::vector<Initializer> all_initializers() {
  return {
      Initializer::zeros(),
      Initializer::ones(),
      Initializer::constant(0.7),
      Initializer::random_uniform({.minval = -0.3, .maxval = 1.7, .seed = 5}),
      Initializer::random_uniform(),
      Initializer::random_normal({.mean = 0.5, .stddev = 2.0, .seed = 9}),
      Initializer::truncated_normal({.mean = -1, .stddev = 0.02}),
      Initializer::variance_scaling({.scale = 2.0,
                                     .mode = FanMode::kFanAvg,
                                     .distribution = VarianceDistribution::kUntruncatedNormal}),
      Initializer::variance_scaling(
          {.scale = 0.5, .mode = FanMode::kFanOut, .distribution = VarianceDistribution::kUniform}),
      Initializer::glorot_uniform(),
      Initializer::glorot_normal(3),
      Initializer::he_uniform(),
      Initializer::he_normal(),
      Initializer::lecun_uniform(),
      Initializer::lecun_normal(7),
      Initializer::orthogonal(1.5)};
}

TEST(CudaMemoryKernelsTest, FillInitializerIsBitIdenticalToCpu) {
  MESHLAYOUT_REQUIRE_GPU();
  for (const Initializer& init : all_initializers()) {
    for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
      check_fill(init, {37, 29}, Box{{5, 3}, {20, 17}}, dtype);
      check_fill(init, {37, 29}, Box{{0, 0}, {37, 29}}, dtype);
      check_fill(init, {4, 9, 11}, Box{{1, 2, 0}, {2, 5, 11}}, dtype);
      check_fill(init, {3, 3, 16, 32}, Box{{0, 1, 4, 8}, {3, 2, 8, 24}}, dtype);
      check_fill(init, {1000, 77}, Box{{0, 0}, {1000, 77}}, dtype);  // ~4.5% truncated redraws
    }
  }
}

TEST(CudaMemoryKernelsTest, FillInitializerEdgeCases) {
  MESHLAYOUT_REQUIRE_GPU();
  // Global indices beyond 2^32 (the counter's second word).
  const Initializer normal = Initializer::truncated_normal({.stddev = 1.0, .seed = 1});
  for (DType dtype : {DType::kF32, DType::kF64}) {
    check_fill(normal, {int64_t{1} << 20, 8192}, Box{{(int64_t{1} << 19) + 3, 100}, {3, 50}},
               dtype);
    check_fill(Initializer::random_uniform(), {int64_t{1} << 21, 4096},
               Box{{(int64_t{1} << 20) + 1, 7}, {2, 4000}}, dtype);
  }
  // Rank 1 and rank 0; an empty box.
  check_fill(Initializer::he_normal(), {1000}, Box{{17}, {900}}, DType::kF32);
  check_fill(Initializer::random_normal(), {}, Box{{}, {}}, DType::kF64);
  check_fill(Initializer::glorot_uniform(), {8, 6}, Box{{2, 0}, {0, 6}}, DType::kF32);
  // Constants in integer dtypes.
  check_fill(Initializer::constant(3), {7, 5}, Box{{1, 1}, {5, 3}}, DType::kI32);
  check_fill(Initializer::constant(-2), {7, 5}, Box{{1, 1}, {5, 3}}, DType::kI8);
  check_fill(Initializer::ones(), {7, 5}, Box{{1, 1}, {5, 3}}, DType::kI64);
  check_fill(Initializer::ones(), {9}, Box{{1}, {5}}, DType::kBool);
  // Errors as on the CPU.
  const Shape shape{4, 4};
  Both out(poisoned(64));
  Array::Shard g = out.gpu_shard(Box{{0, 0}, {4, 4}});
  const Initializer uniform = Initializer::random_uniform();
  EXPECT_THROW(fill_initializer(kCuda, {.shard = &g,
                                        .initializer = &uniform,
                                        .runs = {},
                                        .shape = &shape,
                                        .dtype = DType::kI32,
                                        .key = 1}),
               ValueError);
  const Initializer big = Initializer::constant(300);
  EXPECT_THROW(fill_initializer(kCuda, {.shard = &g,
                                        .initializer = &big,
                                        .runs = {},
                                        .shape = &shape,
                                        .dtype = DType::kI8,
                                        .key = 1}),
               ValueError);
}

TEST(CudaMemoryKernelsTest, FillInitializerRunsMatchCpu) {
  MESHLAYOUT_REQUIRE_GPU();
  const Initializer glorot = Initializer::glorot_uniform(), zeros = Initializer::zeros();
  const Initializer normal = Initializer::truncated_normal({.stddev = 0.5});
  const Initializer ortho = Initializer::orthogonal();
  const InitializerRun fused[] = {{4, &glorot}, {6, &zeros}, {5, &normal}};
  const InitializerRun with_orthogonal[] = {{8, &ortho}, {7, &glorot}};
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16}) {
    check_fill(glorot, {6, 15}, Box{{1, 2}, {4, 11}}, dtype, fused);
    check_fill(glorot, {6, 15}, Box{{0, 0}, {6, 15}}, dtype, fused);
    check_fill(glorot, {3, 6, 15}, Box{{0, 1, 5}, {3, 4, 1}}, dtype, fused);
    check_fill(glorot, {8, 15}, Box{{2, 3}, {5, 9}}, dtype, with_orthogonal);
  }
}

// ---- Checkpoint kernels ----

// `view` of src_dtype permuted by perm (output dim i = view dim perm[i]) into `region` of a
// shard holding `shard_box`; the staging in GPU memory or in host memory.
void check_hf_permute(DType src_dtype, const Shape& view, const std::vector<int>& perm,
                      const Box& shard_box, const Box& region, bool host_staging) {
  SCOPED_TRACE(std::string(dtype_name(src_dtype)) + " view " + shape_to_string(view) +
               (host_staging ? " host" : " device") + " staging");
  const size_t elem = dtype_size(src_dtype);
  std::vector<uint8_t> staging(static_cast<size_t>(num_elements(view)) * elem);
  if (src_dtype == DType::kF32) {
    std::vector<float> v = random_values<float>(staging.size() / 4, 8, -5, 5);
    v[0] = std::numeric_limits<float>::infinity();
    std::memcpy(staging.data(), v.data(), staging.size());
  } else {
    // Every 16-bit pattern family: subnormals, infinities, NaNs with payloads.
    std::vector<uint16_t> v(staging.size() / 2);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint16_t>(i * 2654435761u >> 7);
    if (v.size() > 4) v[1] = 0x0001, v[2] = 0x7C00, v[3] = 0xFE01, v[4] = 0x8000;
    std::memcpy(staging.data(), v.data(), staging.size());
  }
  Both dst(poisoned(static_cast<size_t>(shard_box.num_elements()) * 4));
  GpuBlock device_staging(staging);
  Array::Shard cd = dst.cpu_shard(shard_box), gd = dst.gpu_shard(shard_box);
  hf_permute_into_shard(kCpu, {.staging = reinterpret_cast<const std::byte*>(staging.data()),
                               .src_dtype = src_dtype,
                               .view_shape = &view,
                               .perm = perm,
                               .dst = &cd,
                               .region = &region});
  const std::byte* gpu_staging =
      host_staging ? reinterpret_cast<const std::byte*>(staging.data()) : device_staging.data();
  hf_permute_into_shard(kCuda, {.staging = gpu_staging,
                                .src_dtype = src_dtype,
                                .view_shape = &view,
                                .perm = perm,
                                .dst = &gd,
                                .region = &region});
  EXPECT_SAME_BITS(dst.gpu.download<uint8_t>(), dst.host);
}

TEST(CudaMemoryKernelsTest, HfPermuteIntoShardMatchesCpu) {
  MESHLAYOUT_REQUIRE_GPU();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool host : {false, true}) {
      // A (13, 7) file block transposed into rows 2:9, cols 4:17 of a (10, 20) shard.
      check_hf_permute(dtype, {13, 7}, {1, 0}, Box{{0, 0}, {10, 20}}, Box{{2, 4}, {7, 13}}, host);
      // Identity into the whole shard.
      check_hf_permute(dtype, {33, 65}, {0, 1}, Box{{0, 0}, {33, 65}}, Box{{0, 0}, {33, 65}}, host);
      // Rank 3: output dims (view 2, view 0, view 1).
      check_hf_permute(dtype, {4, 6, 5}, {2, 0, 1}, Box{{10, 0, 0}, {7, 4, 9}},
                       Box{{11, 0, 2}, {5, 4, 6}}, host);
    }
  }
  Both dst(poisoned(16));
  Array::Shard gd = dst.gpu_shard(Box{{0}, {4}});
  const Shape view{4};
  const Box region{{0}, {4}};
  const std::vector<int> perm{0};
  EXPECT_THROW(hf_permute_into_shard(kCuda, {.staging = dst.gpu.data(),
                                             .src_dtype = DType::kI32,
                                             .view_shape = &view,
                                             .perm = perm,
                                             .dst = &gd,
                                             .region = &region}),
               ValueError);
}

TEST(CudaMemoryKernelsTest, FindNonFiniteMatchesCpu) {
  MESHLAYOUT_REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::vector<std::pair<size_t, float>> bad : {std::vector<std::pair<size_t, float>>{},
                                                    {{1000, nan}, {5000, inf}},
                                                    {{77777, -inf}},
                                                    {{0, inf}, {3, nan}},
                                                    {{100002, nan}}}) {
    std::vector<float> x = random_values<float>(100003, 9);
    for (auto [at, v] : bad) x[at] = v;
    GpuBlock g(x);
    const Box box{{0, 0}, {1, 100003}};
    Array::Shard cs = host_shard(x, box), gs = g.shard(box);
    int64_t cpu_first = 7, gpu_first = 7;
    float cpu_value = 0, gpu_value = 0;
    find_non_finite(kCpu, {.shard = &cs, .first = &cpu_first, .value = &cpu_value});
    find_non_finite(kCuda, {.shard = &gs, .first = &gpu_first, .value = &gpu_value});
    EXPECT_EQ(gpu_first, cpu_first);
    if (cpu_first >= 0) {
      EXPECT_EQ(std::memcmp(&gpu_value, &cpu_value, sizeof(float)), 0) << gpu_value;
    }
  }
}

TEST(CudaMemoryKernelsTest, SumOfSquaresMatchesCpu) {
  MESHLAYOUT_REQUIRE_GPU();
  for (int64_t n : {1, 7, 100003, 3000017}) {
    std::vector<float> f = random_values<float>(static_cast<size_t>(n), 10, -2, 2);
    std::vector<double> d = random_values<double>(static_cast<size_t>(n), 11, -2, 2);
    GpuBlock gf(f), gd(d);
    const Box box{{0}, {n}};
    Array::Shard cf = host_shard(f, box), cd = host_shard(d, box);
    Array::Shard sf = gf.shard(box), sd = gd.shard(box);
    double cpu_f = 1.5, gpu_f = 1.5, cpu_d = 0.25, gpu_d = 0.25;
    sum_of_squares(kCpu, {.shard = &cf, .dtype = DType::kF32, .sum = &cpu_f});
    sum_of_squares(kCuda, {.shard = &sf, .dtype = DType::kF32, .sum = &gpu_f});
    sum_of_squares(kCpu, {.shard = &cd, .dtype = DType::kF64, .sum = &cpu_d});
    sum_of_squares(kCuda, {.shard = &sd, .dtype = DType::kF64, .sum = &gpu_d});
    EXPECT_NEAR(gpu_f, cpu_f, 1e-12 * cpu_f) << "n " << n;
    EXPECT_NEAR(gpu_d, cpu_d, 1e-12 * cpu_d) << "n " << n;
  }
}

}  // namespace
}  // namespace meshlayout
