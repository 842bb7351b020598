// layer_kernels_test.cc — the CUDA layer kernels of layer_kernels.cu and attention_kernels.cu's
// rotate_half against their CPU implementations on the same random inputs, F32 and F64, shapes
// that are not multiples of any block size: rms_norm_forward, layer_norm_forward,
// activation_forward, gated_forward, soft_cap_shard, embedding_lookup, embedding_find_bad_id,
// rotate_half. Every test but the registration one skips without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "meshlayout/array/host_tensor.h"
#include "meshlayout/kernels/activation.h"
#include "meshlayout/kernels/attention.h"
#include "meshlayout/kernels/cross_entropy.h"
#include "meshlayout/kernels/cuda/layer_kernels_test_util.h"
#include "meshlayout/kernels/cuda/register.h"
#include "meshlayout/kernels/embedding.h"
#include "meshlayout/kernels/gated_activation.h"
#include "meshlayout/kernels/normalization.h"
#include "meshlayout/kernels/soft_cap.h"

namespace meshlayout::testing_cuda {
namespace {

constexpr DeviceKind kCpu = DeviceKind::kCpu;
constexpr DeviceKind kCuda = DeviceKind::kCuda;

TEST(CudaLayerKernelsTest, RegistersEveryOp) {  // needs no GPU
  register_cuda_kernels();
  EXPECT_TRUE(rms_norm_forward.defined(kCuda));
  EXPECT_TRUE(layer_norm_forward.defined(kCuda));
  EXPECT_TRUE(activation_forward.defined(kCuda));
  EXPECT_TRUE(gated_forward.defined(kCuda));
  EXPECT_TRUE(soft_cap_shard.defined(kCuda));
  EXPECT_TRUE(embedding_lookup.defined(kCuda));
  EXPECT_TRUE(embedding_find_bad_id.defined(kCuda));
  EXPECT_TRUE(rotate_half.defined(kCuda));
  EXPECT_TRUE(attention_head_forward.defined(kCuda));
  EXPECT_TRUE(attention_head_backward.defined(kCuda));
  EXPECT_TRUE(cross_entropy_stats.defined(kCuda));
  EXPECT_TRUE(cross_entropy_stats2.defined(kCuda));
  EXPECT_TRUE(cross_entropy_loss_sum.defined(kCuda));
  EXPECT_TRUE(cross_entropy_row_losses.defined(kCuda));
  EXPECT_TRUE(cross_entropy_grad.defined(kCuda));
  EXPECT_TRUE(rms_norm_backward.defined(kCuda));
  EXPECT_TRUE(layer_norm_backward.defined(kCuda));
  EXPECT_TRUE(activation_backward.defined(kCuda));
  EXPECT_TRUE(gated_backward.defined(kCuda));
  EXPECT_TRUE(soft_cap_backward_shard.defined(kCuda));
  EXPECT_TRUE(embedding_scatter_add.defined(kCuda));
}

template <typename E>
class CudaLayerKernelsTypedTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CudaLayerKernelsTypedTest, FloatTypes);

// (rows, features) pairs: odd sizes, one element, a row longer than a block, the 8-lane tail.
const std::vector<std::pair<int64_t, int64_t>> kRowShapes = {{7, 13}, {1, 1},    {33, 257},
                                                             {5, 8},  {3, 4099}, {300, 17}};

std::string shape_name(int64_t rows, int64_t features) {
  return std::to_string(rows) + "x" + std::to_string(features);
}

TYPED_TEST(CudaLayerKernelsTypedTest, RmsNormForward) {
  using E = TypeParam;
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 1;
  for (auto [rows, f] : kRowShapes) {
    for (bool in_place : {false, true}) {
      const std::string what = "rms_norm " + shape_name(rows, f) + (in_place ? " in place" : "");
      std::vector<E> x = random_values<E>(static_cast<size_t>(rows * f), seed++, -2, 2);
      std::vector<E> scale = random_values<E>(static_cast<size_t>(f), seed++, 0.5, 1.5);
      const Box box{{0, 0}, {rows, f}}, sbox{{0}, {f}};
      std::vector<E> cpu_y = in_place ? x : std::vector<E>(x.size(), E(0));
      Array::Shard cx = host_shard(x, box), cy = host_shard(cpu_y, box),
                   cs = host_shard(scale, sbox);
      rms_norm_forward(kCpu, {.y = &cy,
                              .x = in_place ? &cy : &cx,
                              .scale = &cs,
                              .features = f,
                              .epsilon = 1e-6,
                              .dtype = dtype_of<E>()});
      GpuBlock gx(x), gscale(scale), gy(x.size() * sizeof(E));
      Array::Shard dx = gx.shard(box), dy = gy.shard(box), ds = gscale.shard(sbox);
      rms_norm_forward(kCuda, {.y = in_place ? &dx : &dy,
                               .x = &dx,
                               .scale = &ds,
                               .features = f,
                               .epsilon = 1e-6,
                               .dtype = dtype_of<E>()});
      const std::vector<E> got = in_place ? gx.download<E>() : gy.download<E>();
      expect_near_cpu(got, cpu_y, tolerance<E>(), what);
      // The CPU's eight E lanes are replayed in order: the same bits are expected. Reported
      // (not failed) so a difference shows without hiding the tolerance check above.
      int64_t differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += got[i] != cpu_y[i];
      if (differ > 0) std::cout << what << ": " << differ << " elements not bit-identical\n";
    }
  }
}

TYPED_TEST(CudaLayerKernelsTypedTest, LayerNormForward) {
  using E = TypeParam;
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 100;
  for (auto [rows, f] : kRowShapes) {
    for (int affine = 0; affine < 4; ++affine) {  // gamma, beta: each present or not
      const bool with_gamma = affine & 1, with_beta = affine & 2;
      const std::string what = "layer_norm " + shape_name(rows, f) + " gamma " +
                               std::to_string(with_gamma) + " beta " + std::to_string(with_beta);
      std::vector<E> x = random_values<E>(static_cast<size_t>(rows * f), seed++, -3, 5);
      std::vector<E> gamma = random_values<E>(static_cast<size_t>(f), seed++, 0.5, 1.5);
      std::vector<E> beta = random_values<E>(static_cast<size_t>(f), seed++, -1, 1);
      const Box box{{0, 0}, {rows, f}}, fbox{{0}, {f}};
      std::vector<E> cpu_y = x;
      Array::Shard cy = host_shard(cpu_y, box), cg = host_shard(gamma, fbox),
                   cb = host_shard(beta, fbox);
      layer_norm_forward(kCpu, {.y = &cy,
                                .gamma = with_gamma ? &cg : nullptr,
                                .beta = with_beta ? &cb : nullptr,
                                .features = f,
                                .epsilon = 1e-3,
                                .dtype = dtype_of<E>()});
      GpuBlock gy(x), gg(gamma), gb(beta);
      Array::Shard dy = gy.shard(box), dg = gg.shard(fbox), db = gb.shard(fbox);
      layer_norm_forward(kCuda, {.y = &dy,
                                 .gamma = with_gamma ? &dg : nullptr,
                                 .beta = with_beta ? &db : nullptr,
                                 .features = f,
                                 .epsilon = 1e-3,
                                 .dtype = dtype_of<E>()});
      expect_near_cpu(gy.download<E>(), cpu_y, tolerance<E>(), what);
    }
  }
}

TYPED_TEST(CudaLayerKernelsTypedTest, ActivationForward) {
  using E = TypeParam;
  MESHLAYOUT_REQUIRE_GPU();
  const std::pair<ActivationFunction, const char*> functions[] = {
      {ActivationFunction::kLinear, "linear"},   {ActivationFunction::kRelu, "relu"},
      {ActivationFunction::kGelu, "gelu"},       {ActivationFunction::kTanh, "tanh"},
      {ActivationFunction::kSoftmax, "softmax"}, {ActivationFunction::kSilu, "silu"}};
  uint64_t seed = 200;
  for (auto [function, name] : functions) {
    for (auto [rows, f] : kRowShapes) {
      const std::string what = std::string(name) + " " + shape_name(rows, f);
      std::vector<E> x = random_values<E>(static_cast<size_t>(rows * f), seed++, -6, 6);
      const Box box{{0, 0}, {rows, f}};
      std::vector<E> cpu_y = x;
      Array::Shard cy = host_shard(cpu_y, box);
      activation_forward(kCpu, {.y = &cy, .function = function, .row = f, .dtype = dtype_of<E>()});
      GpuBlock gy(x);
      Array::Shard dy = gy.shard(box);
      activation_forward(kCuda, {.y = &dy, .function = function, .row = f, .dtype = dtype_of<E>()});
      const std::vector<E> got = gy.download<E>();
      if (function == ActivationFunction::kRelu || function == ActivationFunction::kLinear) {
        expect_bits_equal(got, cpu_y, what);
      } else {
        expect_near_cpu(got, cpu_y, tolerance<E>(), what);
      }
    }
  }
}

TYPED_TEST(CudaLayerKernelsTypedTest, GatedForward) {
  using E = TypeParam;
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 300;
  for (GateFunction function : {GateFunction::kSilu, GateFunction::kGeluTanh}) {
    for (auto [rows, f] : kRowShapes) {
      const std::string what =
          std::string(function == GateFunction::kSilu ? "swiglu " : "geglu ") + shape_name(rows, f);
      const size_t n = static_cast<size_t>(rows * f);
      std::vector<E> g = random_values<E>(n, seed++, -8, 8), u = random_values<E>(n, seed++, -2, 2);
      const Box box{{0, 0}, {rows, f}};
      std::vector<E> cpu_y(n, E(0));
      Array::Shard cy = host_shard(cpu_y, box), cg = host_shard(g, box), cu = host_shard(u, box);
      gated_forward(kCpu,
                    {.y = &cy, .g = &cg, .u = &cu, .function = function, .dtype = dtype_of<E>()});
      GpuBlock gy(n * sizeof(E)), gg(g), gu(u);
      Array::Shard dy = gy.shard(box), dg = gg.shard(box), du = gu.shard(box);
      gated_forward(kCuda,
                    {.y = &dy, .g = &dg, .u = &du, .function = function, .dtype = dtype_of<E>()});
      expect_near_cpu(gy.download<E>(), cpu_y, tolerance<E>(), what);
    }
  }
}

TYPED_TEST(CudaLayerKernelsTypedTest, SoftCapShard) {
  using E = TypeParam;
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 400;
  for (double cap : {30.0, 2.5}) {
    for (auto [rows, f] : kRowShapes) {
      const std::string what = "soft_cap " + std::to_string(cap) + " " + shape_name(rows, f);
      std::vector<E> x = random_values<E>(static_cast<size_t>(rows * f), seed++, -50, 50);
      const Box box{{0, 0}, {rows, f}};
      std::vector<E> cpu_y = x;
      Array::Shard cy = host_shard(cpu_y, box);
      soft_cap_shard(kCpu, {.shard = &cy, .dtype = dtype_of<E>(), .cap = cap});
      GpuBlock gy(x);
      Array::Shard dy = gy.shard(box);
      soft_cap_shard(kCuda, {.shard = &dy, .dtype = dtype_of<E>(), .cap = cap});
      expect_near_cpu(gy.download<E>(), cpu_y, tolerance<E>(), what);
    }
  }
}

// Token ids in [0, 60) against a table shard holding rows [10, 47): some tokens hit, some get
// zeros; the result is copied to two replicas (virtual devices gpu:0 and gpu:1, one GPU or two).
template <typename Id, typename W>
void check_lookup(int64_t tokens_rows, int64_t tokens_cols, int64_t cols, uint64_t seed) {
  const int64_t n = tokens_rows * tokens_cols, r0 = 10, rows = 37;
  std::vector<Id> ids(static_cast<size_t>(n));
  std::mt19937_64 rng(seed);
  for (Id& id : ids) id = static_cast<Id>(rng() % 60);
  std::vector<W> table(static_cast<size_t>(rows * cols));
  for (W& w : table) w = static_cast<W>(rng());
  const Box tbox{{0, 0}, {tokens_rows, tokens_cols}}, table_box{{r0, 0}, {rows, cols}};
  const Box obox{{0, 0, 0}, {tokens_rows, tokens_cols, cols}};
  const DType id_dtype = sizeof(Id) == 4 ? DType::kI32 : DType::kI64;
  const std::string what = "embedding_lookup " + std::to_string(sizeof(Id) * 8) + "-bit ids, " +
                           std::to_string(sizeof(W)) + "-byte elements, " + std::to_string(n) +
                           " tokens x " + std::to_string(cols);
  std::vector<W> cpu_out(static_cast<size_t>(n * cols), W(7));
  Array::Shard ct = host_shard(ids, tbox), ctab = host_shard(table, table_box),
               co = host_shard(cpu_out, obox);
  embedding_lookup(kCpu, {.tokens = &ct,
                          .id_dtype = id_dtype,
                          .table = &ctab,
                          .out = &co,
                          .replicas = {},
                          .element_size = sizeof(W)});
  const size_t out_bytes = cpu_out.size() * sizeof(W);
  GpuBlock gt(ids), gtab(table), go(out_bytes), gr0(out_bytes, 0), gr1(out_bytes, 1);
  Array::Shard dt = gt.shard(tbox), dtab = gtab.shard(table_box), dout = go.shard(obox);
  Array::Shard rep0 = gr0.shard(obox), rep1 = gr1.shard(obox);
  Array::Shard* replicas[] = {&rep0, &rep1};
  embedding_lookup(kCuda, {.tokens = &dt,
                           .id_dtype = id_dtype,
                           .table = &dtab,
                           .out = &dout,
                           .replicas = replicas,
                           .element_size = sizeof(W)});
  expect_bits_equal(go.download<W>(), cpu_out, what);
  expect_bits_equal(gr0.download<W>(), cpu_out, what + " replica on gpu:0");
  expect_bits_equal(gr1.download<W>(), cpu_out, what + " replica on gpu:1");
}

TEST(CudaLayerKernelsTest, EmbeddingLookup) {
  MESHLAYOUT_REQUIRE_GPU();
  check_lookup<int32_t, float>(3, 7, 13, 1);
  check_lookup<int64_t, float>(1, 1, 1, 2);
  check_lookup<int32_t, double>(5, 11, 33, 3);
  check_lookup<int64_t, double>(2, 129, 7, 4);
  check_lookup<int32_t, uint16_t>(3, 5, 9, 5);  // BF16/F16 tables: 2-byte words
  check_lookup<int64_t, uint8_t>(4, 3, 5, 6);
}

template <typename Id>
void check_find_bad_id(const std::vector<Id>& ids, const Box& box, const Shape& shape,
                       const std::string& what) {
  const DType id_dtype = sizeof(Id) == 4 ? DType::kI32 : DType::kI64;
  std::vector<Id> host = ids;
  Array::Shard ct = host_shard(host, box);
  int64_t cpu_index = -5, cpu_id = -6, gpu_index = -5, gpu_id = -6;
  embedding_find_bad_id(kCpu, {.tokens = &ct,
                               .id_dtype = id_dtype,
                               .input_dim = 50,
                               .shape = &shape,
                               .bad_index = &cpu_index,
                               .bad_id = &cpu_id});
  GpuBlock gt(ids);
  Array::Shard dt = gt.shard(box);
  embedding_find_bad_id(kCuda, {.tokens = &dt,
                                .id_dtype = id_dtype,
                                .input_dim = 50,
                                .shape = &shape,
                                .bad_index = &gpu_index,
                                .bad_id = &gpu_id});
  EXPECT_EQ(gpu_index, cpu_index) << what;
  EXPECT_EQ(gpu_id, cpu_id) << what;
}

TEST(CudaLayerKernelsTest, EmbeddingFindBadId) {
  MESHLAYOUT_REQUIRE_GPU();
  const Shape shape{9, 700};
  const Box box{{2, 100}, {5, 513}};  // a shard in the middle of the tokens
  std::vector<int32_t> ids32(5 * 513);
  std::vector<int64_t> ids64(5 * 513);
  for (size_t i = 0; i < ids32.size(); ++i) ids32[i] = static_cast<int32_t>(i * 7 % 50);
  for (size_t i = 0; i < ids64.size(); ++i) ids64[i] = static_cast<int64_t>(i * 11 % 50);
  check_find_bad_id(ids32, box, shape, "no bad id (I32): outputs untouched");
  check_find_bad_id(ids64, box, shape, "no bad id (I64): outputs untouched");
  ids32[2000] = 50;  // two bad ids: the first in row-major order is reported
  ids32[1500] = -3;
  check_find_bad_id(ids32, box, shape, "I32 ids -3 at 1500 and 50 at 2000");
  ids64[2564] = int64_t{1} << 40;
  check_find_bad_id(ids64, box, shape, "I64 id 2^40 at the last element");
}

// rotate_half on a shard at sequence offset 2 (tables from position 1), with one table or one per
// batch row (row_starts given), by the sines or their negatives (the backward).
TYPED_TEST(CudaLayerKernelsTypedTest, RotateHalf) {
  using E = TypeParam;
  MESHLAYOUT_REQUIRE_GPU();
  const int64_t nb = 3, nt = 5, nh = 4, first = 1, positions = 9;
  for (int64_t D : {14, 2, 128}) {
    for (int tables : {1, 2}) {
      const int64_t half = D / 2;
      const std::string what =
          "rotate_half D=" + std::to_string(D) + ", " + std::to_string(tables) + " table(s)";
      const Box box{{1, 2, 0, 0}, {nb, nt, nh, D}};
      std::vector<E> y = random_values<E>(static_cast<size_t>(nb * nt * nh * D), 500 + D, -3, 3);
      HostTensor cos_t(dtype_of<E>(), {tables, positions, half});
      HostTensor sin_t(dtype_of<E>(), {tables, positions, half});
      const std::vector<E> c = random_values<E>(static_cast<size_t>(cos_t.num_elements()), 7);
      const std::vector<E> s = random_values<E>(static_cast<size_t>(sin_t.num_elements()), 8);
      std::copy(c.begin(), c.end(), cos_t.data_as<E>());
      std::copy(s.begin(), s.end(), sin_t.data_as<E>());
      std::vector<size_t> table_of_row;
      if (tables == 2) table_of_row = {1, 0, 1};
      std::vector<E> cpu_y = y;
      Array::Shard cy = host_shard(cpu_y, box);
      rotate_half(kCpu, {.y = &cy,
                         .cos = &cos_t,
                         .sin = &sin_t,
                         .table_of_row = table_of_row,
                         .first = first,
                         .dtype = dtype_of<E>()});
      GpuBlock gy(y);
      Array::Shard dy = gy.shard(box);
      rotate_half(kCuda, {.y = &dy,
                          .cos = &cos_t,
                          .sin = &sin_t,
                          .table_of_row = table_of_row,
                          .first = first,
                          .dtype = dtype_of<E>()});
      expect_bits_equal(gy.download<E>(), cpu_y, what);
    }
  }
}

}  // namespace
}  // namespace meshlayout::testing_cuda
