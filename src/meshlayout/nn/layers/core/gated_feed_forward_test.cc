// GatedFeedForward: SwiGLU and GeGLU (gelu, tanh approximation) forward and backward against
// float64 references of (act(x·W_gate)·(x·W_up))·W_down and central differences, in float32 and
// float64, on replicated and Megatron layouts; the SwiGLU block is bit for bit the Llama block's
// former op sequence (swiglu, matmul, the residual fused into the down projection); its paths
// standalone ("<name>/<gate_name>/kernel") and flat inside an enclosing layer
// ("<parent>/<gate_name>/kernel").
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/distribution.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/layers/core/gated_feed_forward.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/nn/transformer_reference.h"
#include "meshlayout/ops/elementwise.h"
#include "meshlayout/ops/matmul.h"
#include "meshlayout/ops/matmul_backward.h"
#include "meshlayout/ops/swiglu.h"

namespace meshlayout {
namespace {

using testing::expect_close;
using testing::gathered_f64;
using testing::Params;
using testing::ref_matmul;
using testing::Vec;

const DimSharding kNone;
constexpr int64_t kB = 2, kT = 3, kD = 8, kFF = 12, kOut = 8;

double act(GatedActivation a, double g) {
  if (a == GatedActivation::kSilu) return g / (1 + std::exp(-g));
  return 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
}

// The float64 reference of the block.
Vec reference(GatedActivation a, const Params& p) {
  const int64_t rows = kB * kT;
  const Vec zg = ref_matmul(p.at("x"), p.at("gate"), rows, kD, kFF);
  const Vec zu = ref_matmul(p.at("x"), p.at("up"), rows, kD, kFF);
  Vec f(zg.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = act(a, zg[i]) * zu[i];
  return ref_matmul(f, p.at("down"), rows, kFF, kOut);
}

bool same_bits(const Array& a, const Array& b) {
  const HostTensor x = a.gather(), y = b.gather();
  return x.shape() == y.shape() && x.dtype() == y.dtype() &&
         std::memcmp(x.data(), y.data(), x.num_bytes()) == 0;
}

class GatedFeedForwardTest : public NnTest {
 protected:
  std::shared_ptr<GatedFeedForward> make(GatedActivation a, const LayoutMap& rules, DType dtype) {
    set_distribution(std::make_shared<ModelParallel>(rules));
    FloatxScope floatx(dtype);
    auto ffn = std::make_shared<GatedFeedForward>(
        kFF, kOut, GatedFeedForwardOptions{.name = "ffn", .activation = a});
    ffn->build_standalone({kB, kT, kD});
    return ffn;
  }

  static LayoutMap megatron(const DeviceMesh& mesh) {
    LayoutMap rules(mesh);
    rules["ffn/(gate|up)/kernel"] = TensorLayout({kNone, "model"});
    rules["ffn/down/kernel"] = TensorLayout({"model", kNone});
    return rules;
  }

  void check(GatedActivation a, const LayoutMap& rules, DType dtype, const std::string& what) {
    SCOPED_TRACE(what + (a == GatedActivation::kSilu ? " SwiGLU " : " GeGLU ") +
                 std::string(dtype_name(dtype)));
    clear_session();
    const bool f64 = dtype == DType::kF64;
    const auto ffn = make(a, rules, dtype);
    const Vec xv = testing::random_values({kB, kT, kD}, 7);
    const Array x = distribute_tensor(testing::to_dtype({kB, kT, kD}, xv, dtype),
                                      TensorLayout({"data", kNone, kNone}, mesh_));
    const Params p{{"x", xv},
                   {"gate", gathered_f64(ffn->gate()->kernel()->value())},
                   {"up", gathered_f64(ffn->up()->kernel()->value())},
                   {"down", gathered_f64(ffn->down()->kernel()->value())}};
    const auto forward = [&](const Params& q) { return reference(a, q); };
    const Array y = ffn->call_on(x);
    EXPECT_EQ(y.dtype(), dtype);
    EXPECT_EQ(y.shape(), (Shape{kB, kT, kOut}));
    expect_close(gathered_f64(y), forward(p), "y", f64 ? 1e-13 : 1e-5);

    const Vec w = testing::random_values(y.shape(), 11);
    const Array dy = distribute_tensor(testing::to_dtype(y.shape(), w, dtype), y.layout());
    Gradients grads;
    const Array dx = ffn->backward(x, dy, grads);
    EXPECT_EQ(dx.layout(), x.layout());
    testing::expect_weight_gradients(grads,
                                     {{ffn->gate()->kernel(), "gate"},
                                      {ffn->up()->kernel(), "up"},
                                      {ffn->down()->kernel(), "down"}},
                                     forward, p, w, f64);
    if (f64) {
      expect_close(gathered_f64(dx), testing::numeric_gradient(forward, p, "x", w, 1e-3, true),
                   "dx", 1e-10);
    } else {
      expect_close(gathered_f64(dx), testing::numeric_gradient(forward, p, "x", w), "dx");
    }
  }
};

TEST_F(GatedFeedForwardTest, SwigluAndGegluMatchFloat64References) {
  for (const GatedActivation a : {GatedActivation::kSilu, GatedActivation::kGeluTanh}) {
    for (const DType dtype : {DType::kF32, DType::kF64}) {
      check(a, LayoutMap(mesh_), dtype, "replicated");
      check(a, megatron(mesh_), dtype, "Megatron");
    }
  }
}

TEST_F(GatedFeedForwardTest, PathsAndShapesStandalone) {
  const auto ffn = make(GatedActivation::kSilu, LayoutMap(mesh_), DType::kF32);
  std::vector<std::string> paths;
  for (const VariablePtr& v : ffn->variables()) paths.push_back(v->path());
  EXPECT_EQ(paths,
            (std::vector<std::string>{"ffn/gate/kernel", "ffn/up/kernel", "ffn/down/kernel"}));
  EXPECT_EQ(ffn->gate()->kernel()->shape(), (Shape{kD, kFF}));
  EXPECT_EQ(ffn->up()->kernel()->shape(), (Shape{kD, kFF}));
  EXPECT_EQ(ffn->down()->kernel()->shape(), (Shape{kFF, kOut}));
  EXPECT_EQ(ffn->gate()->bias(), nullptr);
  EXPECT_EQ(ffn->compute_output_shape({4, 5, kD}), (Shape{4, 5, kOut}));
}

// The SwiGLU block computes exactly what LlamaDecoderLayer computed before it used the block.
TEST_F(GatedFeedForwardTest, SwigluIsTheLlamaBlocksOpSequenceBitForBit) {
  const auto ffn = make(GatedActivation::kSilu, megatron(mesh_), DType::kF32);
  const Array m = distribute_tensor(HostTensor::random(DType::kF32, {kB, kT, kD}, 21),
                                    TensorLayout({"data", kNone, kNone}, mesh_));
  const Array h = distribute_tensor(HostTensor::random(DType::kF32, {kB, kT, kOut}, 22),
                                    TensorLayout({"data", kNone, kNone}, mesh_));
  const Array& wg = ffn->gate()->kernel()->value();
  const Array& wu = ffn->up()->kernel()->value();
  const Array& wd = ffn->down()->kernel()->value();
  // Inference, the residual fused.
  const Array want = matmul(swiglu(matmul(m, wg), matmul(m, wu)), wd, {.add_to_output = &h});
  EXPECT_TRUE(same_bits(ffn->forward(m, &h), want));
  // Training forward and backward.
  GatedFeedForward::Saved saved;
  const Array y = ffn->forward_for_training(m, saved);
  const Array zg = matmul(m, wg), zu = matmul(m, wu);
  EXPECT_TRUE(same_bits(y, matmul(swiglu(zg, zu), wd)));
  const Array dy = distribute_tensor(HostTensor::random(DType::kF32, {kB, kT, kOut}, 23),
                                     TensorLayout({"data", kNone, kNone}, mesh_));
  Gradients grads;
  const Array dm = ffn->backward_saved(m, saved, dy, grads);
  const Array ff = swiglu(zg, zu);
  const Array dwd = matmul_backward_weight(ff, dy, wd.layout());
  const SwigluGrads dz = swiglu_backward(zg, zu, matmul_backward_input(dy, wd, ff.layout()));
  EXPECT_TRUE(same_bits(*grads.find(*ffn->down()->kernel()), dwd));
  EXPECT_TRUE(same_bits(*grads.find(*ffn->gate()->kernel()),
                        matmul_backward_weight(m, dz.dg, wg.layout())));
  EXPECT_TRUE(
      same_bits(*grads.find(*ffn->up()->kernel()), matmul_backward_weight(m, dz.du, wu.layout())));
  EXPECT_TRUE(same_bits(dm, add(matmul_backward_input(dz.dg, wg, m.layout()),
                                matmul_backward_input(dz.du, wu, m.layout()))));
}

// A layer that makes its feed-forward flat, as LlamaDecoderLayer does.
class Block : public Layer {
 public:
  Block() : Layer("block", "transformer_layer_0") {
    ffn_ = std::make_shared<GatedFeedForward>(
        kFF, kD,
        GatedFeedForwardOptions{.name = "feedforward",
                                .gate_name = "feedforward_gate_dense",
                                .up_name = "feedforward_intermediate_dense",
                                .down_name = "feedforward_output_dense",
                                .flat = true});
    track("feedforward_gate_dense", ffn_->gate());
    track("feedforward_intermediate_dense", ffn_->up());
    track("feedforward_output_dense", ffn_->down());
  }
  Shape compute_output_shape(const Shape& s) const override { return s; }

 protected:
  void build(const Shape& s) override { ffn_->maybe_build(s); }
  Array call(const Array& x) override { return ffn_->call_on(x); }

 private:
  std::shared_ptr<GatedFeedForward> ffn_;
};

TEST_F(GatedFeedForwardTest, FlatBlockBuildsInTheEnclosingScope) {
  set_distribution(std::make_shared<ModelParallel>(LayoutMap(mesh_)));
  auto block = std::make_shared<Block>();
  block->build_standalone({kB, kT, kD});
  std::vector<std::string> paths, object_paths;
  for (const VariablePtr& v : block->variables()) paths.push_back(v->path());
  EXPECT_EQ(paths,
            (std::vector<std::string>{"transformer_layer_0/feedforward_gate_dense/kernel",
                                      "transformer_layer_0/feedforward_intermediate_dense/kernel",
                                      "transformer_layer_0/feedforward_output_dense/kernel"}));
  const Array x = distribute_tensor(HostTensor::random(DType::kF32, {kB, kT, kD}, 3),
                                    TensorLayout({"data", kNone, kNone}, mesh_));
  EXPECT_EQ(block->call_on(x).shape(), (Shape{kB, kT, kD}));
  // Calling it again does not move the paths.
  paths.clear();
  for (const VariablePtr& v : block->variables()) paths.push_back(v->path());
  EXPECT_EQ(paths.front(), "transformer_layer_0/feedforward_gate_dense/kernel");
}

TEST_F(GatedFeedForwardTest, FlatBlockWithoutAnEnclosingLayerIsRefused) {
  auto ffn = std::make_shared<GatedFeedForward>(kFF, kD, GatedFeedForwardOptions{.flat = true});
  EXPECT_THROW(ffn->build_standalone({kB, kT, kD}), FailedPreconditionError);
}

TEST_F(GatedFeedForwardTest, GegluRefusesMismatchedOperands) {
  const Array g = distribute_tensor(HostTensor::random(DType::kF32, {2, 3}, 1),
                                    TensorLayout::replicated(2, mesh_));
  const Array u = distribute_tensor(HostTensor::random(DType::kF32, {2, 4}, 2),
                                    TensorLayout::replicated(2, mesh_));
  EXPECT_THROW(gated_activation(GatedActivation::kGeluTanh, g, u), ValueError);
}

}  // namespace
}  // namespace meshlayout
