// Tests of rules suggest: on every family of LlamaConfig and meshes of 1 to 4 axes (awkward
// 3- and 6-way model axes among them), every tensor above the threshold is split, the model
// builds under the rules with each variable in its suggested layout, and its logits equal
// the replicated model's; the reasons name what was chosen and why; bad input is named.
#include "meshlayout/rules/rule_suggest.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <tuple>

#include "meshlayout/array/array.h"
#include "meshlayout/array/host_tensor.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/models/llama_families_test_util.h"
#include "meshlayout/models/random_llama.h"
#include "meshlayout/models/random_moe_hf.h"
#include "meshlayout/nn/layer.h"
#include "meshlayout/rules/rule_check.h"
#include "meshlayout/rules/rules_test_util.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kMinBytes = 64;  // every kernel, embedding, norm scale and bias of the tests

const char* const kMeshes[] = {
    "model=8",        "batch=2,model=4",       "batch=2,model=3",
    "data=1,model=6", "data=2,fsdp=2,model=2", "pipe=1,data=2,fsdp=2,model=2"};

// Every family: the dense ones of the family tests and the mixtures of experts (Mixtral: 4
// experts in every layer; Qwen 3 MoE; Qwen 2 MoE with its shared expert).
std::vector<testing::Family> all_families() {
  std::vector<testing::Family> out = testing::families();
  for (const char* moe : {"mixtral", "qwen3_moe", "qwen2_moe"}) {
    out.push_back({moe, LlamaConfig::from_json(small_hf_moe_spec(moe).to_json())});
  }
  return out;
}

int64_t ways(const TensorLayout& layout) {
  int64_t n = 1;
  for (const DimSharding& d : layout.axes()) {
    for (const std::string& a : d.axes()) n *= layout.device_mesh()->axis_size(a);
  }
  return n;
}

// (strategy, mesh): one test each, so that each stays short.
class RuleSuggestTest : public ::testing::TestWithParam<std::tuple<SuggestStrategy, const char*>> {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
};

// The must-hold of issue 28: no tensor above the threshold replicated, on every family and
// mesh; the model builds under the rules (each variable where the rules put it).
TEST_P(RuleSuggestTest, EveryFamilySplitsEveryLargeTensor) {
  const auto [strategy, spec] = GetParam();
  const DeviceMesh mesh = DeviceMesh::from_string(spec);
  for (const testing::Family& f : all_families()) {
    SCOPED_TRACE(f.what);
    const ModelTensors model{.config = f.config, .tensors = model_tensors(f.config)};
    if (strategy == SuggestStrategy::kMegatronFsdp && mesh.rank() == 1) {
      EXPECT_THROW(suggest_rules(model, mesh, {.strategy = strategy}), ValueError);
      continue;  // no data axis besides the model axis
    }
    const Suggestion s = suggest_rules(model, mesh, {.strategy = strategy, .min_bytes = kMinBytes});
    EXPECT_EQ(check_rules(s.rules, model.tensors, {.min_bytes = kMinBytes}),
              std::vector<std::string>{});
    // The written file reads back to the same rules, reasons included.
    const std::string text = write_rules(s.rules, RulesDialect::kMeshlayout, {});
    const RulesFile file = parse_rules_json(text, "suggested.json");
    ASSERT_EQ(file.rules.size(), s.rules.rules.size());
    const RuleSet again = read_rules(text, RulesDialect::kMeshlayout, {}, "suggested.json");
    ASSERT_EQ(again.rules.size(), s.rules.rules.size());
    EXPECT_EQ(again.rules.back().reason, s.rules.rules.back().reason);
    EXPECT_EQ(write_rules(again, RulesDialect::kMeshlayout, {}), text);
    for (size_t i = 0; i < file.rules.size(); ++i) {
      EXPECT_EQ(file.reasons[i], s.rules.rules[i].reason);
      EXPECT_FALSE(file.reasons[i].empty());
    }
    clear_session();
    LlamaModel built(f.config, file.to_layout_map());
    int64_t large = 0;
    for (const auto& [path, array] : built.variables_by_path()) {
      const int64_t bytes = num_elements(array->shape()) * 4;
      if (bytes <= kMinBytes) continue;
      ++large;
      EXPECT_GT(ways(array->layout()), 1) << path << " " << array->layout().to_string();
    }
    EXPECT_GT(large, 10);
  }
}

INSTANTIATE_TEST_SUITE_P(StrategiesAndMeshes, RuleSuggestTest,
                         ::testing::Combine(::testing::Values(SuggestStrategy::kMegatron,
                                                              SuggestStrategy::kFsdp,
                                                              SuggestStrategy::kMegatronFsdp),
                                            ::testing::ValuesIn(kMeshes)),
                         [](const auto& info) {
                           std::string n =
                               fmt::format("{}_{}", suggest_strategy_name(std::get<0>(info.param)),
                                           std::get<1>(info.param));
                           for (char& c : n)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

class RuleSuggest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
  static const ConvertedRule& rule(const Suggestion& s, const std::string& glob) {
    for (const ConvertedRule& r : s.rules.rules) {
      if (r.pattern == glob_to_regex(glob)) return r;
    }
    std::string patterns;
    for (const ConvertedRule& r : s.rules.rules) patterns += " " + r.pattern;
    throw ValueError("no rule for " + glob + "; rules:" + patterns);
  }
};

// Suggested rules compute what the replicated model computes, on awkward meshes too.
TEST_F(RuleSuggest, LogitsEqualTheReplicatedModel) {
  const std::vector<int32_t> tokens = {3, 17, 42, 5, 9, 1, 0, 63};
  std::vector<testing::Family> families = all_families();
  // 8 heads on 3 devices: uneven head blocks (3, 3, 2), within 25% of even; its 4 key/value
  // heads (2, 2, 0) are not, so their kernels split the hidden size.
  LlamaConfig uneven = testing::family_base("llama");
  uneven.num_attention_heads = 8;
  uneven.num_key_value_heads = 4;
  uneven.head_dim = 4;
  families.push_back({"Llama, 8 heads on 3 devices", uneven});
  for (const testing::Family& f : families) {
    SCOPED_TRACE(f.what);
    const ModelTensors model{.config = f.config, .tensors = model_tensors(f.config)};
    for (auto [spec, strategy] : {std::pair{"batch=2,model=3", SuggestStrategy::kMegatronFsdp},
                                  std::pair{"data=1,model=6", SuggestStrategy::kMegatron}}) {
      SCOPED_TRACE(spec);
      const DeviceMesh mesh = DeviceMesh::from_string(spec);
      HostTensor t(DType::kI32, {2, 4});
      std::copy(tokens.begin(), tokens.end(), t.data_as<int32_t>());
      clear_session();
      LlamaModel whole(f.config, LayoutMap(mesh));
      const HostTensor want =
          whole.logits(distribute_tensor(t, TensorLayout({None, None}, mesh))).gather();
      clear_session();
      const Suggestion s = suggest_rules(model, mesh, {.strategy = strategy, .min_bytes = 64});
      if (f.config.num_attention_heads == 8 && mesh.axis_size("model") == 3) {
        EXPECT_EQ(rule(s, "transformer_layer_*/self_attention/query/kernel").layout,
                  (std::vector<DimSharding>{"batch", "model", None}));
        EXPECT_EQ(rule(s, "transformer_layer_*/self_attention/key/kernel").layout,
                  (std::vector<DimSharding>{"model", "batch", None}));
      }
      LlamaModel split(f.config, s.rules.to_layout_map());
      const HostTensor got =
          split.logits(distribute_tensor(t, TensorLayout({None, None}, mesh))).gather();
      std::vector<double> w(want.data_as<float>(), want.data_as<float>() + want.num_elements());
      EXPECT_LT(testing::max_relative_error(got, w), 1e-5);
    }
  }
}

// Megatron keeps divisibility where it matters and says why.
TEST_F(RuleSuggest, ReasonsNameTheChoice) {
  const LlamaConfig c = testing::family_base("llama");  // 4 heads, 2 KV heads, d 32, ff 48
  const ModelTensors model{.config = c, .tensors = model_tensors(c)};
  const Suggestion s =
      suggest_rules(model, DeviceMesh::from_string("batch=2,model=4"), {.min_bytes = 1000});
  const ConvertedRule& q = rule(s, "transformer_layer_*/self_attention/query/kernel");
  EXPECT_EQ(q.layout, (std::vector<DimSharding>{None, "model", None}));
  EXPECT_THAT(q.reason, HasSubstr("megatron: the 4 query heads over 'model' (4): column-parallel"));
  // 2 KV heads on 4 devices: the hidden size instead (row-parallel input), as keras-hub's Qwen.
  const ConvertedRule& k = rule(s, "transformer_layer_*/self_attention/key/kernel");
  EXPECT_EQ(k.layout, (std::vector<DimSharding>{"model", None, None}));
  EXPECT_THAT(k.reason, HasSubstr("the hidden size (32) over 'model' (4): row-parallel"));
  EXPECT_THAT(k.reason, HasSubstr("not the 2 key/value heads: does not divide by 4"));
  EXPECT_EQ(rule(s, "transformer_layer_*/self_attention/attention_output/kernel").layout,
            (std::vector<DimSharding>{"model", None, None}));
  EXPECT_EQ(rule(s, "transformer_layer_*/feedforward_output_dense/kernel").layout,
            (std::vector<DimSharding>{"model", None}));
  EXPECT_THAT(rule(s, "transformer_layer_*/feedforward_gate_dense/kernel").reason,
              HasSubstr("the feed-forward width (48) over 'model' (4): column-parallel"));
  const ConvertedRule& emb = rule(s, "token_embedding/embeddings");
  EXPECT_EQ(emb.layout, (std::vector<DimSharding>{"model", None}));
  EXPECT_THAT(emb.reason, HasSubstr("vocab-parallel embedding"));
  EXPECT_THAT(rule(s, "token_embedding/reverse_embeddings").reason,
              HasSubstr("column-parallel over the vocabulary"));
  // Norm scales (128 bytes) are under 1000 bytes: no rule, and a note says so; the batch axis
  // holds replicas.
  EXPECT_THAT(::testing::PrintToString(s.notes), HasSubstr("stay replicated (no rule)"));
  EXPECT_THAT(::testing::PrintToString(s.notes),
              HasSubstr("mesh axis 'batch' (2) splits no tensor: it holds replicas"));
  // A 3-way axis: 4 heads do not divide; the most even split of d instead, said so.
  const Suggestion three =
      suggest_rules(model, DeviceMesh::from_string("model=3"), {.min_bytes = 1000});
  const ConvertedRule& q3 = rule(three, "transformer_layer_*/self_attention/query/kernel");
  EXPECT_EQ(q3.layout, (std::vector<DimSharding>{"model", None, None}));
  EXPECT_THAT(q3.reason, HasSubstr("uneven blocks of 11, 11, 10"));
  EXPECT_EQ(rule(three, "transformer_layer_*/feedforward_gate_dense/kernel").layout,
            (std::vector<DimSharding>{None, "model"}));  // 48 = 3 x 16
  // megatron+fsdp: the model axis on the megatron dimension, the data axes on the largest
  // other one; the model's own notes on uneven splits are passed on.
  const Suggestion both =
      suggest_rules(model, DeviceMesh::from_string("data=2,fsdp=2,model=2"),
                    {.strategy = SuggestStrategy::kMegatronFsdp, .min_bytes = 1000});
  const ConvertedRule& q2 = rule(both, "transformer_layer_*/self_attention/query/kernel");
  EXPECT_EQ(q2.layout, (std::vector<DimSharding>{DimSharding({"data", "fsdp"}), "model", None}));
  EXPECT_THAT(q2.reason, HasSubstr("fsdp: the hidden size (32), the largest dimension left that "
                                   "is divisible by 4, over 'data' x 'fsdp' (4)"));
  EXPECT_THAT(::testing::PrintToString(three.notes), HasSubstr("the model: "));
}

TEST_F(RuleSuggest, BadInputIsNamed) {
  const LlamaConfig c = testing::family_base("qwen2");
  const ModelTensors model{.config = c, .tensors = model_tensors(c)};
  using rules_test::error_of;
  EXPECT_THAT(error_of([] { parse_suggest_strategy("zero3"); }),
              HasSubstr("unknown strategy 'zero3'; expected megatron, fsdp or megatron+fsdp"));
  EXPECT_THAT(error_of([&] { suggest_rules(model, DeviceMesh::from_string("data=8")); }),
              HasSubstr("mesh mesh[data=8] has no axis 'model', the tensor-parallel axis "
                        "--strategy megatron splits over"));
  EXPECT_THAT(error_of([&] {
                suggest_rules(model, DeviceMesh::from_string("model=8"),
                              {.strategy = SuggestStrategy::kMegatronFsdp});
              }),
              HasSubstr("--strategy megatron+fsdp needs a data axis besides 'model'"));
  EXPECT_THAT(error_of([&] {
                suggest_rules(model, DeviceMesh::from_string("batch=2,model=4"),
                              {.strategy = SuggestStrategy::kFsdp, .data_axes = {"data"}});
              }),
              HasSubstr("data axis 'data' is not an axis of mesh"));
  EXPECT_THAT(
      error_of([&] { suggest_rules(model, DeviceMesh::from_string("batch=8,model=1")); }),
      HasSubstr("--strategy megatron on mesh mesh[batch=8,model=1] has no axis of size > 1"));
  EXPECT_THAT(error_of([&] {
                suggest_rules(model, DeviceMesh::from_string("model=8"), {.min_bytes = -1});
              }),
              HasSubstr("--min-bytes -1 must be >= 0"));
  // Under the threshold, nothing needs a rule; with the default 1 MiB this model has none.
  EXPECT_TRUE(suggest_rules(model, DeviceMesh::from_string("model=8")).rules.rules.empty());
  const Suggestion all = suggest_rules(model, DeviceMesh::from_string("model=8"), {.min_bytes = 0});
  EXPECT_EQ(check_rules(all.rules, model.tensors, {.min_bytes = 0}), std::vector<std::string>{});
}

// A weights-only model (safetensors, no config.json): rules on the file's names, one per
// tensor of every layer, without knowing what the dimensions are; still every large tensor split.
TEST_F(RuleSuggest, WeightsOnlyModelsAreSplitByTheirShapes) {
  const std::string dir = ::testing::TempDir() + "suggest_weights_" + std::to_string(getpid());
  write_random_hf_llama(dir, testing::family_base("llama"));
  std::filesystem::remove(dir + "/config.json");
  const ModelTensors model = load_model_tensors(dir);
  for (SuggestStrategy strategy : {SuggestStrategy::kMegatron, SuggestStrategy::kFsdp}) {
    const Suggestion s = suggest_rules(model, DeviceMesh::from_string("batch=2,model=3"),
                                       {.strategy = strategy, .min_bytes = 64});
    EXPECT_EQ(check_rules(s.rules, model.tensors, {.min_bytes = 64}), std::vector<std::string>{});
    const ConvertedRule& q = rule(s, "model.layers.*.self_attn.q_proj.weight");
    EXPECT_THAT(q.reason, HasSubstr("dimension 0 (32)"));
  }
  std::filesystem::remove_all(dir);
}

// A mixture of experts: its stacked (E, d, F) expert kernels split on the experts when the
// axis divides them (expert parallelism), else on the feed-forward width.
TEST_F(RuleSuggest, ExpertsSplitWhenTheAxisDividesThem) {
  const LlamaConfig c = LlamaConfig::from_json(small_hf_moe_spec("mixtral").to_json());
  const ModelTensors model{.config = c, .tensors = model_tensors(c)};
  const std::string glob =
      "transformer_layer_*/mixtral_sparse_moe_block/experts/"
      "expert_feedforward_gate_dense";
  for (const ModelTensor& t : model.tensors) {
    if (layer_glob(t.path) == glob) {
      EXPECT_EQ(t.dims[0], "num_experts");
      EXPECT_EQ(t.shape[0], c.num_experts);
    }
  }
  const Suggestion s = suggest_rules(
      model, DeviceMesh::from_string(fmt::format("model={}", c.num_experts)), {.min_bytes = 64});
  EXPECT_EQ(rule(s, glob).layout, (std::vector<DimSharding>{"model", None, None}));
  EXPECT_THAT(rule(s, glob).reason, HasSubstr("expert-parallel"));
  const Suggestion three =
      suggest_rules(model, DeviceMesh::from_string("model=3"), {.min_bytes = 64});
  EXPECT_THAT(rule(three, glob).reason,
              HasSubstr("not the " + std::to_string(c.num_experts) + " experts"));
}

}  // namespace
}  // namespace meshlayout
