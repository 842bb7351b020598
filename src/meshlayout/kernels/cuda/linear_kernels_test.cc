// linear_kernels_test.cc — the CUDA linear kernels (linear_kernels.cu, permute_kernels.cu)
// against their CPU implementations on the same random inputs: matmul_rows within 1e-5 (F32,
// cuBLAS without TF32) and 1e-12 (F64) of the CPU, BF16 within 1e-2 of a float64 reference;
// everything else bit for bit, including the bytes an op must leave alone (the GPU blocks start
// poisoned with 0xFF, the CPU buffers with the same bytes). Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/init/float_convert.h"
#include "meshlayout/kernels/bias.h"
#include "meshlayout/kernels/cuda/cuda_test_util.h"
#include "meshlayout/kernels/elementwise.h"
#include "meshlayout/kernels/matmul.h"
#include "meshlayout/kernels/normalization.h"
#include "meshlayout/kernels/permute.h"

namespace meshlayout {
namespace {

using testing_cuda::GpuBlock;
using testing_cuda::host_shard;
using testing_cuda::random_values;
using testing_cuda::relative_error;

constexpr DeviceKind kCpu = DeviceKind::kCpu;
constexpr DeviceKind kCuda = DeviceKind::kCuda;

template <typename T>
std::vector<T> poisoned(size_t n) {
  std::vector<T> v(n);
  std::memset(v.data(), 0xFF, n * sizeof(T));
  return v;
}

// The first index where the bytes of a and b differ, -1 if none.
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

template <typename T>
bool all_finite(const std::vector<T>& v) {
  for (const T& x : v) {
    if (!std::isfinite(static_cast<double>(x))) return false;
  }
  return true;
}

template <typename T>
constexpr DType dtype_of() {
  return sizeof(T) == 4 ? DType::kF32 : DType::kF64;
}

// ---- matmul_rows ----

// out rows [row, row + rows) of x (m × k) · w (k × n), on both kinds, with one replica.
template <typename T>
void check_matmul(int64_t m, int64_t k, int64_t n, int64_t row, int64_t rows, double tolerance) {
  SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n) + " rows " +
               std::to_string(row) + "+" + std::to_string(rows));
  std::vector<T> x = random_values<T>(static_cast<size_t>(m * k), 1 + m);
  std::vector<T> w = random_values<T>(static_cast<size_t>(k * n), 2 + n);
  std::vector<T> out = poisoned<T>(static_cast<size_t>(m * n)), replica = out;
  GpuBlock gx(x), gw(w), gout(out), grep(replica);
  const Box xb{{0, 0}, {m, k}}, wb{{0, 0}, {k, n}}, ob{{0, 0}, {m, n}};
  Array::Shard cx = host_shard(x, xb), cw = host_shard(w, wb), co = host_shard(out, ob),
               cr = host_shard(replica, ob);
  Array::Shard dx = gx.shard(xb), dw = gw.shard(wb), dout = gout.shard(ob), drep = grep.shard(ob);
  Array::Shard* cpu_replicas[] = {&cr};
  Array::Shard* gpu_replicas[] = {&drep};
  matmul_rows(kCpu, {.x = &cx,
                     .w = &cw,
                     .out = &co,
                     .replicas = cpu_replicas,
                     .k = k,
                     .n = n,
                     .row = row,
                     .rows = rows,
                     .dtype = dtype_of<T>()});
  matmul_rows(kCuda, {.x = &dx,
                      .w = &dw,
                      .out = &dout,
                      .replicas = gpu_replicas,
                      .k = k,
                      .n = n,
                      .row = row,
                      .rows = rows,
                      .dtype = dtype_of<T>()});
  std::vector<T> got = gout.download<T>(), got_replica = grep.download<T>();
  // Rows outside the range keep their (poisoned) bytes; inside, every element is written.
  const size_t lo = static_cast<size_t>(row * n), hi = static_cast<size_t>((row + rows) * n);
  std::vector<T> in_cpu(out.begin() + lo, out.begin() + hi),
      in_gpu(got.begin() + lo, got.begin() + hi);
  EXPECT_TRUE(all_finite(in_gpu)) << "an element of the row range was not written";
  EXPECT_LE(relative_error(in_gpu, in_cpu), tolerance);
  for (size_t i = 0; i < got.size(); ++i) {
    if (i >= lo && i < hi) continue;
    ASSERT_TRUE(std::isnan(static_cast<double>(got[i]))) << "element " << i << " outside the rows";
  }
  EXPECT_SAME_BITS(got_replica, got);
}

TEST(CudaLinearKernelsTest, MatmulRowsF32) {
  MESHLAYOUT_REQUIRE_GPU();
  check_matmul<float>(1, 1, 1, 0, 1, 1e-5);
  check_matmul<float>(7, 13, 5, 0, 7, 1e-5);
  check_matmul<float>(257, 129, 65, 0, 257, 1e-5);
  check_matmul<float>(257, 129, 65, 100, 57, 1e-5);  // a row chunk
  check_matmul<float>(64, 1000, 3, 5, 1, 1e-5);      // one row, long K
}

TEST(CudaLinearKernelsTest, MatmulRowsF64) {
  MESHLAYOUT_REQUIRE_GPU();
  check_matmul<double>(1, 1, 1, 0, 1, 1e-12);
  check_matmul<double>(7, 13, 5, 0, 7, 1e-12);
  check_matmul<double>(257, 129, 65, 0, 257, 1e-12);
  check_matmul<double>(257, 129, 65, 3, 200, 1e-12);
}

TEST(CudaLinearKernelsTest, MatmulRowsKZeroWritesZeros) {
  MESHLAYOUT_REQUIRE_GPU();
  GpuBlock gx(size_t{0}), gw(size_t{0}), gout(poisoned<float>(7 * 5));
  Array::Shard dx = gx.shard(Box{{0, 0}, {7, 0}}), dw = gw.shard(Box{{0, 0}, {0, 5}}),
               dout = gout.shard(Box{{0, 0}, {7, 5}});
  matmul_rows(kCuda, {.x = &dx,
                      .w = &dw,
                      .out = &dout,
                      .replicas = {},
                      .k = 0,
                      .n = 5,
                      .row = 0,
                      .rows = 7,
                      .dtype = DType::kF32});
  EXPECT_EQ(gout.download<float>(), std::vector<float>(35, 0.0f));
}

TEST(CudaLinearKernelsTest, MatmulRowsBf16AgainstFloat64) {
  MESHLAYOUT_REQUIRE_GPU();
  const int64_t m = 257, k = 129, n = 65;
  std::vector<float> xf = random_values<float>(m * k, 11), wf = random_values<float>(k * n, 12);
  std::vector<uint16_t> x(xf.size()), w(wf.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_from_float(xf[i]);
  for (size_t i = 0; i < w.size(); ++i) w[i] = bf16_from_float(wf[i]);
  std::vector<double> reference(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        sum += static_cast<double>(float_from_bf16(x[i * k + p])) * float_from_bf16(w[p * n + j]);
      }
      reference[i * n + j] = sum;
    }
  }
  GpuBlock gx(x), gw(w), gout(poisoned<uint16_t>(static_cast<size_t>(m * n)));
  Array::Shard dx = gx.shard(Box{{0, 0}, {m, k}}), dw = gw.shard(Box{{0, 0}, {k, n}}),
               dout = gout.shard(Box{{0, 0}, {m, n}});
  matmul_rows(kCuda, {.x = &dx,
                      .w = &dw,
                      .out = &dout,
                      .replicas = {},
                      .k = k,
                      .n = n,
                      .row = 0,
                      .rows = m,
                      .dtype = DType::kBF16});
  std::vector<uint16_t> bits = gout.download<uint16_t>();
  std::vector<double> got(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) got[i] = float_from_bf16(bits[i]);
  EXPECT_TRUE(all_finite(got));
  EXPECT_LE(relative_error(got, reference), 1e-2);
}

TEST(CudaLinearKernelsTest, MatmulRowsRefusesOtherDtypes) {
  MESHLAYOUT_REQUIRE_GPU();
  GpuBlock g(size_t{64});
  Array::Shard s = g.shard(Box{{0, 0}, {2, 2}});
  EXPECT_THROW(matmul_rows(kCuda, {.x = &s,
                                   .w = &s,
                                   .out = &s,
                                   .replicas = {},
                                   .k = 2,
                                   .n = 2,
                                   .row = 0,
                                   .rows = 2,
                                   .dtype = DType::kI32}),
               ValueError);
}

// ---- Element-wise ----

template <typename T>
void check_elementwise(int64_t rows, int64_t cols) {
  SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " " +
               std::string(dtype_name(dtype_of<T>())));
  const size_t n = static_cast<size_t>(rows * cols);
  const Box box{{0, 0}, {rows, cols}}, bias_box{{0}, {cols}};
  const std::vector<T> y0 = random_values<T>(n, 3), x = random_values<T>(n, 4, -2.0, 3.0);
  std::vector<T> b = random_values<T>(static_cast<size_t>(cols), 5), xc = x;
  auto run = [&](auto&& op) {  // op(kind, y shard, x shard, bias shard)
    std::vector<T> yc = y0;
    GpuBlock gy(y0), gx(x), gb(b);
    Array::Shard cy = host_shard(yc, box), cx = host_shard(xc, box), cb = host_shard(b, bias_box);
    Array::Shard dy = gy.shard(box), dx = gx.shard(box), db = gb.shard(bias_box);
    op(kCpu, cy, cx, cb);
    op(kCuda, dy, dx, db);
    std::vector<T> got = gy.download<T>();
    EXPECT_SAME_BITS(got, yc);
  };
  const DType dt = dtype_of<T>();
  run([&](DeviceKind k, Array::Shard& y, Array::Shard& xs, Array::Shard&) {
    add_into(k, {.dst = &y, .src = &xs, .n = static_cast<int64_t>(n), .dtype = dt});
  });
  run([&](DeviceKind k, Array::Shard& y, Array::Shard& xs, Array::Shard&) {
    combine_shards(k, {.y = &y, .x = &xs, .function = Binary::kAdd, .dtype = dt});
  });
  run([&](DeviceKind k, Array::Shard& y, Array::Shard& xs, Array::Shard&) {
    combine_shards(k, {.y = &y, .x = &xs, .function = Binary::kMultiply, .dtype = dt});
  });
  run([&](DeviceKind k, Array::Shard& y, Array::Shard&, Array::Shard& bs) {
    add_bias(k, {.y = &y, .bias = &bs, .inner = cols, .dtype = dt});
  });
  run([&](DeviceKind k, Array::Shard& y, Array::Shard&, Array::Shard&) {
    scale_elements(k, {.a = &y, .factor = 1.0 / 3.0, .dtype = dt});
  });
  run([&](DeviceKind k, Array::Shard& y, Array::Shard&, Array::Shard&) {  // a prefix only
    add_into(k, {.dst = &y, .src = &y, .n = static_cast<int64_t>(n / 2), .dtype = dt});
  });
}

TEST(CudaLinearKernelsTest, ElementwiseOpsMatchCpuBitForBit) {
  MESHLAYOUT_REQUIRE_GPU();
  for (auto [r, c] : {std::pair<int64_t, int64_t>{1, 1}, {7, 13}, {257, 33}, {3, 100003}}) {
    check_elementwise<float>(r, c);
    check_elementwise<double>(r, c);
  }
}

// ---- transpose_box, permute_shard, concatenate_shards ----

template <typename T>
void check_transpose(int64_t rows, int64_t cols) {
  SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
  std::vector<T> src = random_values<T>(static_cast<size_t>(rows * cols), 6);
  std::vector<T> dst = poisoned<T>(src.size());
  GpuBlock gs(src), gd(dst);
  const Box sb{{0, 0}, {rows, cols}}, db{{0, 0}, {cols, rows}};
  Array::Shard cs = host_shard(src, sb), cd = host_shard(dst, db);
  Array::Shard ds = gs.shard(sb), dd = gd.shard(db);
  transpose_box(kCpu, {.dst = &cd, .src = &cs, .dtype = dtype_of<T>()});
  transpose_box(kCuda, {.dst = &dd, .src = &ds, .dtype = dtype_of<T>()});
  std::vector<T> got = gd.download<T>();
  EXPECT_SAME_BITS(got, dst);
}

TEST(CudaLinearKernelsTest, TransposeBoxMatchesCpu) {
  MESHLAYOUT_REQUIRE_GPU();
  for (auto [r, c] : {std::pair<int64_t, int64_t>{1, 1}, {7, 13}, {257, 33}, {33, 1000}, {1, 77}}) {
    check_transpose<float>(r, c);
    check_transpose<double>(r, c);
  }
}

// Bytes of `shape` permuted by `perm` with elements of `elem` bytes; the GPU blocks are offset
// by `misalign` bytes to force narrow words.
void check_permute(const Shape& shape, const std::vector<int>& perm, size_t elem,
                   size_t misalign = 0) {
  SCOPED_TRACE(shape_to_string(shape) + " elem " + std::to_string(elem) + " misalign " +
               std::to_string(misalign));
  const int64_t n = num_elements(shape);
  std::vector<uint8_t> src(static_cast<size_t>(n) * elem + misalign);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  std::vector<uint8_t> dst = poisoned<uint8_t>(src.size());
  Shape out_shape(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) out_shape[i] = shape[static_cast<size_t>(perm[i])];
  GpuBlock gs(src), gd(dst);
  std::vector<uint8_t> src_host(src.begin() + static_cast<int64_t>(misalign), src.end());
  std::vector<uint8_t> dst_host = poisoned<uint8_t>(src_host.size());
  Array::Shard cs = host_shard(src_host, Box{Shape(shape.size(), 0), shape});
  Array::Shard cd = host_shard(dst_host, Box{Shape(shape.size(), 0), out_shape});
  Array::Shard ds{0, 0, Box{Shape(shape.size(), 0), shape},
                  DeviceBuffer::borrowed(gs.data() + misalign, src_host.size())};
  Array::Shard dd{0, 0, Box{Shape(shape.size(), 0), out_shape},
                  DeviceBuffer::borrowed(gd.data() + misalign, src_host.size())};
  permute_shard(kCpu, {.src = &cs, .dst = &cd, .perm = perm, .element_size = elem});
  permute_shard(kCuda, {.src = &ds, .dst = &dd, .perm = perm, .element_size = elem});
  std::vector<uint8_t> got = gd.download<uint8_t>();
  std::vector<uint8_t> got_box(got.begin() + static_cast<int64_t>(misalign), got.end());
  EXPECT_SAME_BITS(got_box, dst_host);
  for (size_t i = 0; i < misalign; ++i) EXPECT_EQ(got[i], 0xFF) << "byte before the shard";
}

TEST(CudaLinearKernelsTest, PermuteShardMatchesCpu) {
  MESHLAYOUT_REQUIRE_GPU();
  for (size_t elem : {1, 2, 3, 4, 8, 16}) {
    check_permute({7, 13, 5}, {2, 0, 1}, elem);
    check_permute({7, 13, 5}, {0, 2, 1}, elem);
    check_permute({7, 13, 5}, {0, 1, 2}, elem);  // identity: one merged run
    check_permute({2, 3, 4, 5}, {3, 1, 0, 2}, elem);
    check_permute({257, 33}, {1, 0}, elem);
    check_permute({1, 9, 1}, {2, 1, 0}, elem);
    check_permute({11}, {0}, elem);
    check_permute({64, 48, 40}, {2, 1, 0}, elem);      // tiled, a batch of 48 planes
    check_permute({2, 7, 3, 16}, {0, 2, 1, 3}, elem);  // heads first: rows stay contiguous
    check_permute({3, 100, 70}, {0, 2, 1}, elem);      // tiled, partial tiles
  }
  check_permute({7, 13, 5}, {1, 2, 0}, 4, 1);  // misaligned buffers: byte words
  check_permute({7, 13, 5}, {1, 2, 0}, 8, 4);
}

void check_concatenate(const std::vector<Shape>& inputs, size_t axis, size_t elem) {
  SCOPED_TRACE("axis " + std::to_string(axis) + " elem " + std::to_string(elem));
  Shape out_shape = inputs[0];
  out_shape[axis] = 0;
  for (const Shape& s : inputs) out_shape[axis] += s[axis];
  std::vector<std::vector<uint8_t>> data;
  std::vector<std::unique_ptr<GpuBlock>> blocks;
  std::vector<Array::Shard> cpu, gpu;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<uint8_t> d(static_cast<size_t>(num_elements(inputs[i])) * elem);
    for (size_t j = 0; j < d.size(); ++j) d[j] = static_cast<uint8_t>(j * 37 + i * 11 + 1);
    data.push_back(std::move(d));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Box box{Shape(inputs[i].size(), 0), inputs[i]};
    blocks.push_back(std::make_unique<GpuBlock>(data[i]));
    cpu.push_back(host_shard(data[i], box));
    gpu.push_back(blocks.back()->shard(box));
  }
  std::vector<const Array::Shard*> cpu_ptrs, gpu_ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    cpu_ptrs.push_back(&cpu[i]);
    gpu_ptrs.push_back(&gpu[i]);
  }
  std::vector<uint8_t> out = poisoned<uint8_t>(static_cast<size_t>(num_elements(out_shape)) * elem);
  GpuBlock gout(out);
  const Box ob{Shape(out_shape.size(), 0), out_shape};
  Array::Shard co = host_shard(out, ob), go = gout.shard(ob);
  concatenate_shards(kCpu, {.dst = &co, .inputs = cpu_ptrs, .axis = axis, .elem = elem});
  concatenate_shards(kCuda, {.dst = &go, .inputs = gpu_ptrs, .axis = axis, .elem = elem});
  std::vector<uint8_t> got = gout.download<uint8_t>();
  EXPECT_SAME_BITS(got, out);
}

TEST(CudaLinearKernelsTest, ConcatenateShardsMatchesCpu) {
  MESHLAYOUT_REQUIRE_GPU();
  for (size_t elem : {1, 2, 4, 8}) {
    check_concatenate({{7, 3, 5}, {7, 0, 5}, {7, 4, 5}}, 1, elem);
    check_concatenate({{2, 13}, {5, 13}}, 0, elem);
    check_concatenate({{7, 3}, {7, 1}, {7, 9}}, 1, elem);
    check_concatenate({{1, 1}}, 1, elem);
  }
}

// ---- sum_piece ----

// dst box (with `also` replicas) = Σ terms over `region`; each term has `sizes[t]` sources, each
// source with a box of its own around the region (sources alternate between gpu:0 and gpu:1,
// both on physical GPU 0 when there is one).
template <typename T>
void check_sum_piece(const std::vector<int>& sizes, int also_count) {
  SCOPED_TRACE("terms " + std::to_string(sizes.size()) + " also " + std::to_string(also_count));
  const Box dst_box{{2, 10, 0}, {9, 20, 6}}, region{{4, 12, 0}, {5, 13, 6}};
  std::vector<Box> boxes = {
      {{3, 11, 0}, {7, 17, 6}}, {{4, 12, 0}, {5, 13, 6}}, {{0, 0, 0}, {12, 40, 6}}};
  struct Source {
    std::vector<T> host;
    std::unique_ptr<GpuBlock> gpu;
    Array::Shard cpu_shard, gpu_shard;
  };
  std::vector<std::unique_ptr<Source>> sources;
  std::vector<std::vector<const Array::Shard*>> cpu_terms, gpu_terms;
  for (size_t t = 0; t < sizes.size(); ++t) {
    cpu_terms.emplace_back();
    gpu_terms.emplace_back();
    for (int j = 0; j < sizes[t]; ++j) {
      auto s = std::make_unique<Source>();
      const Box& box = boxes[sources.size() % boxes.size()];
      s->host = random_values<T>(static_cast<size_t>(box.num_elements()), 100 + sources.size());
      s->gpu = std::make_unique<GpuBlock>(s->host, static_cast<int64_t>(sources.size() % 2));
      s->cpu_shard = host_shard(s->host, box);
      s->gpu_shard = s->gpu->shard(box);
      cpu_terms.back().push_back(&s->cpu_shard);
      gpu_terms.back().push_back(&s->gpu_shard);
      sources.push_back(std::move(s));
    }
  }
  const size_t n = static_cast<size_t>(dst_box.num_elements());
  std::vector<T> dst = poisoned<T>(n);
  std::vector<std::vector<T>> also(static_cast<size_t>(also_count), poisoned<T>(n));
  GpuBlock gdst(dst);
  std::vector<std::unique_ptr<GpuBlock>> galso;
  std::vector<Array::Shard> cpu_also_shards, gpu_also_shards;
  for (auto& a : also) {
    galso.push_back(std::make_unique<GpuBlock>(a));
    cpu_also_shards.push_back(host_shard(a, dst_box));
    gpu_also_shards.push_back(galso.back()->shard(dst_box));
  }
  std::vector<Array::Shard*> cpu_also, gpu_also;
  for (size_t i = 0; i < also.size(); ++i) {
    cpu_also.push_back(&cpu_also_shards[i]);
    gpu_also.push_back(&gpu_also_shards[i]);
  }
  Array::Shard cd = host_shard(dst, dst_box), gd = gdst.shard(dst_box);
  for (bool stream : {false, true}) {
    sum_piece(kCpu, {.dst = &cd,
                     .region = region,
                     .terms = cpu_terms,
                     .also = cpu_also,
                     .stream = stream,
                     .dtype = dtype_of<T>()});
    sum_piece(kCuda, {.dst = &gd,
                      .region = region,
                      .terms = gpu_terms,
                      .also = gpu_also,
                      .stream = stream,
                      .dtype = dtype_of<T>()});
  }
  std::vector<T> got = gdst.download<T>();
  EXPECT_SAME_BITS(got, dst);
  for (size_t i = 0; i < also.size(); ++i) {
    std::vector<T> got_also = galso[i]->download<T>();
    EXPECT_SAME_BITS(got_also, also[i]);
  }
}

TEST(CudaLinearKernelsTest, SumPieceMatchesCpuBitForBit) {
  MESHLAYOUT_REQUIRE_GPU();
  check_sum_piece<float>({1}, 0);
  check_sum_piece<float>({1, 1, 1}, 1);
  check_sum_piece<float>({2, 1, 3}, 2);
  check_sum_piece<float>({}, 1);                     // no terms: zeros
  check_sum_piece<float>({3, 3, 3, 3, 3, 3, 2}, 1);  // 20 sources: descriptors in scratch
  check_sum_piece<float>({1, 2}, 9);                 // 9 replicas: in scratch
  check_sum_piece<double>({1, 1, 1, 1}, 1);
  check_sum_piece<double>({4, 2}, 0);
}

TEST(CudaLinearKernelsTest, SumPieceWholeBoxes) {
  MESHLAYOUT_REQUIRE_GPU();
  // Every box equal to the region: one contiguous run.
  const Box box{{0, 0}, {257, 33}};
  std::vector<float> a = random_values<float>(257 * 33, 1), b = random_values<float>(257 * 33, 2);
  std::vector<float> dst = poisoned<float>(a.size());
  GpuBlock ga(a), gb(b), gd(dst);
  Array::Shard ca = host_shard(a, box), cb = host_shard(b, box), cd = host_shard(dst, box);
  Array::Shard da = ga.shard(box), db = gb.shard(box), dd = gd.shard(box);
  std::vector<std::vector<const Array::Shard*>> cpu_terms = {{&ca}, {&cb}},
                                                gpu_terms = {{&da}, {&db}};
  sum_piece(kCpu, {.dst = &cd,
                   .region = box,
                   .terms = cpu_terms,
                   .also = {},
                   .stream = false,
                   .dtype = DType::kF32});
  sum_piece(kCuda, {.dst = &dd,
                    .region = box,
                    .terms = gpu_terms,
                    .also = {},
                    .stream = false,
                    .dtype = DType::kF32});
  std::vector<float> got = gd.download<float>();
  EXPECT_SAME_BITS(got, dst);
}

}  // namespace
}  // namespace meshlayout
