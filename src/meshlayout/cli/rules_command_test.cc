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

}  // namespace
}  // namespace meshlayout::cli
