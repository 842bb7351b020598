#include "meshlayout/cli/rules_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/models/hf_llama_config.h"

namespace meshlayout::cli {
namespace {

using ::testing::HasSubstr;

class RulesCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    dir_ = ::testing::TempDir() + "rules_cmd_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
           std::to_string(getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    reset_device_count();
  }
  std::string write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  // Runs the command; returns stdout, with stderr in err_.
  std::string run(RulesConvertOptions o) {
    std::ostringstream out, err;
    EXPECT_EQ(run_rules_convert(o, out, err), 0);
    err_ = err.str();
    return out.str();
  }
  std::string error_of(RulesConvertOptions o) {
    try {
      run(std::move(o));
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }
  std::string dir_, err_;
};

constexpr const char* kPlan = R"({"layers.*.self_attn.q_proj": "colwise",
  "layers.*.self_attn.o_proj": "rowwise", "layers.*.mlp.down_proj": "rowwise"})";

TEST_F(RulesCommandTest, HfPlanToKerasHubAndBack) {
  std::string plan = write("plan.json", kPlan);
  std::string keras = run({.file = plan, .from = "hf-tp-plan", .to = "keras-hub"});
  EXPECT_EQ(
      keras,
      "{\n"
      "  \"^transformer_layer_\\\\d+/self_attention/query/kernel$\": [null, \"model\", null],\n"
      "  \"^transformer_layer_\\\\d+/self_attention/query/bias$\": [\"model\", null],\n"
      "  \"^transformer_layer_\\\\d+/self_attention/attention_output/kernel$\": "
      "[\"model\", null, null],\n"
      "  \"^transformer_layer_\\\\d+/self_attention/attention_output/bias$\": [null],\n"
      "  \"^transformer_layer_\\\\d+/feedforward_output_dense/kernel$\": [\"model\", null]\n"
      "}\n");
  EXPECT_EQ(err_, "");
  std::string back = run({.file = write("k.json", keras), .from = "keras-hub", .to = "hf-tp-plan"});
  EXPECT_EQ(nlohmann::json::parse(back), nlohmann::json::parse(kPlan));
}

TEST_F(RulesCommandTest, MeshModelAndWarnings) {
  LlamaConfig c{.vocab_size = 64,
                .hidden_size = 32,
                .intermediate_size = 48,
                .num_hidden_layers = 40,
                .num_attention_heads = 4,
                .num_key_value_heads = 2,
                .head_dim = 8,
                .max_position_embeddings = 64};
  c.family = "qwen2";
  std::filesystem::create_directories(dir_ + "/model");
  write("model/config.json", c.to_json());
  // Layer 35 differs: only a check of every layer of the model sees it.
  std::string keras = write("k.json", R"({"transformer_layer_\\d+/self_attention/query/kernel":
      [null, "model", null], "transformer_layer_35/self_attention/query/bias": ["model", null]})");
  EXPECT_THAT(
      error_of({.file = keras, .from = "keras-hub", .to = "hf-tp-plan", .model = dir_ + "/model"}),
      HasSubstr("'transformer_layer_0/self_attention/query/bias' gets no rule "
                "(replicated) but 'transformer_layer_35/self_attention/query/bias'"));
  // The mesh is checked and written; HF's colwise_rep is dropped with a warning.
  std::string plan = write("p.json", R"({"lm_head": "colwise_rep"})");
  std::string rules = run({.file = plan,
                           .from = "hf-tp-plan",
                           .to = "meshlayout",
                           .mesh = "batch=2,model=4",
                           .model = dir_ + "/model"});
  EXPECT_THAT(rules,
              HasSubstr("\"mesh\": {\"shape\": [2, 4], \"axis_names\": [\"batch\", \"model\"]}"));
  EXPECT_THAT(rules, HasSubstr("[\"^lm_head\\\\.weight$\", [\"model\", null]]"));
  EXPECT_THAT(err_, HasSubstr("warning: rule 'lm_head' (colwise_rep)"));
  EXPECT_THAT(
      error_of(
          {.file = plan, .from = "hf-tp-plan", .to = "meshlayout", .mesh = "batch=2,tensor=4"}),
      HasSubstr("mesh axis 'model' is not an axis of the mesh (batch, tensor)"));
  // --tp-axis names the split axis.
  std::string t = run({.file = plan,
                       .from = "hf-tp-plan",
                       .to = "maxtext",
                       .mesh = "batch=2,tensor=4",
                       .tp_axis = "tensor"});
  EXPECT_THAT(t, HasSubstr("- ['tensor', 'tensor']"));
  EXPECT_THAT(t, HasSubstr("'lm_head.weight': ['tensor', null]"));
}

TEST_F(RulesCommandTest, ErrorsNameTheFileAndTheRule) {
  std::string bad = write("bad.json", R"({"layers.*.q_proj": "colwize"})");
  std::string e = error_of({.file = bad, .from = "hf-tp-plan", .to = "meshlayout"});
  EXPECT_THAT(e, HasSubstr("bad.json' plan key 'layers.*.q_proj': unknown Hugging Face style "
                           "'colwize'"));
  std::string yaml = write("bad.yml", "logical_axis_rules: [[embed, fsdp]\n");
  EXPECT_THAT(error_of({.file = yaml, .from = "maxtext", .to = "meshlayout"}),
              HasSubstr("bad.yml':"));
  EXPECT_THAT(error_of({.file = dir_ + "/none.json", .from = "maxtext", .to = "meshlayout"}),
              HasSubstr("none.json"));
  EXPECT_THAT(error_of({.file = bad, .from = "flax", .to = "meshlayout"}),
              HasSubstr("unknown rules dialect 'flax'"));
  EXPECT_THAT(error_of({.file = bad, .from = "hf-tp-plan", .to = "maxtext", .names = "torch"}),
              HasSubstr("--names 'torch': expected hf or keras-hub"));
  EXPECT_THAT(error_of({.file = bad, .from = "hf-tp-plan", .to = "maxtext", .family = "bert"}),
              HasSubstr("'colwize'"));
  std::string keras = write("k.json", R"({"conv.*kernel": [null, "model"]})");
  EXPECT_THAT(error_of({.file = keras, .from = "keras-hub", .to = "maxtext"}),
              HasSubstr("k.json' rule 'conv.*kernel': pattern 'conv.*kernel' uses regex "
                        "features"));
}

// suggest -> check -> diff on a model directory (config.json only: nothing is allocated).
class RulesAnalysisTest : public RulesCommandTest {
 protected:
  void SetUp() override {
    RulesCommandTest::SetUp();
    LlamaConfig c{.vocab_size = 64,
                  .hidden_size = 32,
                  .intermediate_size = 48,
                  .num_hidden_layers = 2,
                  .num_attention_heads = 4,
                  .num_key_value_heads = 2,
                  .head_dim = 8,
                  .max_position_embeddings = 64};
    std::filesystem::create_directories(dir_ + "/model");
    model_ = write("model/config.json", c.to_json());
  }
  template <typename Args, typename Run>
  std::string run_cmd(Run run, const Args& args, int want_exit) {
    std::ostringstream out, err;
    EXPECT_EQ(run(args, out, err), want_exit);
    err_ = err.str();
    return out.str();
  }
  template <typename Args, typename Run>
  std::string error_in(Run run, const Args& args) {
    try {
      std::ostringstream out, err;
      run(args, out, err);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }
  std::string model_dir() const { return dir_ + "/model"; }
  std::string model_;
};

TEST_F(RulesAnalysisTest, SuggestThenCheck) {
  const std::string rules = run_cmd(run_rules_suggest,
                                    RulesSuggestArgs{.model = model_dir(),
                                                     .mesh = "batch=2,model=3",
                                                     .strategy = "megatron+fsdp",
                                                     .min_bytes = "200"},
                                    0);
  EXPECT_THAT(rules, HasSubstr("\"mesh\": {\"shape\": [2, 3], \"axis_names\": [\"batch\", "
                               "\"model\"]}"));
  // 4 heads over 3 devices: the hidden size instead, said so.
  EXPECT_THAT(rules, HasSubstr("[\"^transformer_layer_\\\\d+/self_attention/query/kernel$\", "
                               "[\"model\", \"batch\", null],\n     \"megatron: the hidden size "
                               "(32) over 'model' (3): row-parallel"));
  EXPECT_THAT(err_, HasSubstr("rules suggest: "));
  EXPECT_THAT(err_, HasSubstr("note: the model: "));  // 4 heads over 3: uneven, said so
  const std::string file = write("suggested.json", rules);
  EXPECT_THAT(run_cmd(run_rules_check,
                      RulesCheckArgs{.model = model_dir(), .rules = file, .min_bytes = "200"}, 0),
              HasSubstr("ok: "));
  // The default threshold (1 MiB) leaves this tiny model nothing to split: every rule is
  // still used, and nothing large is replicated.
  run_cmd(run_rules_check, RulesCheckArgs{.model = model_dir(), .rules = file}, 0);
  // Below the suggestion's threshold the norm scales (128 bytes) are replicated: problems.
  const std::string p = run_cmd(
      run_rules_check, RulesCheckArgs{.model = model_dir(), .rules = file, .min_bytes = "8"}, 1);
  EXPECT_THAT(p, HasSubstr("problem: tensor 'transformer_layer_0/self_attention_layernorm/scale' "
                           "(32,) (128 bytes) is replicated: no rule matches it"));
  EXPECT_THAT(p, HasSubstr("rules check: 5 problems with"));
  // Weights-only is not needed for suggest: a directory without config.json is read by its
  // safetensors files, and an empty one is an error naming it.
  std::filesystem::create_directories(dir_ + "/empty");
  EXPECT_THAT(
      error_in(run_rules_suggest, RulesSuggestArgs{.model = dir_ + "/empty", .mesh = "model=8"}),
      HasSubstr("empty"));
}

TEST_F(RulesAnalysisTest, CheckListsEveryProblemAndDiffEveryTensor) {
  const std::string bad = write("bad.json", R"({"rules": [["query", [null, "model", null]],
      ["kernel", ["model", null, null]], ["typo_dense", [null, "model"]]]})");
  const std::string p = run_cmd(
      run_rules_check, RulesCheckArgs{.model = model_dir(), .rules = bad, .min_bytes = "1KiB"}, 1);
  EXPECT_THAT(p, HasSubstr("problem: tensor 'transformer_layer_0/self_attention/query/kernel' "
                           "matches 2 rules"));
  EXPECT_THAT(p, HasSubstr("problem: tensor 'transformer_layer_1/self_attention/query/kernel' "
                           "matches 2 rules"));
  EXPECT_THAT(p, HasSubstr("('typo_dense') is unused"));
  EXPECT_THAT(p, HasSubstr("'token_embedding/embeddings' (64, 32) (8192 bytes) is replicated"));
  // An HF plan against keras-hub's map: one line per tensor with both layouts.
  const std::string plan = write("plan.json", kPlan);
  const std::string keras = write("keras.json", R"({
    "token_embedding/embeddings": ["model", "batch"],
    "transformer_layer.*self_attention.*(query|key|value).kernel": ["model", "batch", null],
    "transformer_layer.*attention_output.kernel": ["model", null, "batch"]})");
  const std::string d = run_cmd(run_rules_diff,
                                RulesDiffArgs{.a = plan,
                                              .b = keras,
                                              .model = model_dir(),
                                              .from_a = "hf-tp-plan",
                                              .from_b = "keras-hub"},
                                1);
  EXPECT_THAT(d, HasSubstr("token_embedding/embeddings (64, 32): A replicated  B [\"model\", "
                           "\"batch\"]\n"));
  EXPECT_THAT(d, HasSubstr("transformer_layer_1/self_attention/query/kernel (32, 4, 8): A [null, "
                           "\"model\", null]  B [\"model\", \"batch\", null]\n"));
  EXPECT_THAT(d, HasSubstr("transformer_layer_0/feedforward_output_dense/kernel (48, 32): A "
                           "[\"model\", null]  B replicated\n"));
  EXPECT_THAT(err_, HasSubstr("rules diff: "));
  EXPECT_EQ(run_cmd(run_rules_diff,
                    RulesDiffArgs{.a = plan,
                                  .b = plan,
                                  .model = model_dir(),
                                  .from_a = "hf-tp-plan",
                                  .from_b = "hf-tp-plan"},
                    0),
            "");
}

TEST_F(RulesAnalysisTest, BadInputIsNamed) {
  EXPECT_THAT(
      error_in(run_rules_suggest,
               RulesSuggestArgs{.model = model_dir(), .mesh = "model=8", .strategy = "zero3"}),
      HasSubstr("unknown strategy 'zero3'"));
  EXPECT_THAT(error_in(run_rules_suggest, RulesSuggestArgs{.model = model_dir(), .mesh = "data=8"}),
              HasSubstr("has no axis 'model'"));
  EXPECT_THAT(error_in(run_rules_suggest,
                       RulesSuggestArgs{.model = model_dir(), .mesh = "model=8", .family = "bert"}),
              HasSubstr("unknown model family 'bert'"));
  EXPECT_THAT(
      error_in(run_rules_suggest,
               RulesSuggestArgs{.model = model_dir(), .mesh = "model=8", .min_bytes = "lots"}),
      HasSubstr("--min-bytes"));
  const std::string malformed = write("m.json", R"({"rules": [["a"]]})");
  EXPECT_THAT(error_in(run_rules_check, RulesCheckArgs{.model = model_dir(), .rules = malformed}),
              HasSubstr("m.json"));
  EXPECT_THAT(error_in(run_rules_diff,
                       RulesDiffArgs{
                           .a = malformed, .b = malformed, .model = model_dir(), .from_a = "flax"}),
              HasSubstr("unknown rules dialect 'flax'"));
}

}  // namespace
}  // namespace meshlayout::cli
