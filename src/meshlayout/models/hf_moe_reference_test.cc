// The MoE reference checked against hand-computed cases and structural identities (one expert is
// the dense MLP; identical experts sum their routing weights). Its agreement with PyTorch is
// checked outside CI by tools/moe_reference_torch_check.py, which runs the fixture test below
// with MESHLAYOUT_MOE_TORCH_DIR set.
#include "meshlayout/models/hf_moe_reference.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "meshlayout/array/array.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout::testing {
namespace {

std::vector<int32_t> some_tokens(int64_t n, int64_t vocab) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((i * 37 + 11) % vocab));
  return t;
}

double max_abs_diff(const HfVec& a, const HfVec& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

double max_abs(const HfVec& a) {
  double m = 0;
  for (const double v : a) m = std::max(m, std::abs(v));
  return m;
}

TEST(HfMoeReference, TopKPrefersTheLowerIndexOnTies) {
  const double p[] = {0.2, 0.3, 0.3, 0.2};
  EXPECT_EQ(hf_moe_internal::top_k(p, 4, 2), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(hf_moe_internal::top_k(p, 4, 3), (std::vector<int64_t>{1, 2, 0}));
}

TEST(HfMoeReference, LoadBalancingLossByHand) {
  // Uniform logits: p = 1/4 everywhere, the ties pick experts 0 and 1 for every token:
  // tokens_per_expert = [[1,0,0,0],[0,1,0,0]], probabilities 1/4: 4 · (1/4 + 1/4) = 2.
  EXPECT_DOUBLE_EQ(hf_load_balancing_loss({HfVec(3 * 4, 0.0)}, 4, 2), 2.0);
  // E = 3, k = 1. Token 0: p = [1/4, 1/2, 1/4] → expert 1; token 1: p = [3/5, 1/5, 1/5] →
  // expert 0. tokens_per_expert = [1/2, 1/2, 0], mean p = [0.425, 0.35, 0.225]:
  // 3 · (0.5 · 0.425 + 0.5 · 0.35) = 1.1625. The layers are concatenated: two layers of one
  // token each give the same.
  const HfVec t0 = {0, std::log(2.0), 0}, t1 = {std::log(3.0), 0, 0};
  HfVec both = t0;
  both.insert(both.end(), t1.begin(), t1.end());
  EXPECT_NEAR(hf_load_balancing_loss({both}, 3, 1), 1.1625, 1e-12);
  EXPECT_NEAR(hf_load_balancing_loss({t0, t1}, 3, 1), 1.1625, 1e-12);
  EXPECT_EQ(hf_load_balancing_loss({}, 3, 1), 0.0);
}

// One expert with k = 1 has weight 1 (renormalised, or softmax of one logit): the model is the
// dense decoder of the same family with that expert as its MLP.
TEST(HfMoeReference, OneExpertIsTheDenseDecoder) {
  for (const auto& [moe_family, dense_family] :
       {std::pair<std::string, std::string>{"mixtral", "mistral"}, {"qwen3_moe", "qwen3"}}) {
    HfMoeSpec spec = small_hf_moe_spec(moe_family);
    spec.num_experts = 1;
    spec.num_experts_per_tok = 1;
    spec.norm_topk_prob = false;
    spec.base.intermediate_size = spec.expert_intermediate_size();
    const auto hf = random_hf_moe_tensors(spec, 5);
    std::map<std::string, HostTensor> dense;
    for (const auto& [name, t] : hf) {
      std::string n = name;
      for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
               {"block_sparse_moe.experts.0.w1", "mlp.gate_proj"},
               {"block_sparse_moe.experts.0.w3", "mlp.up_proj"},
               {"block_sparse_moe.experts.0.w2", "mlp.down_proj"},
               {"mlp.experts.0.", "mlp."}}) {
        if (const size_t at = n.find(from); at != std::string::npos) n.replace(at, from.size(), to);
      }
      dense.emplace(n, t);
    }
    LlamaConfig c = spec.base;
    c.family = dense_family;
    const std::vector<int32_t> tokens = some_tokens(2 * 5, c.vocab_size);
    const HfMoeForward moe = hf_moe_reference_forward(spec, hf, tokens, 2, 5);
    const HfVec want = hf_reference_logits(c, dense, tokens, 2, 5);
    EXPECT_LT(max_abs_diff(moe.logits, want), 1e-9 * max_abs(want)) << moe_family;
    EXPECT_EQ(moe.router_logits.size(), 2u);
    EXPECT_EQ(moe.router_logits[0].size(), 10u);
  }
}

// Experts that are copies of one another: a token's output is (Σ of its top-k weights) times
// that expert's; renormalised, the sum is 1 and the model is the one-expert model. Without
// renormalisation (Qwen's norm_topk_prob false) the output differs.
TEST(HfMoeReference, IdenticalExpertsSumTheirWeights) {
  for (const bool renormalize : {true, false}) {
    HfMoeSpec spec = small_hf_moe_spec("qwen3_moe");  // 8 experts, top-2
    spec.norm_topk_prob = renormalize;
    auto hf = random_hf_moe_tensors(spec, 9);
    for (int layer = 0; layer < 2; ++layer) {
      for (int e = 1; e < 8; ++e) {
        for (const char* w : {"gate_proj", "up_proj", "down_proj"}) {
          const std::string p = "model.layers." + std::to_string(layer) + ".mlp.experts.";
          hf.at(p + std::to_string(e) + "." + w + ".weight") = hf.at(p + "0." + w + ".weight");
        }
      }
    }
    HfMoeSpec one = spec;
    one.num_experts = 1;
    one.num_experts_per_tok = 1;
    one.norm_topk_prob = true;
    auto hf_one = hf;
    for (int layer = 0; layer < 2; ++layer) {
      const std::string p = "model.layers." + std::to_string(layer) + ".mlp.";
      HostTensor g(DType::kF32, {1, 32});
      std::copy_n(hf.at(p + "gate.weight").data_as<float>(), 32, g.data_as<float>());
      hf_one.at(p + "gate.weight") = std::move(g);
    }
    const std::vector<int32_t> tokens = some_tokens(6, 64);
    const HfVec got = hf_moe_reference_logits(spec, hf, tokens, 1, 6);
    const HfVec want = hf_moe_reference_logits(one, hf_one, tokens, 1, 6);
    if (renormalize) {
      EXPECT_LT(max_abs_diff(got, want), 1e-9 * max_abs(want));
    } else {
      EXPECT_GT(max_abs_diff(got, want), 1e-3 * max_abs(want));
    }
  }
}

// Qwen2-MoE: layer 1 is dense (mlp_only_layers), so it reads mlp.{gate,up,down}_proj and has no
// router; the shared expert, scaled per token by sigmoid(x · shared_expert_gateᵀ), adds to the
// routed experts.
TEST(HfMoeReference, Qwen2MoeDenseLayerAndSharedExpert) {
  const HfMoeSpec spec = small_hf_moe_spec("qwen2_moe");
  auto hf = random_hf_moe_tensors(spec, 3);
  const std::vector<int32_t> tokens = some_tokens(8, 64);
  const HfMoeForward f = hf_moe_reference_forward(spec, hf, tokens, 2, 4);
  EXPECT_EQ(f.moe_layers, (std::vector<int64_t>{0, 2}));
  EXPECT_GT(f.min_top_k_margin, 1e-4);  // routing far from ties at this size

  const int64_t N = 5, d = 32;
  const HostTensor xt = HostTensor::random(DType::kF32, {N, d}, 77);
  const HfVec x(xt.data_as<float>(), xt.data_as<float>() + N * d);
  HfMoeForward scratch;
  const HfVec full = hf_moe_internal::moe_block(spec, hf, 2, x, scratch);
  auto routed_only = hf;
  float* down =
      routed_only.at("model.layers.2.mlp.shared_expert.down_proj.weight").data_as<float>();
  std::fill(down, down + d * 24, 0.0f);
  const HfVec routed = hf_moe_internal::moe_block(spec, routed_only, 2, x, scratch);
  using hf_reference_internal::values;
  const HfVec shared = hf_reference_internal::gated_mlp(
      x, N, d, 24, values(hf, "model.layers.2.mlp.shared_expert.gate_proj.weight"),
      values(hf, "model.layers.2.mlp.shared_expert.up_proj.weight"),
      values(hf, "model.layers.2.mlp.shared_expert.down_proj.weight"));
  const HfVec g = values(hf, "model.layers.2.mlp.shared_expert_gate.weight");
  double worst = 0;
  for (int64_t n = 0; n < N; ++n) {
    double dot = 0;
    for (int64_t i = 0; i < d; ++i)
      dot += x[static_cast<size_t>(n * d + i)] * g[static_cast<size_t>(i)];
    const double sig = 1 / (1 + std::exp(-dot));
    for (int64_t i = 0; i < d; ++i) {
      const size_t at = static_cast<size_t>(n * d + i);
      worst = std::max(worst, std::abs(full[at] - routed[at] - sig * shared[at]));
    }
  }
  EXPECT_LT(worst, 1e-9 * max_abs(full));
  EXPECT_GT(max_abs_diff(full, routed), 1e-3 * max_abs(full));
  // The dense layer: a block call on layer 1 is the dense MLP (intermediate_size 48).
  const HfVec dense = hf_reference_internal::gated_mlp(
      x, N, d, 48, values(hf, "model.layers.1.mlp.gate_proj.weight"),
      values(hf, "model.layers.1.mlp.up_proj.weight"),
      values(hf, "model.layers.1.mlp.down_proj.weight"));
  EXPECT_EQ(hf_moe_internal::moe_block(spec, hf, 1, x, scratch), dense);
  EXPECT_EQ(scratch.moe_layers, (std::vector<int64_t>{2, 2}));  // layer 1 left no router logits
}

TEST(HfMoeReference, LossIsCrossEntropyPlusTheWeightedAuxLoss) {
  HfMoeSpec spec = small_hf_moe_spec("mixtral");
  const auto hf = random_hf_moe_tensors(spec, 4);
  const std::vector<int32_t> inputs = some_tokens(2 * 4, 64), targets = some_tokens(9, 64);
  const std::vector<int32_t> shifted(targets.begin() + 1, targets.end());
  const HfMoeForward f = hf_moe_reference_forward(spec, hf, inputs, 2, 4);
  double ce = 0;
  for (int n = 0; n < 8; ++n) {
    double sum = 0;
    for (int v = 0; v < 64; ++v) sum += std::exp(f.logits[static_cast<size_t>(n * 64 + v)]);
    ce -= std::log(std::exp(f.logits[static_cast<size_t>(n * 64 + shifted[n])]) / sum) / 8;
  }
  spec.router_aux_loss_coef = 0.25;
  const HfMoeLoss l = hf_moe_reference_loss(spec, hf, inputs, shifted, 2, 4);
  EXPECT_NEAR(l.ce, ce, 1e-9 * ce);
  EXPECT_DOUBLE_EQ(l.aux, hf_load_balancing_loss(f.router_logits, 4, 2));
  EXPECT_GT(l.aux, 0.0);
  EXPECT_DOUBLE_EQ(l.total, l.ce + 0.25 * l.aux);
  EXPECT_EQ(hf_moe_reference_greedy(spec, hf, {1, 2, 3}, 2).size(), 2u);
}

// Writes, for tools/moe_reference_torch_check.py, each family's random model and the
// reference's logits and losses on fixed tokens under $MESHLAYOUT_MOE_TORCH_DIR/<family>/.
TEST(HfMoeReference, TorchComparisonFixture) {
  const char* root = std::getenv("MESHLAYOUT_MOE_TORCH_DIR");
  if (root == nullptr) GTEST_SKIP() << "MESHLAYOUT_MOE_TORCH_DIR is not set";
  for (const std::string family : {"mixtral", "qwen2_moe", "qwen3_moe"}) {
    const std::string dir = std::string(root) + "/" + family;
    const HfMoeSpec spec = small_hf_moe_spec(family);
    const auto hf = random_hf_moe_tensors(spec, 21, 0.5f);
    write_hf_moe(dir, spec, hf);
    const int64_t B = 2, T = 7;
    const std::vector<int32_t> inputs = some_tokens(B * T, 64);
    std::vector<int32_t> targets(inputs.begin() + 1, inputs.end());
    targets.push_back(5);
    const HfMoeForward f = hf_moe_reference_forward(spec, hf, inputs, B, T);
    const HfMoeLoss l = hf_moe_reference_loss(spec, hf, inputs, targets, B, T);
    HostTensor in(DType::kI32, {B, T}), out(DType::kI32, {B, T});
    std::copy(inputs.begin(), inputs.end(), in.data_as<int32_t>());
    std::copy(targets.begin(), targets.end(), out.data_as<int32_t>());
    HostTensor logits(DType::kF64, {B, T, spec.base.vocab_size}), losses(DType::kF64, {3});
    std::copy(f.logits.begin(), f.logits.end(), logits.data_as<double>());
    losses.data_as<double>()[0] = l.ce;
    losses.data_as<double>()[1] = l.aux;
    losses.data_as<double>()[2] = l.total;
    const DeviceMesh first({1}, {"x"}, std::vector<std::string>{list_devices().front()});
    std::vector<Array> arrays;
    for (const HostTensor* t : {&in, &out, &logits, &losses}) {
      arrays.push_back(distribute_tensor(
          *t, TensorLayout::replicated(static_cast<int>(t->shape().size()), first)));
    }
    const NamedArray named[] = {{"inputs", &arrays[0]},
                                {"targets", &arrays[1]},
                                {"logits", &arrays[2]},
                                {"losses", &arrays[3]}};
    save_arrays(dir + "/reference.safetensors", named);
    std::printf("%s: min top-k margin %.3g\n", family.c_str(), f.min_top_k_margin);
  }
}

}  // namespace
}  // namespace meshlayout::testing
