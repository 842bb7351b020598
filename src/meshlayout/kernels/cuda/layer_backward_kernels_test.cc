// layer_backward_kernels_test.cc — layer_backward_kernels.cu against the CPU ops on the same
// random inputs, F32 and F64, odd shapes: rms_norm_backward and layer_norm_backward (with and
// without their optional outputs and gamma), activation_backward (every function),
// gated_backward (SwiGLU, GeGLU), soft_cap_backward_shard and embedding_scatter_add (bit for
// bit: the same additions in the same order). Every test skips without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "meshlayout/kernels/activation.h"
#include "meshlayout/kernels/cuda/layer_kernels_test_util.h"
#include "meshlayout/kernels/embedding.h"
#include "meshlayout/kernels/gated_activation.h"
#include "meshlayout/kernels/normalization.h"
#include "meshlayout/kernels/soft_cap.h"

namespace meshlayout::testing_cuda {
namespace {

constexpr DeviceKind kCpu = DeviceKind::kCpu;
constexpr DeviceKind kCuda = DeviceKind::kCuda;

template <typename E>
class CudaLayerBackwardTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CudaLayerBackwardTest, FloatTypes);

const std::vector<std::pair<int64_t, int64_t>> kShapes = {{7, 13}, {1, 1}, {33, 257}, {3, 4099}};

std::string shape_name(int64_t rows, int64_t f) {
  return std::to_string(rows) + "x" + std::to_string(f);
}

TYPED_TEST(CudaLayerBackwardTest, RmsNormBackward) {
  using E = TypeParam;
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 10;
  for (auto [rows, f] : kShapes) {
    for (bool with_contrib : {false, true}) {
      const std::string what =
          "rms_norm_backward " + shape_name(rows, f) + (with_contrib ? " with contrib" : "");
      const size_t n = static_cast<size_t>(rows * f);
      std::vector<E> x = random_values<E>(n, seed++, -2, 2), dy = random_values<E>(n, seed++);
      std::vector<E> scale = random_values<E>(static_cast<size_t>(f), seed++, 0.5, 1.5);
      const Box box{{0, 0}, {rows, f}}, sbox{{0}, {f}};
      std::vector<E> cdx(n, E(0)), cc(n, E(0));
      Array::Shard sdx = host_shard(cdx, box), sc = host_shard(cc, box), sx = host_shard(x, box),
                   sdy = host_shard(dy, box), ss = host_shard(scale, sbox);
      rms_norm_backward(kCpu, {.dx = &sdx,
                               .contrib = with_contrib ? &sc : nullptr,
                               .x = &sx,
                               .dy = &sdy,
                               .scale = &ss,
                               .features = f,
                               .epsilon = 1e-6,
                               .dtype = dtype_of<E>()});
      GpuBlock gdx(n * sizeof(E)), gc(n * sizeof(E)), gx(x), gdy(dy), gs(scale);
      Array::Shard ddx = gdx.shard(box), dc = gc.shard(box), dx = gx.shard(box),
                   ddy = gdy.shard(box), ds = gs.shard(sbox);
      rms_norm_backward(kCuda, {.dx = &ddx,
                                .contrib = with_contrib ? &dc : nullptr,
                                .x = &dx,
                                .dy = &ddy,
                                .scale = &ds,
                                .features = f,
                                .epsilon = 1e-6,
                                .dtype = dtype_of<E>()});
      expect_near_cpu(gdx.download<E>(), cdx, tolerance<E>(), what + " dx");
      if (with_contrib) expect_near_cpu(gc.download<E>(), cc, tolerance<E>(), what + " contrib");
    }
  }
}

TYPED_TEST(CudaLayerBackwardTest, LayerNormBackward) {
  using E = TypeParam;
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 20;
  for (auto [rows, f] : kShapes) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool with_gamma = variant & 1, with_xhat = variant & 2;
      const std::string what = "layer_norm_backward " + shape_name(rows, f) + " gamma " +
                               std::to_string(with_gamma) + " xhat_dy " + std::to_string(with_xhat);
      const size_t n = static_cast<size_t>(rows * f);
      std::vector<E> x = random_values<E>(n, seed++, -3, 5), dy = random_values<E>(n, seed++);
      std::vector<E> gamma = random_values<E>(static_cast<size_t>(f), seed++, 0.5, 1.5);
      const Box box{{0, 0}, {rows, f}}, gbox{{0}, {f}};
      std::vector<E> cdx(n, E(0)), cxh(n, E(0));
      Array::Shard sdx = host_shard(cdx, box), sxh = host_shard(cxh, box), sx = host_shard(x, box),
                   sdy = host_shard(dy, box), sg = host_shard(gamma, gbox);
      layer_norm_backward(kCpu, {.dx = &sdx,
                                 .xhat_dy = with_xhat ? &sxh : nullptr,
                                 .x = &sx,
                                 .dy = &sdy,
                                 .gamma = with_gamma ? &sg : nullptr,
                                 .features = f,
                                 .epsilon = 1e-3,
                                 .dtype = dtype_of<E>()});
      GpuBlock gdx(n * sizeof(E)), gxh(n * sizeof(E)), gx(x), gdy(dy), gg(gamma);
      Array::Shard ddx = gdx.shard(box), dxh = gxh.shard(box), dx = gx.shard(box),
                   ddy = gdy.shard(box), dg = gg.shard(gbox);
      layer_norm_backward(kCuda, {.dx = &ddx,
                                  .xhat_dy = with_xhat ? &dxh : nullptr,
                                  .x = &dx,
                                  .dy = &ddy,
                                  .gamma = with_gamma ? &dg : nullptr,
                                  .features = f,
                                  .epsilon = 1e-3,
                                  .dtype = dtype_of<E>()});
      expect_near_cpu(gdx.download<E>(), cdx, tolerance<E>(), what + " dx");
      if (with_xhat) expect_near_cpu(gxh.download<E>(), cxh, tolerance<E>(), what + " xhat_dy");
    }
  }
}

TYPED_TEST(CudaLayerBackwardTest, ActivationBackward) {
  using E = TypeParam;
  MESHLAYOUT_REQUIRE_GPU();
  const std::pair<ActivationFunction, const char*> functions[] = {
      {ActivationFunction::kLinear, "linear"},   {ActivationFunction::kRelu, "relu"},
      {ActivationFunction::kGelu, "gelu"},       {ActivationFunction::kTanh, "tanh"},
      {ActivationFunction::kSoftmax, "softmax"}, {ActivationFunction::kSilu, "silu"}};
  uint64_t seed = 30;
  for (auto [function, name] : functions) {
    for (auto [rows, f] : kShapes) {
      const std::string what = std::string(name) + " backward " + shape_name(rows, f);
      const size_t n = static_cast<size_t>(rows * f);
      std::vector<E> z = random_values<E>(n, seed++, -6, 6), dy = random_values<E>(n, seed++);
      const Box box{{0, 0}, {rows, f}};
      std::vector<E> cg = dy;
      Array::Shard sg = host_shard(cg, box), sz = host_shard(z, box);
      activation_backward(
          kCpu, {.g = &sg, .z = &sz, .function = function, .row = f, .dtype = dtype_of<E>()});
      GpuBlock gg(dy), gz(z);
      Array::Shard dg = gg.shard(box), dz = gz.shard(box);
      activation_backward(
          kCuda, {.g = &dg, .z = &dz, .function = function, .row = f, .dtype = dtype_of<E>()});
      const std::vector<E> got = gg.download<E>();
      if (function == ActivationFunction::kRelu || function == ActivationFunction::kLinear) {
        expect_bits_equal(got, cg, what);
      } else {
        expect_near_cpu(got, cg, tolerance<E>(), what);
      }
    }
  }
}

TYPED_TEST(CudaLayerBackwardTest, GatedBackward) {
  using E = TypeParam;
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 40;
  for (GateFunction function : {GateFunction::kSilu, GateFunction::kGeluTanh}) {
    for (auto [rows, f] : kShapes) {
      const std::string what = std::string(function == GateFunction::kSilu ? "swiglu" : "geglu") +
                               " backward " + shape_name(rows, f);
      const size_t n = static_cast<size_t>(rows * f);
      std::vector<E> g = random_values<E>(n, seed++, -8, 8), u = random_values<E>(n, seed++, -2, 2),
                     dy = random_values<E>(n, seed++);
      const Box box{{0, 0}, {rows, f}};
      std::vector<E> cdg(n, E(0)), cdu(n, E(0));
      Array::Shard sdg = host_shard(cdg, box), sdu = host_shard(cdu, box), sg = host_shard(g, box),
                   su = host_shard(u, box), sdy = host_shard(dy, box);
      gated_backward(kCpu, {.dg = &sdg,
                            .du = &sdu,
                            .g = &sg,
                            .u = &su,
                            .dy = &sdy,
                            .function = function,
                            .dtype = dtype_of<E>()});
      GpuBlock gdg(n * sizeof(E)), gdu(n * sizeof(E)), gg(g), gu(u), gdy(dy);
      Array::Shard ddg = gdg.shard(box), ddu = gdu.shard(box), dg = gg.shard(box),
                   du = gu.shard(box), ddy = gdy.shard(box);
      gated_backward(kCuda, {.dg = &ddg,
                             .du = &ddu,
                             .g = &dg,
                             .u = &du,
                             .dy = &ddy,
                             .function = function,
                             .dtype = dtype_of<E>()});
      expect_near_cpu(gdg.download<E>(), cdg, tolerance<E>(), what + " dg");
      expect_near_cpu(gdu.download<E>(), cdu, tolerance<E>(), what + " du");
    }
  }
}

TYPED_TEST(CudaLayerBackwardTest, SoftCapBackward) {
  using E = TypeParam;
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 50;
  for (auto [rows, f] : kShapes) {
    const std::string what = "soft_cap_backward " + shape_name(rows, f);
    const size_t n = static_cast<size_t>(rows * f);
    std::vector<E> y = random_values<E>(n, seed++, -29, 29), dy = random_values<E>(n, seed++);
    const Box box{{0, 0}, {rows, f}};
    std::vector<E> cdy = dy;
    Array::Shard sdy = host_shard(cdy, box), sy = host_shard(y, box);
    soft_cap_backward_shard(kCpu, {.dy = &sdy, .y = &sy, .dtype = dtype_of<E>(), .cap = 30.0});
    GpuBlock gdy(dy), gy(y);
    Array::Shard ddy = gdy.shard(box), dy_ = gy.shard(box);
    soft_cap_backward_shard(kCuda, {.dy = &ddy, .y = &dy_, .dtype = dtype_of<E>(), .cap = 30.0});
    expect_bits_equal(gdy.download<E>(), cdy, what);  // mul/div/sub only
  }
}

// Tokens with ids in [0, 60) (many repeated) into the gradient of table rows [10, 47).
template <typename E, typename Id>
void check_scatter_add(int64_t tokens, int64_t cols, uint64_t seed) {
  const int64_t r0 = 10, rows = 37;
  const std::string what = "embedding_scatter_add " + std::to_string(tokens) + " tokens x " +
                           std::to_string(cols) + (sizeof(Id) == 4 ? " I32" : " I64");
  std::vector<Id> ids(static_cast<size_t>(tokens));
  std::mt19937_64 rng(seed);
  for (Id& id : ids) id = static_cast<Id>(rng() % 60);
  std::vector<E> dy = random_values<E>(static_cast<size_t>(tokens * cols), seed + 1);
  const Box tbox{{0}, {tokens}}, dbox{{0, 0}, {tokens, cols}}, pbox{{r0, 0}, {rows, cols}};
  const DType id_dtype = sizeof(Id) == 4 ? DType::kI32 : DType::kI64;
  std::vector<E> cpu(static_cast<size_t>(rows * cols), E(5));
  Array::Shard sp = host_shard(cpu, pbox), st = host_shard(ids, tbox), sd = host_shard(dy, dbox);
  embedding_scatter_add(
      kCpu,
      {.table_grad = &sp, .tokens = &st, .id_dtype = id_dtype, .dy = &sd, .dtype = dtype_of<E>()});
  GpuBlock gp(cpu.size() * sizeof(E)), gt(ids), gd(dy);
  Array::Shard dp = gp.shard(pbox), dt = gt.shard(tbox), dd = gd.shard(dbox);
  embedding_scatter_add(
      kCuda,
      {.table_grad = &dp, .tokens = &dt, .id_dtype = id_dtype, .dy = &dd, .dtype = dtype_of<E>()});
  expect_bits_equal(gp.download<E>(), cpu, what);
}

TYPED_TEST(CudaLayerBackwardTest, EmbeddingScatterAdd) {
  using E = TypeParam;
  MESHLAYOUT_REQUIRE_GPU();
  check_scatter_add<E, int32_t>(1, 1, 1);
  check_scatter_add<E, int64_t>(7, 13, 2);
  check_scatter_add<E, int32_t>(1000, 33, 3);
  check_scatter_add<E, int64_t>(257, 5, 4);
}

}  // namespace
}  // namespace meshlayout::testing_cuda
