// `meshlayout generate` on a tiny random Llama written with save_hf_llama: the JSON lines parse
// and give the tokens (and log-probabilities) of generate() on a replicated model, the same
// tokens under the Megatron and keras-hub rules files and on other meshes, the text report, and
// each refusal. Also the example rules files under examples/rules/.
#include "meshlayout/cli/generate_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "meshlayout/cli/generate_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/models/generation.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout::cli {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using testing::ValueErrorMessage;

const std::string kRulesDir = std::string(MESHLAYOUT_SOURCE_DIR) + "/examples/rules/";

struct Step {
  int64_t step;
  int32_t token;
  double logprob;
};

class GenerateCommandTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    set_device_count(4);
    dir_ =
        (std::filesystem::temp_directory_path() / ("generate_test_" + std::to_string(::getpid())))
            .string();
    std::filesystem::create_directories(dir_);
    testing::write_tiny_llama(dir_);
    // What generate() gives on a replicated model loaded from that directory.
    clear_session();
    LlamaModel model(testing::tiny_generate_config(), LayoutMap(default_generate_mesh()));
    load_hf_llama(HfLlamaCheckpoint::open(dir_), model.variables_by_path());
    want_ = new std::vector<Step>;
    generate(model, {kPrompt},
             {.max_new_tokens = kNew, .on_token = [](int64_t step, int64_t, int32_t t, double lp) {
                want_->push_back({step, t, lp});
              }});
    reset_device_count();
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(dir_);
    delete want_;
  }
  void SetUp() override {
    set_device_count(4);
    clear_session();
  }
  void TearDown() override { reset_device_count(); }

  static std::vector<Step> run_json(GenerateCommandOptions o) {
    o.json = true;
    std::ostringstream out;
    clear_session();
    EXPECT_EQ(run_generate(o, out), 0);
    std::vector<Step> steps;
    std::istringstream lines(out.str());
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);  // throws if not valid JSON
      EXPECT_EQ(j.size(), 3u) << line;
      steps.push_back({j.at("step").get<int64_t>(), j.at("token").get<int32_t>(),
                       j.at("logprob").get<double>()});
    }
    return steps;
  }
  static GenerateCommandOptions options() {
    return {.model_dir = dir_, .prompt = "5,17,42", .max_new_tokens = kNew};
  }

  static inline const std::vector<int32_t> kPrompt = {5, 17, 42};
  static constexpr int64_t kNew = 6;
  static inline std::string dir_;
  static inline std::vector<Step>* want_ = nullptr;
};

TEST_F(GenerateCommandTest, JsonLinesGiveTheTokensOfGenerateOnAReplicatedModel) {
  ASSERT_EQ(want_->size(), static_cast<size_t>(kNew));
  const std::vector<Step> got = run_json(options());
  ASSERT_EQ(got.size(), want_->size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].step, static_cast<int64_t>(i));
    EXPECT_EQ(got[i].token, (*want_)[i].token) << "step " << i;
    // Printed with 17 significant digits: the double read back is the one computed.
    EXPECT_EQ(got[i].logprob, (*want_)[i].logprob) << "step " << i;
    EXPECT_LE(got[i].logprob, 0.0);
  }
}

TEST_F(GenerateCommandTest, SameTokensUnderTheExampleRulesFilesAndOtherMeshes) {
  struct Case {
    std::string rules, mesh;
  };
  const Case cases[] = {{"llama_megatron.json", ""},
                        {"llama_megatron.json", "batch=1,model=2"},
                        {"llama_keras_hub.json", ""},
                        {"llama_keras_hub.json", "batch=2,model=2"},
                        {"", "model=4"}};
  for (const Case& c : cases) {
    GenerateCommandOptions o = options();
    if (!c.rules.empty()) o.rules_path = kRulesDir + c.rules;
    if (!c.mesh.empty()) o.mesh = c.mesh;
    const std::vector<Step> got = run_json(o);
    ASSERT_EQ(got.size(), want_->size()) << c.rules << " " << c.mesh;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].token, (*want_)[i].token) << c.rules << " " << c.mesh << " step " << i;
      EXPECT_NEAR(got[i].logprob, (*want_)[i].logprob, 1e-4)
          << c.rules << " " << c.mesh << " step " << i;
    }
  }
}

TEST_F(GenerateCommandTest, ShardedCheckpointDirectoryGivesTheSameTokens) {
  const std::string sharded = dir_ + "_sharded";
  std::filesystem::create_directories(sharded);
  testing::write_tiny_llama(sharded, /*num_shards=*/3);
  GenerateCommandOptions o = options();
  o.model_dir = sharded;
  o.rules_path = kRulesDir + "llama_megatron.json";
  const std::vector<Step> got = run_json(o);
  std::filesystem::remove_all(sharded);
  ASSERT_EQ(got.size(), want_->size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].token, (*want_)[i].token);
}

TEST_F(GenerateCommandTest, TextReportShowsPromptTokensRatesAndMemory) {
  GenerateCommandOptions o = options();
  o.rules_path = kRulesDir + "llama_megatron.json";
  std::ostringstream out;
  EXPECT_EQ(run_generate(o, out), 0);
  const std::string text = out.str();
  std::string ids;
  for (const Step& s : *want_) ids += (ids.empty() ? "" : ",") + std::to_string(s.token);
  EXPECT_THAT(text, HasSubstr("vocab 64, hidden 16, 2 layers, 4 heads / 2 key-value heads, ff 32"));
  EXPECT_THAT(text, HasSubstr("mesh: mesh[batch=1,model=4] (1 process x 4 local devices)"));
  EXPECT_THAT(text, ContainsRegex("rules: '.*llama_megatron.json' \\(6 rules, search mode\\)"));
  EXPECT_THAT(text, HasSubstr("prompt (3 tokens): 5,17,42\n"));
  EXPECT_THAT(text, HasSubstr("generated (6 tokens): " + ids + "\n"));
  EXPECT_THAT(text, ContainsRegex("prefill: 3 tokens in [0-9.]+ s = [0-9.]+ tokens/s"));
  EXPECT_THAT(text, ContainsRegex("decode: +[0-9]+ tokens in [0-9.]+ s = [0-9.]+ tokens/s"));
  EXPECT_THAT(text, ContainsRegex("cpu:3 +live +[0-9.]+ [KMG]?i?B +peak"));
}

TEST_F(GenerateCommandTest, WithoutRulesEveryVariableIsReplicated) {
  std::ostringstream out;
  EXPECT_EQ(run_generate(options(), out), 0);
  EXPECT_THAT(out.str(), HasSubstr("rules: none: every variable replicated"));
}

TEST_F(GenerateCommandTest, RefusesBadInputNamingTheValue) {
  const auto message = [](GenerateCommandOptions o) {
    std::ostringstream out;
    try {
      clear_session();
      run_generate(o, out);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return "<nothing thrown> " + out.str();
  };
  GenerateCommandOptions o = options();
  o.prompt = "5,x,42";
  EXPECT_THAT(message(o),
              HasSubstr("--prompt '5,x,42' is not a comma-separated list of token ids"));
  EXPECT_THAT(message(o), HasSubstr("item 1 'x' is not a whole number"));
  o.prompt = "5,,42";
  EXPECT_THAT(message(o), HasSubstr("item 1 is empty"));
  o.prompt = "";
  EXPECT_THAT(message(o), HasSubstr("it is empty"));
  o.prompt = "-1";
  EXPECT_THAT(message(o), HasSubstr("item 0 '-1' is not a whole number"));
  o.prompt = "99999999999";
  EXPECT_THAT(message(o), HasSubstr("item 0 '99999999999' is too large"));
  o.prompt = "5,64";  // vocab is 64: generate's own ValueError reaches the user
  EXPECT_THAT(message(o), HasSubstr("token 64 at position 1 of prompt 0 is outside"));
  o = options();
  o.max_new_tokens = 0;
  EXPECT_THAT(message(o), HasSubstr("--max-new-tokens must be at least 1, got 0"));
  o = options();
  o.model_dir = "";
  EXPECT_THAT(message(o), HasSubstr("--model is required"));
  o.model_dir = dir_ + "/no-such-dir";
  EXPECT_THAT(message(o), HasSubstr("--model '" + dir_ + "/no-such-dir': no such directory"));
  o.model_dir = dir_ + "/config.json";
  EXPECT_THAT(message(o), HasSubstr("config.json' is not a directory"));
  o = options();
  o.mesh = "data=4";  // the keras-hub rules name "model" and "batch"
  o.rules_path = kRulesDir + "llama_keras_hub.json";
  EXPECT_THAT(message(o), ContainsRegex("model|batch"));
  o = options();
  o.rules_path = dir_ + "/missing.json";
  EXPECT_THAT(message(o), HasSubstr("missing.json"));
}

TEST(GenerateCommandParseTest, PromptAcceptsSpacesAroundItems) {
  EXPECT_EQ(parse_prompt("5, 17 ,42"), (std::vector<int32_t>{5, 17, 42}));
  EXPECT_EQ(parse_prompt("2147483647"), (std::vector<int32_t>{2147483647}));
  EXPECT_THAT(ValueErrorMessage([] { parse_prompt("2147483648"); }), HasSubstr("is too large"));
  EXPECT_THAT(ValueErrorMessage([] { parse_prompt("1.5"); }),
              HasSubstr("'1.5' is not a whole number"));
}

// The example rules files: each loads, and keras-hub paths get the documented layouts.
TEST(LlamaRulesFilesTest, KerasHubRulesGiveKerasHubLayouts) {
  set_device_count(8);
  const DeviceMesh mesh({2, 4}, {"batch", "model"});
  RulesFile file = load_rules_file(kRulesDir + "llama_keras_hub.json");
  EXPECT_FALSE(file.mesh.has_value());  // portable: the mesh comes from --mesh or the default
  file.mesh = mesh;
  const LayoutMap map = file.to_layout_map();
  const auto layout = [&](const std::string& path) {
    const std::optional<TensorLayout> l = map.get(path);
    if (!l) return std::string("none");
    const std::string text = l->to_string();  // layout[…]@mesh[…]
    return text.substr(0, text.find('@'));
  };
  EXPECT_EQ(layout("token_embedding/embeddings"), "layout[model,batch]");
  EXPECT_EQ(layout("transformer_layer_0/self_attention/query/kernel"), "layout[model,batch,None]");
  EXPECT_EQ(layout("transformer_layer_1/self_attention/value/kernel"), "layout[model,batch,None]");
  EXPECT_EQ(layout("transformer_layer_0/self_attention/attention_output/kernel"),
            "layout[model,None,batch]");
  EXPECT_EQ(layout("transformer_layer_3/feedforward_gate_dense/kernel"), "layout[batch,model]");
  EXPECT_EQ(layout("transformer_layer_3/feedforward_intermediate_dense/kernel"),
            "layout[batch,model]");
  EXPECT_EQ(layout("transformer_layer_3/feedforward_output_dense/kernel"), "layout[model,batch]");
  EXPECT_EQ(layout("transformer_layer_0/self_attention_layernorm/scale"), "none");
  EXPECT_EQ(layout("token_embedding/reverse_embeddings"), "none");
  EXPECT_EQ(layout("sequence_output_layernorm/scale"), "none");
  // The same as llama_layout_map (keras-hub's get_layout_map) on every variable of a model.
  const LayoutMap builtin = llama_layout_map(mesh, "model", "batch");
  for (const HfWeightMapping& m : hf_llama_weight_mappings(testing::tiny_generate_config())) {
    const std::optional<TensorLayout> a = map.get(m.keras_path), b = builtin.get(m.keras_path);
    EXPECT_EQ(a.has_value(), b.has_value()) << m.keras_path;
    if (a && b) {
      EXPECT_EQ(a->to_string(), b->to_string()) << m.keras_path;
    }
  }
  reset_device_count();
}

TEST(LlamaRulesFilesTest, MegatronRulesSplitHeadsAndFeedforward) {
  set_device_count(8);
  RulesFile file = load_rules_file(kRulesDir + "llama_megatron.json");
  EXPECT_FALSE(file.mesh.has_value());
  file.mesh = DeviceMesh({1, 8}, {"batch", "model"});
  const LayoutMap map = file.to_layout_map();
  const auto layout = [&](const std::string& path) {
    const std::optional<TensorLayout> l = map.get(path);
    if (!l) return std::string("none");
    const std::string text = l->to_string();  // layout[…]@mesh[…]
    return text.substr(0, text.find('@'));
  };
  EXPECT_EQ(layout("token_embedding/embeddings"), "layout[model,None]");
  EXPECT_EQ(layout("token_embedding/reverse_embeddings"), "layout[None,model]");
  EXPECT_EQ(layout("transformer_layer_0/self_attention/query/kernel"), "layout[None,model,None]");
  EXPECT_EQ(layout("transformer_layer_0/self_attention/key/kernel"), "layout[None,model,None]");
  EXPECT_EQ(layout("transformer_layer_0/self_attention/attention_output/kernel"),
            "layout[model,None,None]");
  EXPECT_EQ(layout("transformer_layer_7/feedforward_gate_dense/kernel"), "layout[None,model]");
  EXPECT_EQ(layout("transformer_layer_7/feedforward_intermediate_dense/kernel"),
            "layout[None,model]");
  EXPECT_EQ(layout("transformer_layer_7/feedforward_output_dense/kernel"), "layout[model,None]");
  EXPECT_EQ(layout("transformer_layer_7/feedforward_layernorm/scale"), "none");
  // Every rule is used by some variable of a Llama, and no path matches two rules.
  for (const HfWeightMapping& m : hf_llama_weight_mappings(testing::tiny_generate_config())) {
    EXPECT_NO_THROW(map.get(m.keras_path)) << m.keras_path;
  }
  reset_device_count();
}

}  // namespace
}  // namespace meshlayout::cli
