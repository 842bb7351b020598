#include "meshlayout/cli/plan_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "meshlayout/cli/generate_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/plan/checkpoint_test_util.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout::cli {
namespace {

using meshlayout::testing::ValueErrorMessage;
using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr const char* kRules = R"({
  "mesh": {"shape": [2, 4], "axis_names": ["data", "model"]},
  "rules": [["dense.*kernel", [null, "model"]],
            ["emb", [["data", "model"], null]],
            ["typo_layer/kernel", ["model", null]]]})";

class PlanCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(kMaxMeshDevices);  // as the command does
    checkpoint_ =
        dir_.write_safetensors("model.safetensors", {{"dense_1/kernel", DType::kF32, {16, 8}},
                                                     {"dense_1/bias", DType::kF32, {8}},
                                                     {"emb/embeddings", DType::kBF16, {10, 6}},
                                                     {"head/table", DType::kF32, {32, 32}}});
    rules_ = dir_.write("rules.json", kRules);
  }
  void TearDown() override { reset_device_count(); }

  PlanCommandOptions options() const { return {.path = checkpoint_, .rules_path = rules_}; }

  // Runs the command; stores its output and returns the exit code.
  int run(const PlanCommandOptions& options) {
    std::ostringstream out;
    const int code = run_plan(options, out);
    out_ = out.str();
    return code;
  }
  json run_json(PlanCommandOptions options, int expected_code = 0) {
    options.json = true;
    EXPECT_EQ(run(options), expected_code);
    return json::parse(out_);
  }
  static const json& tensor(const json& plan, std::string_view path) {
    for (const json& t : plan["tensors"]) {
      if (t["path"] == path) return t;
    }
    throw NotFoundError(std::string(path));
  }
  static std::vector<json> issues(const json& list, std::string_view kind) {
    std::vector<json> out;
    for (const json& i : list) {
      if (i["kind"] == kind) out.push_back(i);
    }
    return out;
  }

  testing::ScratchDir dir_;
  std::string checkpoint_, rules_, out_;
};

TEST_F(PlanCommandTest, TextOutput) {
  EXPECT_EQ(run(options()), 0);
  EXPECT_THAT(out_, HasSubstr(fmt::format("plan of '{}': 4 tensors, 4.6 KiB (4760 bytes) on "
                                          "mesh[data=2,model=4] (8 devices), mode search\n",
                                          checkpoint_)));
  EXPECT_THAT(out_, HasSubstr("dense_1/kernel  F32    (16, 8)     512 B  #0    dense.*kernel  "
                              "layout[None,model]         (16, 2)         128 B\n"));
  EXPECT_THAT(out_, HasSubstr("head/table      F32    (32, 32)  4.0 KiB  -     -              "
                              "replicated                 (32, 32)      4.0 KiB\n"));
  EXPECT_THAT(out_, HasSubstr("emb/embeddings  BF16   (10, 6)     120 B  #1    emb            "
                              "layout[(data,model),None]  (2, 6)           24 B  uneven\n"));
  EXPECT_THAT(out_, HasSubstr("  cpu:0   (0, 0)     4.2 KiB  4280\n"));
  EXPECT_THAT(out_, HasSubstr("  cpu:7   (1, 3)     4.2 KiB  4256\n"));
  EXPECT_THAT(out_, HasSubstr("uneven: tensor 'emb/embeddings' (BF16 (10, 6)) under "
                              "layout[(data,model),None]: dimension 0 (size 10) is split over "
                              "axes ['data', 'model'] of total size 8: 5 blocks of 2, 3 empty\n"));
  EXPECT_THAT(out_, HasSubstr("unused_rule: rule #2 ('typo_layer/kernel' -> layout[model,None])"));
  EXPECT_THAT(out_, HasSubstr("plan OK: 0 errors, 2 warnings\n"));
}

TEST_F(PlanCommandTest, JsonFields) {
  const json j = run_json(options());
  EXPECT_EQ(j["source"], checkpoint_);
  EXPECT_EQ(j["files"], 1);
  EXPECT_EQ(j["mesh"]["shape"], json::parse("[2, 4]"));
  EXPECT_EQ(j["mesh"]["axis_names"], json::parse(R"(["data", "model"])"));
  EXPECT_EQ(j["mode"], "search");
  EXPECT_EQ(j["rules"][1], json::parse(R"({"index": 1, "pattern": "emb",
                                            "layout": [["data", "model"], null], "tensors": 1})"));

  const json& kernel = tensor(j, "dense_1/kernel");
  EXPECT_EQ(kernel["file"], checkpoint_);
  EXPECT_EQ(kernel["dtype"], "F32");
  EXPECT_EQ(kernel["shape"], json::parse("[16, 8]"));
  EXPECT_EQ(kernel["bytes"], 512);
  EXPECT_EQ(kernel["rule"], 0);
  EXPECT_EQ(kernel["pattern"], "dense.*kernel");
  EXPECT_EQ(kernel["layout"], json::parse(R"([null, "model"])"));
  EXPECT_EQ(kernel["shard_shape"], json::parse("[16, 2]"));
  EXPECT_EQ(kernel["shard_bytes"], 128);
  EXPECT_EQ(kernel["replicas"], 2);
  EXPECT_EQ(kernel["uneven"], false);
  EXPECT_FALSE(kernel.contains("error"));

  const json& emb = tensor(j, "emb/embeddings");
  EXPECT_EQ(emb["rule"], 1);
  EXPECT_EQ(emb["shard_shape"], json::parse("[2, 6]"));
  EXPECT_EQ(emb["uneven"], true);
  const json& bias = tensor(j, "dense_1/bias");
  EXPECT_TRUE(bias["rule"].is_null());
  EXPECT_TRUE(bias["layout"].is_null());
  EXPECT_EQ(bias["shard_shape"], json::parse("[8]"));
  EXPECT_EQ(bias["replicas"], 8);

  // Per device: kernel 128 + bias 32 + table 4096 everywhere, emb 24 on the first 5 devices.
  ASSERT_EQ(j["devices"].size(), 8u);
  uint64_t sum = 0;
  for (size_t d = 0; d < 8; ++d) {
    const json& dev = j["devices"][d];
    EXPECT_EQ(dev["device"], fmt::format("cpu:{}", d));
    EXPECT_EQ(dev["coords"], json::array({d / 4, d % 4}));
    EXPECT_EQ(dev["bytes"], 128 + 32 + 4096 + (d < 5 ? 24 : 0)) << d;
    sum += dev["bytes"].get<uint64_t>();
  }
  EXPECT_EQ(j["totals"]["device_bytes_sum"], sum);
  EXPECT_EQ(j["totals"]["device_bytes_max"], 128 + 32 + 4096 + 24);
  EXPECT_EQ(j["totals"]["tensors"], 4);
  EXPECT_EQ(j["totals"]["bytes"], 4760);
  EXPECT_EQ(j["totals"]["sharded"], 2);
  EXPECT_EQ(j["totals"]["replicated"], 2);
  EXPECT_EQ(j["totals"]["errors"], 0);

  const auto uneven = issues(j["warnings"], "uneven");
  ASSERT_EQ(uneven.size(), 1u);
  EXPECT_EQ(uneven[0]["tensor"], "emb/embeddings");
  EXPECT_EQ(uneven[0]["rule"], 1);
  EXPECT_THAT(uneven[0]["message"].get<std::string>(),
              AllOf(HasSubstr("dimension 0 (size 10)"), HasSubstr("total size 8")));
  const auto unused = issues(j["warnings"], "unused_rule");
  ASSERT_EQ(unused.size(), 1u);
  EXPECT_EQ(unused[0]["rule"], 2);
  EXPECT_FALSE(unused[0].contains("tensor"));
  EXPECT_EQ(j["errors"], json::array());
}

TEST_F(PlanCommandTest, LargeReplicatedWarning) {
  PlanCommandOptions o = options();
  EXPECT_TRUE(issues(run_json(o)["warnings"], "large_replicated").empty());  // 16 MiB default
  o.replicated_warn_bytes = parse_byte_count("4KiB", "--replicated-warn-bytes");
  const json j = run_json(o);
  const auto large = issues(j["warnings"], "large_replicated");
  ASSERT_EQ(large.size(), 1u);
  EXPECT_EQ(large[0]["tensor"], "head/table");
  EXPECT_THAT(large[0]["message"].get<std::string>(),
              HasSubstr("4.0 KiB, matches no rule: each of the 8 devices holds all of it"));
  EXPECT_EQ(j["replicated_warn_bytes"], 4096);
  o.json = false;
  run(o);
  EXPECT_THAT(out_, HasSubstr("large, replicated\n"));
}

TEST_F(PlanCommandTest, AmbiguousPathExitsWithTwo) {
  const std::string rules = dir_.write("ambiguous.json", R"({
    "mesh": {"shape": [2, 4], "axis_names": ["data", "model"]},
    "rules": [["dense.*kernel", [null, "model"]], ["_1/kernel", ["model", null]]]})");
  const json j = run_json({.path = checkpoint_, .rules_path = rules}, kPlanHasErrorsExitCode);
  EXPECT_EQ(kPlanHasErrorsExitCode, 2);
  const auto ambiguous = issues(j["errors"], "ambiguous");
  ASSERT_EQ(ambiguous.size(), 1u);
  EXPECT_EQ(ambiguous[0]["tensor"], "dense_1/kernel");
  EXPECT_THAT(
      ambiguous[0]["message"].get<std::string>(),
      AllOf(HasSubstr("'dense_1/kernel'"), HasSubstr("'dense.*kernel'"), HasSubstr("'_1/kernel'")));
  const json& t = tensor(j, "dense_1/kernel");
  EXPECT_TRUE(t["rule"].is_null());
  EXPECT_FALSE(t.contains("shard_shape"));
  EXPECT_EQ(t["error"], ambiguous[0]["message"]);
  EXPECT_EQ(j["totals"]["errors"], 1);

  // The text form is still printed in full, errors last.
  EXPECT_EQ(run({.path = checkpoint_, .rules_path = rules}), kPlanHasErrorsExitCode);
  EXPECT_THAT(out_, HasSubstr("\nerrors (1):\n  ambiguous: Path 'dense_1/kernel' matches"));
  EXPECT_THAT(out_, HasSubstr("plan has errors: 1 error"));

  // In first mode the first rule wins.
  EXPECT_EQ(run({.path = checkpoint_, .rules_path = rules, .mode = "first"}), 0);
}

TEST_F(PlanCommandTest, RankMismatchIsAnError) {
  const std::string rules = dir_.write("rank.json", R"({
    "mesh": {"shape": [2, 4], "axis_names": ["data", "model"]},
    "rules": [["bias", [null, "model"]]]})");
  const json j = run_json({.path = checkpoint_, .rules_path = rules}, kPlanHasErrorsExitCode);
  const auto mismatch = issues(j["errors"], "rank_mismatch");
  ASSERT_EQ(mismatch.size(), 1u);
  EXPECT_EQ(mismatch[0]["tensor"], "dense_1/bias");
  EXPECT_EQ(mismatch[0]["rule"], 0);
  EXPECT_THAT(mismatch[0]["message"].get<std::string>(), HasSubstr("'dense_1/bias'"));
  EXPECT_EQ(tensor(j, "dense_1/bias")["rule"], 0);
  EXPECT_FALSE(tensor(j, "dense_1/bias").contains("shard_shape"));
}

TEST_F(PlanCommandTest, StrictMakesUnevenSplitsErrors) {
  PlanCommandOptions o = options();
  o.strict = true;
  const json j = run_json(o, kPlanHasErrorsExitCode);
  EXPECT_EQ(j["strict"], true);
  const auto uneven = issues(j["errors"], "uneven");
  ASSERT_EQ(uneven.size(), 1u);
  EXPECT_EQ(uneven[0]["tensor"], "emb/embeddings");
  EXPECT_TRUE(issues(j["warnings"], "uneven").empty());
}

TEST_F(PlanCommandTest, MeshAndModeOverrides) {
  PlanCommandOptions o = options();
  o.mesh = "data=1,model=2";
  const json j = run_json(o);
  EXPECT_EQ(j["mesh"]["text"], "mesh[data=1,model=2]");
  ASSERT_EQ(j["devices"].size(), 2u);
  EXPECT_EQ(tensor(j, "dense_1/kernel")["shard_shape"], json::parse("[16, 4]"));
  EXPECT_EQ(tensor(j, "emb/embeddings")["shard_shape"], json::parse("[5, 6]"));
  EXPECT_TRUE(issues(j["warnings"], "uneven").empty());

  // A mesh without the rules' axes is refused, naming the rule.
  o.mesh = "x=2";
  EXPECT_THROW(
      {
        try {
          run(o);
        } catch (const ValueError& e) {
          EXPECT_THAT(e.what(), HasSubstr("'dense.*kernel'"));
          throw;
        }
      },
      ValueError);

  o.mesh.reset();
  o.mode = "regex";
  EXPECT_THROW(run(o), ValueError);
}

TEST_F(PlanCommandTest, NoMeshAnywhereIsAnError) {
  const std::string rules = dir_.write("no_mesh.json", R"({"rules": [["kernel", [null, "m"]]]})");
  PlanCommandOptions o{.path = checkpoint_, .rules_path = rules};
  try {
    run(o);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("no_mesh.json"), HasSubstr("--mesh")));
  }
  o.mesh = "m=4";
  EXPECT_EQ(run(o), 0);
}

TEST_F(PlanCommandTest, MultiFileIndex) {
  const std::string index = dir_.write_index(
      {{"model-00001-of-00002.safetensors", {{"layer_0/dense/kernel", DType::kF32, {4, 8}}}},
       {"model-00002-of-00002.safetensors", {{"layer_1/dense/kernel", DType::kF32, {4, 8}}}}});
  const json j = run_json({.path = index, .rules_path = rules_});
  EXPECT_EQ(j["files"], 2);
  EXPECT_EQ(tensor(j, "layer_0/dense/kernel")["file"],
            dir_.path("model-00001-of-00002.safetensors"));
  EXPECT_EQ(tensor(j, "layer_1/dense/kernel")["file"],
            dir_.path("model-00002-of-00002.safetensors"));
  EXPECT_EQ(j["totals"]["device_bytes_sum"], 2 * 2 * 4 * 8 * 4);  // 2 tensors, 2 copies each
  run({.path = index, .rules_path = rules_});
  EXPECT_THAT(out_, HasSubstr("2 tensors in 2 files"));
}

TEST_F(PlanCommandTest, UnreadableInputsNameTheFile) {
  const std::string bad = dir_.write("bad.safetensors", std::string("\xff\xff\xff\xff", 4));
  try {
    run({.path = bad, .rules_path = rules_});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(bad));
  }
  EXPECT_THROW(run({.path = checkpoint_, .rules_path = dir_.path("missing.json")}), NotFoundError);
}

TEST(ParseByteCountTest, UnitsAndErrors) {
  EXPECT_EQ(parse_byte_count("0", "x"), 0u);
  EXPECT_EQ(parse_byte_count("1048576", "x"), 1048576u);
  EXPECT_EQ(parse_byte_count("512B", "x"), 512u);
  EXPECT_EQ(parse_byte_count("64KiB", "x"), 65536u);
  EXPECT_EQ(parse_byte_count("16MiB", "x"), uint64_t{16} << 20);
  EXPECT_EQ(parse_byte_count(" 2 G ", "x"), uint64_t{2} << 30);
  EXPECT_EQ(parse_byte_count("1TB", "x"), uint64_t{1} << 40);
  for (const char* bad : {"", "MiB", "-1", "1.5MiB", "12XB", "1 KiBs", "99999999999TiB"}) {
    EXPECT_THROW(parse_byte_count(bad, "--replicated-warn-bytes"), ValueError) << bad;
  }
}

// Issue 24: a Hugging Face Llama directory is planned by the Keras paths generate and train
// match rules against; by its file names, train's rules file matched nothing.
TEST_F(PlanCommandTest, LlamaDirectoryIsPlannedByKerasPaths) {
  const std::string llama = dir_.path("llama");
  meshlayout::testing::write_tiny_llama(llama);
  const std::string rules =
      std::string(MESHLAYOUT_SOURCE_DIR) + "/examples/rules/llama_megatron.json";
  PlanCommandOptions o{.path = llama,
                       .rules_path = rules,
                       .mesh = "batch=2,model=4",
                       .json = true,
                       .optimizer = "adamw"};
  EXPECT_EQ(run(o), 0);
  json j = json::parse(out_);
  size_t sharded = j["totals"]["sharded"];
  EXPECT_GT(sharded, 0u);
  EXPECT_EQ(j["tensors"][1]["path"], "transformer_layer_0/self_attention_layernorm/scale");
  EXPECT_EQ(j["tensors"][2]["path"], "transformer_layer_0/self_attention/query/kernel");
  EXPECT_EQ(j["tensors"][2]["layout"], json::parse(R"([null, "model", null])"));
  EXPECT_EQ(j["tensors"][2]["dtype"], "F32");
  // The model's own check: its 2 key/value heads cannot follow the 4 query heads over 4 devices.
  o.json = false;
  EXPECT_EQ(run(o), 0);
  EXPECT_THAT(out_, HasSubstr("model_split: the 2 key/value heads do not split like the 4 query "
                              "heads over 'model' (4)"));
  EXPECT_THAT(out_, HasSubstr("(and the same in 1 more layers)"));
  o.json = true;
  // As written in the file, the same rules match nothing.
  o.names = "file";
  EXPECT_EQ(run(o), 0);
  j = json::parse(out_);
  EXPECT_EQ(j["totals"]["sharded"], 0);
  EXPECT_THAT(out_, HasSubstr("model.layers.0.self_attn.q_proj.weight"));
  o.names = "keras";
  o.path = checkpoint_;
  EXPECT_THAT(ValueErrorMessage([&] { run(o); }),
              HasSubstr("--names keras plans a Hugging Face Llama directory"));
  o.names = "hf";
  EXPECT_THAT(ValueErrorMessage([&] { run(o); }),
              HasSubstr("--names 'hf' is not one of auto, keras, file"));
}

}  // namespace
}  // namespace meshlayout::cli
