// The Llama-style families from their Hugging Face directories: Llama 2, Llama 3 (rope_scaling
// "llama3"), Mistral (sliding window), Qwen 2 (q/k/v biases, tied embeddings) and Qwen 3 (q/k
// head norms, head_dim independent of hidden_size / heads). Each is a small model with random
// weights (biases and norm weights too) written in Hugging Face format by hand, loaded sharded
// under replicated, keras-hub and Megatron rules on a 2x4 mesh; its logits are checked within
// 1e-4 relative of a float64 reference written from Hugging Face's modelling code on the HF
// tensors (hf_decoder_reference.h), and its greedy tokens against the reference's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/models/generation.h"
#include "meshlayout/models/hf_decoder_reference.h"
#include "meshlayout/models/hf_llama_test_util.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/models/llama_families_test_util.h"
#include "meshlayout/models/llama_test_util.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using testing::families;
using testing::Family;
using testing::max_relative_error;

class LlamaFamiliesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
    dir_ = std::filesystem::temp_directory_path() /
           ("meshlayout_families_" + std::to_string(::getpid()));
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    reset_device_count();
  }
  // A rules file of examples/rules/ on this mesh.
  LayoutMap rules_file(const std::string& name) const {
    RulesFile file =
        load_rules_file(std::string(MESHLAYOUT_SOURCE_DIR) + "/examples/rules/" + name);
    file.mesh = mesh_;
    return file.to_layout_map();
  }
  DeviceMesh mesh_{{2, 4}, {"batch", "model"}};
  std::filesystem::path dir_;
};

TEST_F(LlamaFamiliesTest, LogitsAndGreedyTokensMatchTheHuggingFaceEquations) {
  const std::vector<int32_t> tokens = {3, 17, 42, 5, 9, 1, 0, 63, 30, 8, 11, 2, 7, 60};  // (2, 7)
  uint64_t seed = 1;
  for (const Family& f : families()) {
    SCOPED_TRACE(f.what);
    const std::map<std::string, HostTensor> hf = testing::random_hf_tensors(f.config, seed += 100);
    const std::filesystem::path dir = dir_ / std::to_string(seed);
    testing::write_hf_by_hand(dir, f.config, hf);
    const HfLlamaCheckpoint checkpoint = HfLlamaCheckpoint::open(dir.string());
    ASSERT_EQ(checkpoint.config(), f.config);
    const std::vector<double> want = testing::hf_reference_logits(f.config, hf, tokens, 2, 7);
    const std::vector<int32_t> want_greedy =
        testing::hf_reference_greedy(f.config, hf, {3, 17, 42}, 4);
    LayoutMap megatron_biases = testing::megatron_rules(mesh_);
    megatron_biases["(query|key|value)/bias"] = TensorLayout({"model", None});
    megatron_biases["dense_layernorm/scale"] = TensorLayout({"model"});  // split, gathered
    const std::pair<std::string, LayoutMap> rule_sets[] = {
        {"replicated", LayoutMap(mesh_)},
        {"keras-hub", family_layout_map(f.config, mesh_, "model", "batch")},
        {"examples/rules/gemma_keras_hub.json", rules_file("gemma_keras_hub.json")},
        {"Megatron", testing::megatron_rules(mesh_)},
        {"Megatron, biases and norms split", megatron_biases},
        {"examples/rules/mistral_keras_hub.json", rules_file("mistral_keras_hub.json")},
        {"examples/rules/qwen_keras_hub.json", rules_file("qwen_keras_hub.json")},
        {"examples/rules/qwen_megatron.json", rules_file("qwen_megatron.json")}};
    for (const auto& [name, rules] : rule_sets) {
      SCOPED_TRACE(name);
      clear_session();
      LlamaModel model(f.config, rules);
      const HfLoadReport report = load_hf_llama(checkpoint, model.variables_by_path());
      EXPECT_EQ(report.tensors_loaded, static_cast<int64_t>(model.variables().size()));
      HostTensor t(DType::kI32, {2, 7});
      std::copy(tokens.begin(), tokens.end(), t.data_as<int32_t>());
      const Array logits = model.logits(distribute_tensor(t, TensorLayout({"batch", None}, mesh_)));
      EXPECT_LT(max_relative_error(logits.gather(), want), 1e-4);
      const GenerateResult r = generate(model, {{3, 17, 42}}, {.max_new_tokens = 4});
      EXPECT_EQ(r.tokens[0], want_greedy);
    }
  }
}

// Training: in float64, every family's loss gradient (LlamaModel::loss_and_gradients, the
// Trainer's fused path) against central differences of its loss, for every weight the families
// add (biases, head-norm scales) and a few entries of every other kind, under Megatron rules
// with the biases and norms split.
TEST_F(LlamaFamiliesTest, GradientsMatchCentralDifferencesInFloat64) {
  const std::vector<int32_t> inputs = {3, 17, 42, 5, 9, 1, 0, 63, 30, 8};  // (2, 5)
  const std::vector<int32_t> targets = {17, 42, 5, 9, 2, 0, 63, 30, 8, 11};
  LayoutMap rules = testing::megatron_rules(mesh_);
  rules["(query|key|value)/bias"] = TensorLayout({"model", None});
  rules["dense_layernorm/scale"] = TensorLayout({"model"});
  uint64_t seed = 7;
  for (const Family& f : families()) {
    SCOPED_TRACE(f.what);
    clear_session();
    LlamaModel model(f.config, rules, {.dtype = DType::kF64});
    // Random values everywhere (norm scales around 1, so no gradient term multiplies a zero).
    for (const VariablePtr& v : model.variables()) {
      HostTensor t = HostTensor::random(DType::kF64, v->shape(), seed++);
      if (v->path().find("norm") != std::string::npos) {
        for (int64_t i = 0; i < t.num_elements(); ++i) t.data_as<double>()[i] += 1.0;
      }
      v->assign(t);
    }
    HostTensor x(DType::kI32, {2, 5}), y(DType::kI32, {2, 5});
    std::copy(inputs.begin(), inputs.end(), x.data_as<int32_t>());
    std::copy(targets.begin(), targets.end(), y.data_as<int32_t>());
    const TensorLayout data({"batch", None}, mesh_);
    const Array xa = distribute_tensor(x, data), ya = distribute_tensor(y, data);
    Gradients grads;
    (void)model.loss_and_gradients(xa, ya, grads);
    int checked = 0;
    for (const VariablePtr& v : model.variables()) {
      const bool added = v->path().find("bias") != std::string::npos ||
                         v->path().find("dense_layernorm") != std::string::npos;
      const Array* g = grads.find(*v);
      ASSERT_NE(g, nullptr) << v->path();
      EXPECT_EQ(g->layout(), v->value().layout()) << v->path();
      const HostTensor gathered = g->gather();
      HostTensor w = v->value().gather();
      const int64_t n = w.num_elements();
      // Every element of what the families add; three spread entries of the others.
      std::vector<int64_t> entries;
      if (added) {
        for (int64_t i = 0; i < n; ++i) entries.push_back(i);
      } else {
        entries = {0, n / 2, n - 1};
      }
      for (const int64_t i : entries) {
        double& e = w.data_as<double>()[i];
        const double e0 = e, h = 1e-5;
        e = e0 + h;
        v->assign(w);
        const double up = model.loss(xa, ya);
        e = e0 - h;
        v->assign(w);
        const double down = model.loss(xa, ya);
        e = e0;
        v->assign(w);
        const double numeric = (up - down) / (2 * h);
        EXPECT_NEAR(gathered.data_as<double>()[i], numeric, 1e-7 * (1 + std::abs(numeric)))
            << v->path() << "[" << i << "]";
        ++checked;
      }
    }
    EXPECT_GT(checked, 40);
  }
}

// The variables each family adds, under keras-hub's paths, and their HF names.
TEST_F(LlamaFamiliesTest, KerasHubPathsOfWhatTheFamiliesAdd) {
  const std::vector<Family> all = families();
  const auto paths = [&](const LlamaConfig& c) {
    clear_session();
    LlamaModel model(c, LayoutMap(mesh_));
    std::map<std::string, Shape> out;
    for (const VariablePtr& v : model.variables()) out.emplace(v->path(), v->shape());
    return out;
  };
  const auto qwen2 = paths(all[3].config);
  EXPECT_EQ(qwen2.at("transformer_layer_0/self_attention/query/bias"), (Shape{4, 8}));
  EXPECT_EQ(qwen2.at("transformer_layer_1/self_attention/key/bias"), (Shape{2, 8}));
  EXPECT_EQ(qwen2.count("transformer_layer_0/self_attention/attention_output/bias"), 0u);
  const auto qwen3 = paths(all[4].config);
  EXPECT_EQ(qwen3.at("transformer_layer_0/self_attention/query/kernel"), (Shape{32, 4, 12}));
  EXPECT_EQ(qwen3.at("transformer_layer_0/self_attention/attention_output/kernel"),
            (Shape{4, 12, 32}));
  EXPECT_EQ(qwen3.at("transformer_layer_0/self_attention/query_dense_layernorm/scale"),
            (Shape{12}));
  EXPECT_EQ(qwen3.at("transformer_layer_1/self_attention/key_dense_layernorm/scale"), (Shape{12}));
  // keras-hub's Qwen rules (examples/rules/qwen_keras_hub.json): key/value kernels split on
  // their input dimension only, the biases and head norms replicated.
  clear_session();
  LlamaModel qwen(all[3].config, rules_file("qwen_keras_hub.json"));
  std::map<std::string, TensorLayout> layouts;
  for (const VariablePtr& v : qwen.variables()) layouts.emplace(v->path(), v->value().layout());
  EXPECT_EQ(layouts.at("transformer_layer_0/self_attention/key/kernel"),
            TensorLayout({"model", None, None}, mesh_));
  EXPECT_EQ(layouts.at("transformer_layer_0/self_attention/query/kernel"),
            TensorLayout({"model", "batch", None}, mesh_));
  EXPECT_EQ(layouts.at("transformer_layer_0/self_attention/query/bias"),
            TensorLayout({None, None}, mesh_));
  // qwen_layout_map (family_layout_map of a Qwen) is the rules file's map, variable by variable.
  clear_session();
  LlamaModel from_code(all[4].config, family_layout_map(all[4].config, mesh_, "model", "batch"));
  clear_session();
  LlamaModel from_file(all[4].config, rules_file("qwen_keras_hub.json"));
  ASSERT_EQ(from_code.variables().size(), from_file.variables().size());
  for (size_t i = 0; i < from_code.variables().size(); ++i) {
    EXPECT_EQ(from_code.variables()[i]->value().layout(),
              from_file.variables()[i]->value().layout())
        << from_code.variables()[i]->path();
  }
  try {
    (void)qwen_layout_map(mesh_, "model", "data");
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("qwen_layout_map: 'data' is not an axis"),
              std::string::npos)
        << e.what();
  }
  const auto biased = paths(all[5].config);
  EXPECT_EQ(biased.at("transformer_layer_0/self_attention/attention_output/bias"), (Shape{32}));
  // Every variable has an HF tensor and the other way round.
  for (const Family& f : all) {
    const auto keras = paths(f.config);
    const std::vector<HfWeightMapping> mappings = hf_llama_weight_mappings(f.config);
    EXPECT_EQ(mappings.size(), keras.size()) << f.what;
    for (const HfWeightMapping& m : mappings) {
      ASSERT_TRUE(keras.count(m.keras_path)) << f.what << ": " << m.keras_path;
      EXPECT_EQ(keras.at(m.keras_path), m.keras_shape) << m.keras_path;
    }
  }
  const std::vector<HfWeightMapping> m = hf_llama_weight_mappings(all[4].config);
  EXPECT_TRUE(std::any_of(m.begin(), m.end(), [](const HfWeightMapping& x) {
    return x.hf_name == "model.layers.0.self_attn.q_norm.weight" &&
           x.keras_path == "transformer_layer_0/self_attention/query_dense_layernorm/scale";
  }));
}

// A checkpoint whose config contradicts its weights is refused before anything is read: a
// Qwen 2 config over a Llama's tensors lacks the biases; a Llama config over a Qwen 3's has
// unexpected norm tensors.
TEST_F(LlamaFamiliesTest, AConfigThatContradictsTheWeightsIsNamed) {
  const std::vector<Family> all = families();
  const std::filesystem::path dir = dir_ / "mismatch";
  testing::write_hf_by_hand(dir, all[3].config, testing::random_hf_tensors(all[0].config, 5));
  std::string m;
  try {
    (void)HfLlamaCheckpoint::open(dir.string());
  } catch (const Error& e) {
    m = e.what();
  }
  EXPECT_NE(m.find("model.layers.0.self_attn.q_proj.bias"), std::string::npos) << m;
  const std::filesystem::path dir2 = dir_ / "mismatch2";
  LlamaConfig llama = all[4].config;
  llama.family = "llama";
  testing::write_hf_by_hand(dir2, llama, testing::random_hf_tensors(all[4].config, 5));
  m.clear();
  try {
    (void)HfLlamaCheckpoint::open(dir2.string());
  } catch (const Error& e) {
    m = e.what();
  }
  EXPECT_NE(m.find("q_norm.weight"), std::string::npos) << m;
}

}  // namespace
}  // namespace meshlayout
