// The mixture-of-experts families (Mixtral, Qwen 3 MoE, Qwen 2 MoE with its shared expert) from
// their Hugging Face directories: small random models written in Hugging Face format
// (random_moe_hf.h), loaded sharded under replicated rules, keras-hub's rules, and expert
// parallelism over either mesh axis (over the tokens' own axis through the all-to-all
// dispatcher) and each family's examples/rules/<family>_keras_hub.json; logits within 1e-4 of the
// float64 reference written from transformers' equations (hf_moe_reference.h) and greedy tokens
// equal to its; expert parallelism equal to the replicated experts; training's loss (with the
// load-balancing auxiliary loss) against the reference, and its gradients against central
// differences in float64.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <set>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/models/generation.h"
#include "meshlayout/models/hf_moe_reference.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/models/llama_families_test_util.h"
#include "meshlayout/models/random_moe_hf.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;
using testing::max_relative_error;

class MoeModelTest : public ::testing::Test {
 public:
  void SetUp() override {
    set_device_count(8);
    clear_session();
    dir_ =
        std::filesystem::temp_directory_path() / ("meshlayout_moe_" + std::to_string(::getpid()));
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    reset_device_count();
  }
  // Expert parallelism: the experts' first dimension over `axis`, everything else replicated.
  LayoutMap expert_parallel(const std::string& axis) const {
    LayoutMap rules(mesh_);
    rules["experts/expert_feedforward_(gate|intermediate)_dense"] =
        TensorLayout({axis, None, None});
    rules["experts/expert_feedforward_output_dense"] = TensorLayout({axis, None, None});
    return rules;
  }
  // A rules file of examples/rules/ on this mesh.
  LayoutMap rules_file(const std::string& name) const {
    RulesFile file =
        load_rules_file(std::string(MESHLAYOUT_SOURCE_DIR) + "/examples/rules/" + name);
    file.mesh = mesh_;
    return file.to_layout_map();
  }
  Array tokens(const std::vector<int32_t>& ids, int64_t batch) const {
    HostTensor t(DType::kI32, {batch, static_cast<int64_t>(ids.size()) / batch});
    std::copy(ids.begin(), ids.end(), t.data_as<int32_t>());
    return distribute_tensor(t, TensorLayout({"batch", None}, mesh_));
  }
  DeviceMesh mesh_{{2, 4}, {"batch", "model"}};
  std::filesystem::path dir_;
};

TEST_F(MoeModelTest, LogitsAndGreedyTokensMatchTheHuggingFaceEquationsUnderExpertParallelism) {
  const std::vector<int32_t> ids = {3, 17, 42, 5, 9, 1, 0, 63, 30, 8, 11, 2, 7, 60};  // (2, 7)
  uint64_t seed = 5;
  for (const char* family : {"mixtral", "qwen3_moe", "qwen2_moe"}) {
    SCOPED_TRACE(family);
    const HfMoeSpec spec = small_hf_moe_spec(family);
    const auto hf = random_hf_moe_tensors(spec, seed += 100);
    const std::filesystem::path dir = dir_ / family;
    write_hf_moe(dir.string(), spec, hf);
    const HfLlamaCheckpoint checkpoint = HfLlamaCheckpoint::open(dir.string());
    EXPECT_EQ(checkpoint.config().num_experts, spec.num_experts);
    const std::vector<double> want = testing::hf_moe_reference_logits(spec, hf, ids, 2, 7);
    const std::vector<int32_t> want_greedy =
        testing::hf_moe_reference_greedy(spec, hf, {3, 17, 42}, 4);
    std::optional<HostTensor> replicated;
    const std::pair<std::string, LayoutMap> rule_sets[] = {
        {"replicated", LayoutMap(mesh_)},
        {"keras-hub", family_layout_map(checkpoint.config(), mesh_, "model", "batch")},
        {"experts over model", expert_parallel("model")},
        {"experts over batch (the tokens' axis)", expert_parallel("batch")},
        {fmt::format("examples/rules/{}_keras_hub.json", family),
         rules_file(fmt::format("{}_keras_hub.json", family))},
        {"examples/rules/mixtral_expert_parallel.json",
         rules_file("mixtral_expert_parallel.json")}};
    for (const auto& [name, rules] : rule_sets) {
      SCOPED_TRACE(name);
      clear_session();
      LlamaModel model(checkpoint.config(), rules);
      const HfLoadReport report = load_hf_llama(checkpoint, model.variables_by_path());
      EXPECT_GT(report.tensors_loaded, 0);
      const HostTensor logits = model.logits(tokens(ids, 2)).gather();
      EXPECT_LT(max_relative_error(logits, want), 1e-4);
      if (!replicated) replicated = logits;
      EXPECT_LT(max_relative_error(logits,
                                   [&] {
                                     std::vector<double> r(
                                         static_cast<size_t>(replicated->num_elements()));
                                     for (size_t i = 0; i < r.size(); ++i)
                                       r[i] = replicated->data_as<float>()[i];
                                     return r;
                                   }()),
                1e-5);
      const GenerateResult g = generate(model, {{3, 17, 42}}, {.max_new_tokens = 4});
      EXPECT_EQ(g.tokens[0], want_greedy);
    }
  }
}

// The variables carry keras-hub's paths: the block named as Keras names it automatically, the
// stacked experts under "experts".
TEST_F(MoeModelTest, VariablesCarryKerasHubPaths) {
  const LlamaConfig config = LlamaConfig::from_json(small_hf_moe_spec("mixtral").to_json());
  LlamaModel model(config, mixtral_layout_map(mesh_));
  const auto vars = model.variables_by_path();
  for (const char* path : {"transformer_layer_0/mixtral_sparse_moe_block/"
                           "sparse_feedforward_gate_dense/kernel",
                           "transformer_layer_1/mixtral_sparse_moe_block_1/experts/"
                           "expert_feedforward_gate_dense",
                           "transformer_layer_1/mixtral_sparse_moe_block_1/experts/"
                           "expert_feedforward_output_dense"}) {
    ASSERT_TRUE(vars.contains(path)) << path;
  }
  const Array& gate = *vars.at(
      "transformer_layer_0/mixtral_sparse_moe_block/experts/expert_feedforward_gate_dense");
  EXPECT_EQ(gate.shape(),
            (Shape{config.num_experts, config.hidden_size, config.intermediate_size}));
  EXPECT_EQ(gate.layout(), TensorLayout({None, "batch", "model"}, mesh_));
}

// Qwen 2 MoE: keras-hub's QwenSparseMoeBlock names (the shared expert's three kernels and its
// gate under the block) and QwenMoeBackbone's layouts; the dense layer 1 has no block.
TEST_F(MoeModelTest, QwenTwoMoeVariablesCarryKerasHubPathsAndLayouts) {
  const LlamaConfig config = LlamaConfig::from_json(small_hf_moe_spec("qwen2_moe").to_json());
  LlamaModel model(config, family_layout_map(config, mesh_));
  const auto vars = model.variables_by_path();
  const std::string b0 = "transformer_layer_0/qwen_sparse_moe_block/",
                    b2 = "transformer_layer_2/qwen_sparse_moe_block_1/";
  const std::pair<std::string, TensorLayout> want[] = {
      {b0 + "shared_expert_dense/feedforward_gate_dense/kernel",
       TensorLayout({"batch", "model"}, mesh_)},
      {b0 + "shared_expert_dense/feedforward_intermediate_dense/kernel",
       TensorLayout({"batch", "model"}, mesh_)},
      {b2 + "shared_expert_dense/feedforward_output_dense/kernel",
       TensorLayout({"model", "batch"}, mesh_)},
      {b2 + "shared_expert_gate_dense/kernel", TensorLayout({"batch", None}, mesh_)},
      {b2 + "sparse_feedforward_gate_dense/kernel", TensorLayout({"batch", None}, mesh_)},
      {b0 + "experts/expert_feedforward_gate_dense", TensorLayout({None, "batch", "model"}, mesh_)},
      {"transformer_layer_1/feedforward_gate_dense/kernel",
       TensorLayout({"batch", "model"}, mesh_)},
      {"transformer_layer_0/self_attention/query/kernel",
       TensorLayout({"batch", "model", None}, mesh_)},
      {"token_embedding/embeddings", TensorLayout({"model", "batch"}, mesh_)}};
  for (const auto& [path, layout] : want) {
    ASSERT_TRUE(vars.contains(path)) << path;
    EXPECT_EQ(vars.at(path)->layout(), layout) << path;
  }
  EXPECT_EQ(vars.at(b2 + "shared_expert_gate_dense/kernel")->shape(),
            (Shape{config.hidden_size, 1}));
  EXPECT_EQ(vars.at(b0 + "shared_expert_dense/feedforward_output_dense/kernel")->shape(),
            (Shape{config.shared_expert_intermediate_size, config.hidden_size}));
  EXPECT_FALSE(
      vars.contains("transformer_layer_1/qwen_sparse_moe_block/shared_expert_gate_dense/kernel"));
}

// Saved back to Hugging Face format (save_hf_llama: the stacked experts sliced, whose slices
// interleave with one another's; Qwen 2 MoE's shared expert and its gate) and loaded again,
// every variable comes back bit for bit, and the file holds exactly the checkpoint's tensors.
TEST_F(MoeModelTest, SavedToHuggingFaceFormatAndLoadedAgainEveryVariableIsKept) {
  for (const char* family : {"mixtral", "qwen3_moe", "qwen2_moe"}) {
    SCOPED_TRACE(family);
    clear_session();
    const HfMoeSpec spec = small_hf_moe_spec(family);
    const auto hf = random_hf_moe_tensors(spec, 31);
    write_hf_moe((dir_ / family / "in").string(), spec, hf);
    const HfLlamaCheckpoint in = HfLlamaCheckpoint::open((dir_ / family / "in").string());
    LlamaModel model(in.config(), family_layout_map(in.config(), mesh_));
    load_hf_llama(in, model.variables_by_path());
    std::map<std::string, const Array*> by_path;
    for (const auto& [path, a] : model.variables_by_path()) by_path.emplace(path, a);
    save_hf_llama((dir_ / family / "out").string(), in.config(), by_path);
    const HfLlamaCheckpoint out = HfLlamaCheckpoint::open((dir_ / family / "out").string());
    EXPECT_EQ(out.config(), in.config());
    std::set<std::string> names, want;
    for (const HfWeightMapping& m : out.mappings()) names.insert(m.hf_name);
    for (const auto& [name, shape] : hf_moe_tensor_shapes(spec)) want.insert(name);
    EXPECT_EQ(names, want);
    LlamaModel again(out.config(), LayoutMap(mesh_));
    EXPECT_EQ(load_hf_llama(out, again.variables_by_path()).tensors_loaded,
              static_cast<int64_t>(want.size()));
    const auto first = model.variables_by_path();
    for (const auto& [path, a] : again.variables_by_path()) {
      const HostTensor x = a->gather(), y = first.at(path)->gather();
      ASSERT_EQ(x.num_bytes(), y.num_bytes()) << path;
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.num_bytes()), 0) << path;
    }
  }
}

// Training: the loss with the auxiliary loss equals the reference's; expert parallelism gives
// the replicated run's loss and gradients; float64 gradients match central differences.
TEST_F(MoeModelTest, TrainingLossAndGradientsIncludeTheLoadBalancingLoss) {
  const std::vector<int32_t> inputs = {3, 17, 42, 5, 9, 1, 0, 63, 30, 8};  // (2, 5)
  const std::vector<int32_t> targets = {17, 42, 5, 9, 2, 0, 63, 30, 8, 11};
  for (const char* family : {"qwen3_moe", "qwen2_moe"}) {
    SCOPED_TRACE(family);
    HfMoeSpec spec = small_hf_moe_spec(family);
    spec.router_aux_loss_coef = 0.3;  // large enough to matter in the check
    LlamaConfig config = LlamaConfig::from_json(spec.to_json());
    config.output_router_logits = true;
    const auto hf = random_hf_moe_tensors(spec, 77);
    write_hf_moe((dir_ / family).string(), spec, hf);
    const HfLlamaCheckpoint checkpoint = HfLlamaCheckpoint::open((dir_ / family).string());
    const testing::HfMoeLoss want = testing::hf_moe_reference_loss(spec, hf, inputs, targets, 2, 5);
    std::optional<double> first_loss;
    std::map<std::string, HostTensor> first_grads;
    for (const char* axis : {"", "model", "batch"}) {
      SCOPED_TRACE(axis);
      clear_session();
      LlamaModel model(config, *axis ? expert_parallel(axis) : LayoutMap(mesh_));
      load_hf_llama(checkpoint, model.variables_by_path());
      Gradients grads;
      const double loss = model.loss_and_gradients(tokens(inputs, 2), tokens(targets, 2), grads);
      EXPECT_NEAR(loss, want.ce + spec.router_aux_loss_coef * want.aux, 1e-4 * std::abs(loss));
      if (!first_loss) {
        first_loss = loss;
        for (const VariablePtr& v : model.variables())
          first_grads[v->path()] = grads.find(*v)->gather();
        continue;
      }
      EXPECT_NEAR(loss, *first_loss, 1e-6);
      for (const VariablePtr& v : model.variables()) {
        const HostTensor g = grads.find(*v)->gather();
        const HostTensor& w = first_grads.at(v->path());
        for (int64_t i = 0; i < g.num_elements(); ++i) {
          ASSERT_NEAR(g.data_as<float>()[i], w.data_as<float>()[i],
                      1e-5 * (1 + std::abs(w.data_as<float>()[i])))
              << v->path() << " " << i;
        }
      }
    }
  }
}

// float64 gradients of the loss with its auxiliary loss against central differences at
// `per_variable` entries of every variable whose path contains `part`, the experts split over
// the model axis and the shared expert (Qwen 2 MoE) as keras-hub splits it. Returns how many
// entries were checked.
int64_t check_float64_gradients(MoeModelTest& test, const std::string& family,
                                const std::string& part, int64_t per_variable);

TEST_F(MoeModelTest, Float64GradientsMatchCentralDifferencesUnderExpertParallelism) {
  // Mixtral: three entries of each router and expert kernel and of the embeddings.
  EXPECT_EQ(check_float64_gradients(*this, "mixtral", "moe_block", 3), 2 * 4 * 3);
  EXPECT_GT(check_float64_gradients(*this, "mixtral", "embeddings", 1), 0);
}

TEST_F(MoeModelTest, Float64GradientsOfTheSharedExpertAndItsGateMatchCentralDifferences) {
  // Qwen 2 MoE: one entry of the shared expert's three kernels and its gate, two layers.
  EXPECT_EQ(check_float64_gradients(*this, "qwen2_moe", "shared_expert", 1), 2 * 4);
}

int64_t check_float64_gradients(MoeModelTest& test, const std::string& family,
                                const std::string& part, int64_t per_variable) {
  SCOPED_TRACE(family);
  const std::vector<int32_t> inputs = {3, 17, 42, 5, 9, 1, 0, 63, 30, 8};
  const std::vector<int32_t> targets = {17, 42, 5, 9, 2, 0, 63, 30, 8, 11};
  clear_session();
  LlamaConfig config = LlamaConfig::from_json(small_hf_moe_spec(family).to_json());
  config.output_router_logits = true;
  config.router_aux_loss_coef = 0.5;
  LayoutMap rules = test.expert_parallel("model");
  rules["sparse_feedforward_gate_dense/kernel"] = TensorLayout({"batch", None});
  rules["shared_expert_dense/feedforward_(gate|intermediate)_dense/kernel"] =
      TensorLayout({"batch", "model"});
  rules["shared_expert_dense/feedforward_output_dense/kernel"] = TensorLayout({"model", "batch"});
  rules["shared_expert_gate_dense/kernel"] = TensorLayout({"batch", None});
  LlamaModel model(config, rules, {.dtype = DType::kF64});
  uint64_t seed = 9;
  for (const VariablePtr& v : model.variables()) {
    HostTensor t = HostTensor::random(DType::kF64, v->shape(), seed++);
    if (v->path().find("norm") != std::string::npos) {
      for (int64_t i = 0; i < t.num_elements(); ++i) t.data_as<double>()[i] += 1.0;
    }
    v->assign(t);
  }
  const Array x = test.tokens(inputs, 2), y = test.tokens(targets, 2);
  Gradients grads;
  model.loss_and_gradients(x, y, grads);
  int64_t checked = 0;
  for (const VariablePtr& v : model.variables()) {
    if (v->path().find(part) == std::string::npos) continue;
    const HostTensor g = grads.find(*v)->gather();
    HostTensor t = v->value().gather();
    const int64_t step = std::max<int64_t>(1, t.num_elements() / per_variable);
    for (int64_t i = step / 2; i < t.num_elements(); i += step) {
      const double keep = t.data_as<double>()[i], h = 1e-6;
      const auto loss_at = [&](double value) {
        t.data_as<double>()[i] = value;
        v->assign(t);
        Gradients unused;
        return model.loss_and_gradients(x, y, unused);
      };
      const double numeric = (loss_at(keep + h) - loss_at(keep - h)) / (2 * h);
      loss_at(keep);
      EXPECT_NEAR(g.data_as<double>()[i], numeric, 1e-6 * (1 + std::abs(numeric)))
          << v->path() << " " << i;
      ++checked;
    }
  }
  return checked;
}

TEST_F(MoeModelTest, ConfigsRoundTripAndBadValuesAreRefusedByName) {
  for (const char* family : {"mixtral", "qwen3_moe", "qwen2_moe"}) {
    const LlamaConfig c = LlamaConfig::from_json(small_hf_moe_spec(family).to_json());
    EXPECT_TRUE(c.moe());
    EXPECT_EQ(LlamaConfig::from_json(c.to_json()), c);
  }
  // Qwen 2 MoE: Qwen 2's attention, the shared expert's size, transformers' defaults.
  const HfMoeSpec q2 = small_hf_moe_spec("qwen2_moe");
  const LlamaConfig q = LlamaConfig::from_json(q2.to_json());
  EXPECT_EQ(q.architecture(), "Qwen2MoeForCausalLM");
  EXPECT_EQ(q.shared_expert_intermediate_size, q2.shared_expert_intermediate_size);
  EXPECT_EQ(q.moe_intermediate_size, q2.moe_intermediate_size);
  EXPECT_EQ(q.mlp_only_layers, q2.mlp_only_layers);
  EXPECT_FALSE(q.norm_topk_prob);
  EXPECT_TRUE(q.qkv_bias());
  EXPECT_FALSE(q.output_bias());
  EXPECT_FALSE(q.qk_norm());
  EXPECT_EQ(q.head_dim, q.hidden_size / q.num_attention_heads);
  EXPECT_EQ(q.sparse_block_name(2), "qwen_sparse_moe_block_1");
  const LlamaConfig d = LlamaConfig::from_json(
      R"({"model_type": "qwen2_moe", "architectures": ["Qwen2MoeForCausalLM"],
          "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
          "num_attention_heads": 4})");
  EXPECT_EQ(d.num_experts, 60);
  EXPECT_EQ(d.num_experts_per_tok, 4);
  EXPECT_EQ(d.moe_intermediate_size, 1408);
  EXPECT_EQ(d.shared_expert_intermediate_size, 5632);
  EXPECT_EQ(d.decoder_sparse_step, 1);
  EXPECT_FALSE(d.norm_topk_prob);
  EXPECT_FALSE(d.output_router_logits);
  EXPECT_DOUBLE_EQ(d.router_aux_loss_coef, 0.001);
  LlamaConfig no_shared = q;
  no_shared.shared_expert_intermediate_size = 0;
  EXPECT_THAT([&] { no_shared.validate(); },
              ::testing::ThrowsMessage<ValueError>(
                  HasSubstr("'shared_expert_intermediate_size' is 0, expected a positive number")));
  LlamaConfig q3 = LlamaConfig::from_json(small_hf_moe_spec("qwen3_moe").to_json());
  q3.shared_expert_intermediate_size = 8;
  EXPECT_THAT([&] { q3.validate(); }, ::testing::ThrowsMessage<ValueError>(
                                          HasSubstr("expected 0 for model_type 'qwen3_moe'")));
  // The layer: a shared expert needs the block's width for its down projection.
  EXPECT_THAT(
      [] {
        SparseMoe(
            {.num_experts = 4, .top_k = 2, .intermediate_dim = 8, .shared_intermediate_dim = 16});
      },
      ::testing::ThrowsMessage<ValueError>(HasSubstr("shared_intermediate_dim (16) at least 0 "
                                                     "and, with a shared expert, hidden_dim (0)")));
  std::string bad = q2.to_json();
  bad.insert(bad.find('{') + 1, "\"shared_expert_intermediate_size\": -3,");
  EXPECT_THAT([&] { LlamaConfig::from_json(bad); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("shared_expert_intermediate_size")));
  LlamaConfig c = LlamaConfig::from_json(small_hf_moe_spec("mixtral").to_json());
  c.num_experts_per_tok = c.num_experts + 1;
  EXPECT_THAT([&] { c.validate(); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("'num_experts_per_tok' is 5")));
  std::string json = small_hf_moe_spec("mixtral").to_json();
  json.insert(json.find('{') + 1, "\"router_jitter_noise\": 0.1,");
  EXPECT_THAT([&] { LlamaConfig::from_json(json); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("router_jitter_noise")));
}

}  // namespace
}  // namespace meshlayout
