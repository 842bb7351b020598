// adafactor_kernels_test.cc — the CUDA Adafactor kernels (adafactor_kernels.cu) against their CPU
// implementations on the same random inputs, F32 and F64, on boxes of rank 2 and 3 whose sizes are
// not multiples of the block size (1×1, 7×13, 3×7×13, 257×33) and empty ones. Every kernel but
// adafactor_sum_u_squares is compared BIT FOR BIT (one thread per output, the CPU's loop order and
// roundings); the sum of squared updates, a tree reduction in double, within 1e-12 relative.
// Outputs start poisoned on the GPU (0xFF = NaN) so an element left unwritten shows.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/adafactor.h"
#include "meshlayout/kernels/cuda/cuda_test_util.h"

namespace meshlayout {
namespace {

using testing_cuda::GpuBlock;
using testing_cuda::host_shard;
using testing_cuda::random_values;

constexpr DeviceKind kCpu = DeviceKind::kCpu;
constexpr DeviceKind kCuda = DeviceKind::kCuda;

template <typename T>
constexpr DType dtype_of() {
  return sizeof(T) == 4 ? DType::kF32 : DType::kF64;
}

template <typename T>
void expect_same_bits(const std::vector<T>& gpu, const std::vector<T>& cpu,
                      const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (std::memcmp(&gpu[i], &cpu[i], sizeof(T)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " of " << cpu.size() << ": GPU " << gpu[i]
                    << ", CPU " << cpu[i];
      return;
    }
  }
}

// An array on both sides. Inputs: the same values on both. Outputs (poisoned = true): the GPU
// block poisoned, the host -7s.
template <typename T>
struct Both {
  std::vector<T> host;
  std::unique_ptr<GpuBlock> gpu;
  Box box;
  Array::Shard cpu, dev;
  Both(std::vector<T> values, Box b, bool poisoned = false)
      : host(std::move(values)),
        gpu(poisoned ? std::make_unique<GpuBlock>(host.size() * sizeof(T))
                     : std::make_unique<GpuBlock>(host)),
        box(std::move(b)),
        cpu(host_shard(host, box)),
        dev(gpu->shard(box)) {
    if (poisoned) std::fill(host.begin(), host.end(), T(-7));
  }
  void expect_same(const std::string& what) { expect_same_bits(gpu->download<T>(), host, what); }
};

int64_t count_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
Box box_of(Shape shape) { return Box{Shape(shape.size(), 0), std::move(shape)}; }

// A random array of `shape` on both sides, uniform in [lo, hi).
template <typename T>
Both<T> random_both(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return Both<T>(random_values<T>(static_cast<size_t>(count_of(shape)), seed, lo, hi),
                 box_of(shape));
}
template <typename T>
Both<T> poisoned_both(const Shape& shape) {
  return Both<T>(std::vector<T>(static_cast<size_t>(count_of(shape))), box_of(shape), true);
}

std::vector<Shape> variable_shapes() {
  return {{1, 1}, {7, 13}, {3, 7, 13}, {257, 33}, {0, 5}, {2, 0, 3}};
}

std::string label(DType dtype, const Shape& shape) {
  std::string s = std::string(dtype_name(dtype)) + " shape";
  for (int64_t d : shape) {
    s += ' ';
    s += std::to_string(d);
  }
  return s;
}

template <typename T>
void check_partial_sums_and_factored() {
  uint64_t seed = 11;
  for (const Shape& shape : variable_shapes()) {
    SCOPED_TRACE(label(dtype_of<T>(), shape));
    const int dm = static_cast<int>(shape.size()) - 2, dn = dm + 1;
    Shape rows_shape = shape, cols_shape = shape;
    rows_shape[static_cast<size_t>(dn)] = 1;
    cols_shape[static_cast<size_t>(dm)] = 1;
    Both<T> g = random_both<T>(shape, ++seed);
    Both<T> rows = poisoned_both<T>(rows_shape), cols = poisoned_both<T>(cols_shape);
    for (DeviceKind kind : {kCpu, kCuda}) {
      const bool gpu = kind == kCuda;
      adafactor_partial_sums(kind, {.g = gpu ? &g.dev : &g.cpu,
                                    .rows = gpu ? &rows.dev : &rows.cpu,
                                    .cols = gpu ? &cols.dev : &cols.cpu,
                                    .dtype = dtype_of<T>(),
                                    .dm = dm,
                                    .dn = dn,
                                    .epsilon_1 = 1e-30});
    }
    rows.expect_same("partial rows");
    cols.expect_same("partial cols");

    // The factored velocity from positive r, c and row totals over 3 blocks of dm.
    const int64_t bm = shape[static_cast<size_t>(dm)], bn = shape[static_cast<size_t>(dn)];
    const int64_t lead = bm * bn == 0 ? 0 : count_of(shape) / (bm * bn);
    const int64_t blocks = 3;
    Both<T> r = random_both<T>({lead, bm}, ++seed, 0.5, 1.5);
    Both<T> c = random_both<T>({lead, bn}, ++seed, 0.5, 1.5);
    Both<T> totals = random_both<T>({lead, blocks}, ++seed, 0.5, 1.5);
    Both<T> v = poisoned_both<T>(shape);
    for (DeviceKind kind : {kCpu, kCuda}) {
      const bool gpu = kind == kCuda;
      adafactor_factored_velocity(kind, {.v = gpu ? &v.dev : &v.cpu,
                                         .r = gpu ? &r.dev : &r.cpu,
                                         .c = gpu ? &c.dev : &c.cpu,
                                         .totals = gpu ? &totals.dev : &totals.cpu,
                                         .dtype = dtype_of<T>(),
                                         .dm = dm,
                                         .dn = dn,
                                         .blocks = blocks,
                                         .m = 3 * bm + 1});
    }
    v.expect_same("factored velocity");
  }
}

template <typename T>
void check_means_and_totals() {
  uint64_t seed = 23;
  for (const Shape& rc : std::vector<Shape>{{1, 1}, {7, 13}, {257, 33}, {0, 4}}) {
    SCOPED_TRACE(label(dtype_of<T>(), rc));
    const int64_t lead = rc[0], inner = rc[1], blocks = 3;
    // Rows: r has lead·inner elements, sums blocks per element.
    Both<T> r = random_both<T>(rc, ++seed, 0.0, 1.0);
    Both<T> row_sums = random_both<T>({lead * inner, blocks}, ++seed, 0.0, 2.0);
    // Columns: c is [lead, inner], sums [lead, blocks, inner].
    Both<T> c = random_both<T>(rc, ++seed, 0.0, 1.0);
    Both<T> col_sums = random_both<T>({lead, blocks, inner}, ++seed, 0.0, 2.0);
    Both<T> totals = poisoned_both<T>({lead});
    for (DeviceKind kind : {kCpu, kCuda}) {
      const bool gpu = kind == kCuda;
      adafactor_rows(kind, {.r = gpu ? &r.dev : &r.cpu,
                            .sums = gpu ? &row_sums.dev : &row_sums.cpu,
                            .dtype = dtype_of<T>(),
                            .blocks = blocks,
                            .n = 41,
                            .beta = 0.8,
                            .one_minus_beta = 0.2});
      adafactor_cols(kind, {.c = gpu ? &c.dev : &c.cpu,
                            .sums = gpu ? &col_sums.dev : &col_sums.cpu,
                            .dtype = dtype_of<T>(),
                            .blocks = blocks,
                            .m = 29,
                            .beta = 0.8,
                            .one_minus_beta = 0.2});
      adafactor_row_totals(kind, {.r = gpu ? &r.dev : &r.cpu,
                                  .out = gpu ? &totals.dev : &totals.cpu,
                                  .dtype = dtype_of<T>()});
    }
    r.expect_same("rows");
    c.expect_same("cols");
    totals.expect_same("row totals");
  }
}

template <typename T>
void check_velocity_sum_and_apply() {
  uint64_t seed = 37;
  for (const Shape& shape : variable_shapes()) {
    SCOPED_TRACE(label(dtype_of<T>(), shape));
    Both<T> g = random_both<T>(shape, ++seed);
    Both<T> v = random_both<T>(shape, ++seed, 0.1, 1.0);
    Both<T> theta = random_both<T>(shape, ++seed);
    double sums[2] = {0.25, 0.25};
    for (DeviceKind kind : {kCpu, kCuda}) {
      const bool gpu = kind == kCuda;
      adafactor_velocity(kind, {.v = gpu ? &v.dev : &v.cpu,
                                .g = gpu ? &g.dev : &g.cpu,
                                .dtype = dtype_of<T>(),
                                .beta = 0.7,
                                .one_minus_beta = 0.3,
                                .epsilon_1 = 1e-30});
      adafactor_sum_u_squares(kind, {.g = gpu ? &g.dev : &g.cpu,
                                     .v = gpu ? &v.dev : &v.cpu,
                                     .dtype = dtype_of<T>(),
                                     .sum = &sums[gpu ? 1 : 0]});
      adafactor_apply(kind, {.theta = gpu ? &theta.dev : &theta.cpu,
                             .g = gpu ? &g.dev : &g.cpu,
                             .v = gpu ? &v.dev : &v.cpu,
                             .dtype = dtype_of<T>(),
                             .alpha_t = 0.01,
                             .divisor = 1.3});
    }
    v.expect_same("velocity");
    EXPECT_LE(std::abs(sums[1] - sums[0]), 1e-12 * std::abs(sums[0]))
        << "sum_u_squares GPU " << sums[1] << " CPU " << sums[0];
    theta.expect_same("theta");
  }
}

TEST(CudaAdafactorKernelsTest, PartialSumsAndFactoredVelocityMatchCpuBitForBit) {
  MESHLAYOUT_REQUIRE_GPU();
  check_partial_sums_and_factored<float>();
  check_partial_sums_and_factored<double>();
}

TEST(CudaAdafactorKernelsTest, RowsColsAndRowTotalsMatchCpuBitForBit) {
  MESHLAYOUT_REQUIRE_GPU();
  check_means_and_totals<float>();
  check_means_and_totals<double>();
}

TEST(CudaAdafactorKernelsTest, VelocitySumOfUpdatesAndApplyMatchCpu) {
  MESHLAYOUT_REQUIRE_GPU();
  check_velocity_sum_and_apply<float>();
  check_velocity_sum_and_apply<double>();
}

// Needs no GPU: the dtype check runs before any CUDA call.
TEST(CudaAdafactorKernelsTest, RejectsOtherDtypes) {
  std::vector<float> x(4, 1.0f);
  Array::Shard s = host_shard(x, Box{{0}, {4}});
  EXPECT_THROW(adafactor_velocity(kCuda, {.v = &s,
                                          .g = &s,
                                          .dtype = DType::kBF16,
                                          .beta = 0.5,
                                          .one_minus_beta = 0.5,
                                          .epsilon_1 = 1e-30}),
               ValueError);
}

}  // namespace
}  // namespace meshlayout
