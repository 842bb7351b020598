#include "meshlayout/plan/checkpoint_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <numeric>

#include "meshlayout/core/errors.h"
#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/plan/checkpoint_test_util.h"
#include "meshlayout/plan/plan_render.h"
#include "meshlayout/plan/text_format.h"

namespace meshlayout {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using Kind = PlanIssue::Kind;
using Severity = PlanIssue::Severity;

class CheckpointPlanTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }

  // Plans the tensors `specs` describe under `map`.
  CheckpointPlan plan(std::vector<TensorSpec> specs, const LayoutMap& map,
                      const PlanOptions& options = {}) {
    header_ = make_safetensors_header(specs);
    infos_.clear();
    for (const TensorInfo& t : header_.tensors) infos_.push_back(&t);
    return plan_tensors(infos_, map, options);
  }

  static const PlannedTensor& tensor(const CheckpointPlan& plan, std::string_view name) {
    for (const PlannedTensor& t : plan.tensors) {
      if (t.info->name == name) return t;
    }
    throw NotFoundError(std::string(name));
  }
  static std::vector<const PlanIssue*> issues(const CheckpointPlan& plan, Kind kind) {
    std::vector<const PlanIssue*> out;
    for (const PlanIssue& i : plan.issues) {
      if (i.kind == kind) out.push_back(&i);
    }
    return out;
  }

  DeviceMesh mesh_{{2, 4}, {"data", "model"}};
  SafetensorsHeader header_;
  std::vector<const TensorInfo*> infos_;
};

TEST_F(CheckpointPlanTest, ShardShapesBytesAndPerDeviceTotals) {
  LayoutMap map(mesh_);
  map["dense.*kernel"] = {None, "model"};
  map["emb"] = {{"data", "model"}, None};
  const CheckpointPlan p = plan({{"dense/kernel", DType::kF32, {8, 16}},
                                 {"emb/embeddings", DType::kBF16, {6, 4}},
                                 {"norm/scale", DType::kF32, {4}}},
                                map);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.tensors.size(), 3u);
  EXPECT_EQ(p.total_bytes, 8 * 16 * 4 + 6 * 4 * 2 + 4 * 4);

  const Placement& kernel = p.placements[*tensor(p, "dense/kernel").placement];
  EXPECT_EQ(kernel.rule, 0u);
  EXPECT_EQ(kernel.shard_shape, (Shape{8, 4}));
  EXPECT_EQ(kernel.shard_bytes, 8 * 4 * 4u);
  EXPECT_EQ(kernel.num_replicas, 2);
  EXPECT_TRUE(kernel.uneven.empty());

  const Placement& emb = p.placements[*tensor(p, "emb/embeddings").placement];
  EXPECT_EQ(emb.rule, 1u);
  EXPECT_EQ(emb.shard_shape, (Shape{1, 4}));  // 6 rows over 8 devices: blocks of 1
  EXPECT_EQ(emb.shard_bytes, 8u);
  ASSERT_EQ(emb.uneven.size(), 1u);

  const Placement& norm = p.placements[*tensor(p, "norm/scale").placement];
  EXPECT_FALSE(norm.rule);
  EXPECT_EQ(norm.shard_shape, (Shape{4}));
  EXPECT_EQ(norm.num_replicas, 8);

  // Per device: kernel 128 B each, norm 16 B each, emb 8 B on the first 6 devices only.
  ASSERT_EQ(p.device_bytes.size(), 8u);
  for (size_t d = 0; d < 8; ++d) {
    EXPECT_EQ(p.device_bytes[d], 128u + 16u + (d < 6 ? 8u : 0u)) << "device " << d;
  }
  EXPECT_EQ(std::accumulate(p.device_bytes.begin(), p.device_bytes.end(), uint64_t{0}),
            2 * 512u + 8 * 16u + 48u);  // each copy of each tensor once
  EXPECT_EQ(p.num_sharded, 2u);
  EXPECT_EQ(p.num_replicated, 1u);
  EXPECT_EQ(p.rules[0].tensors, 1u);
  EXPECT_EQ(p.rules[1].tensors, 1u);
  EXPECT_EQ(p.rules[0].layout_text, "layout[None,model]");
  EXPECT_EQ(p.rules[1].layout_json, R"([["data","model"],null])");
}

TEST_F(CheckpointPlanTest, ZeroByteTensorWithAHugeExtentHasNoNegativeShard) {
  // Legal in a header (0 elements, 0 bytes); (n + k - 1) / k overflowed into a negative shard.
  LayoutMap map(mesh_);
  map["t"] = {None, "model"};
  const CheckpointPlan p = plan({{"t", DType::kF32, {0, INT64_MAX}}}, map);
  ASSERT_TRUE(p.ok());
  const Placement& t = p.placements[*tensor(p, "t").placement];
  EXPECT_EQ(t.shard_shape, (Shape{0, (INT64_MAX / 4) + 1}));
  EXPECT_EQ(t.shard_bytes, 0u);
  for (uint64_t bytes : p.device_bytes) EXPECT_EQ(bytes, 0u);
}

TEST_F(CheckpointPlanTest, TensorsOfOneShapeAndRuleShareAPlacement) {
  LayoutMap map(mesh_);
  map["kernel"] = {None, "model"};
  std::vector<TensorSpec> specs;
  for (int i = 0; i < 100; ++i) {
    specs.push_back({fmt::format("layers_{}/kernel", i), DType::kBF16, {16, 16}});
    specs.push_back({fmt::format("layers_{}/scale", i), DType::kF32, {16}});
  }
  const CheckpointPlan p = plan(specs, map);
  EXPECT_EQ(p.placements.size(), 2u);
  EXPECT_EQ(p.rules[0].tensors, 100u);
  for (uint64_t b : p.device_bytes) EXPECT_EQ(b, 100u * (16 * 4 * 2) + 100u * 64);
}

TEST_F(CheckpointPlanTest, UnevenSplitWarningNamesDimensionAndAxisSize) {
  LayoutMap map(mesh_);
  map["w"] = {None, "model"};
  const CheckpointPlan p = plan({{"w", DType::kF32, {4, 7}}}, map);
  EXPECT_TRUE(p.ok());
  EXPECT_EQ(p.num_warnings, 1u);
  const auto uneven = issues(p, Kind::kUneven);
  ASSERT_EQ(uneven.size(), 1u);
  EXPECT_EQ(uneven[0]->severity, Severity::kWarning);
  EXPECT_EQ(uneven[0]->rule, 0u);
  EXPECT_EQ(uneven[0]->message,
            "tensor 'w' (F32 (4, 7)) under layout[None,model]: dimension 1 (size 7) is split "
            "over axis 'model' of total size 4: 3 blocks of 2, 1 of 1");
  // Uneven tensors are counted device by device: 2 + 2 + 2 + 1 columns of 4 rows.
  EXPECT_THAT(p.device_bytes, ElementsAre(32, 32, 32, 16, 32, 32, 32, 16));
}

TEST_F(CheckpointPlanTest, StrictMakesAnUnevenSplitAnError) {
  LayoutMap map(mesh_);
  map["w"] = {None, "model"};
  map["ok"] = {"model"};
  const CheckpointPlan p =
      plan({{"w", DType::kF32, {4, 7}}, {"ok", DType::kF32, {8}}}, map, {.strict = true});
  EXPECT_FALSE(p.ok());
  EXPECT_EQ(p.num_errors, 1u);
  const auto uneven = issues(p, Kind::kUneven);
  ASSERT_EQ(uneven.size(), 1u);
  EXPECT_EQ(uneven[0]->severity, Severity::kError);
  EXPECT_THAT(uneven[0]->message, AllOf(HasSubstr("'w'"), HasSubstr("7")));
  EXPECT_FALSE(tensor(p, "w").ok());
  // Left out of the totals: only "ok" (2 elements of 4 bytes per device) remains.
  for (uint64_t b : p.device_bytes) EXPECT_EQ(b, 8u);
}

TEST_F(CheckpointPlanTest, LargeReplicatedTensorWarning) {
  LayoutMap map(mesh_);
  map["kernel"] = {None, "model"};
  const std::vector<TensorSpec> specs = {{"big/table", DType::kF32, {16, 16}},    // 1 KiB
                                         {"small/scale", DType::kF32, {16}},      // 64 B
                                         {"big/kernel", DType::kF32, {16, 16}}};  // has a rule
  const CheckpointPlan p = plan(specs, map, {.replicated_warn_bytes = 1024});
  const auto large = issues(p, Kind::kLargeReplicated);
  ASSERT_EQ(large.size(), 1u);
  EXPECT_EQ(large[0]->severity, Severity::kWarning);
  EXPECT_EQ(p.tensors[*large[0]->tensor].info->name, "big/table");
  EXPECT_EQ(large[0]->message,
            "tensor 'big/table' (F32 (16, 16)), 1.0 KiB, matches no rule: each of the 8 "
            "devices holds all of it (warning from 1.0 KiB)");
  EXPECT_TRUE(tensor(p, "big/table").large_replicated);
  EXPECT_FALSE(tensor(p, "small/scale").large_replicated);

  EXPECT_TRUE(
      issues(plan(specs, map, {.replicated_warn_bytes = 0}), Kind::kLargeReplicated).empty());
  LayoutMap one_device(DeviceMesh({1}, {"x"}, std::vector<std::string>{"cpu:0"}));
  EXPECT_TRUE(issues(plan(specs, one_device, {.replicated_warn_bytes = 1}), Kind::kLargeReplicated)
                  .empty());
}

TEST_F(CheckpointPlanTest, UnusedRuleWarning) {
  LayoutMap map(mesh_);
  map["kernel"] = {None, "model"};
  map["dense_typo.*bias"] = {"model"};
  const CheckpointPlan p = plan({{"dense/kernel", DType::kF32, {4, 4}}}, map);
  const auto unused = issues(p, Kind::kUnusedRule);
  ASSERT_EQ(unused.size(), 1u);
  EXPECT_EQ(unused[0]->rule, 1u);
  EXPECT_FALSE(unused[0]->tensor);
  EXPECT_EQ(unused[0]->message,
            "rule #1 ('dense_typo.*bias' -> layout[model]) matches none of the 1 tensors");
}

TEST_F(CheckpointPlanTest, AmbiguousPathIsAnErrorInSearchModeOnly) {
  LayoutMap map(mesh_);
  map["dense.*"] = {None, "model"};
  map["kernel"] = {"model", None};
  const std::vector<TensorSpec> specs = {{"dense/kernel", DType::kF32, {8, 8}},
                                         {"dense/bias", DType::kF32, {8, 8}}};
  const CheckpointPlan p = plan(specs, map);
  EXPECT_FALSE(p.ok());
  const auto ambiguous = issues(p, Kind::kAmbiguous);
  ASSERT_EQ(ambiguous.size(), 1u);
  EXPECT_EQ(ambiguous[0]->severity, Severity::kError);
  EXPECT_THAT(ambiguous[0]->message,
              AllOf(HasSubstr("'dense/kernel'"), HasSubstr("'dense.*'"), HasSubstr("'kernel'")));
  const PlannedTensor& t = tensor(p, "dense/kernel");
  EXPECT_FALSE(t.ok());
  EXPECT_FALSE(t.placement);
  // Only dense/bias counts: 8 x 2 f32 per device.
  for (uint64_t b : p.device_bytes) EXPECT_EQ(b, 64u);
  EXPECT_TRUE(issues(p, Kind::kUnusedRule).empty());  // both rules hit something

  LayoutMap first(mesh_, MatchMode::kFirst);
  first["dense.*"] = {None, "model"};
  first["kernel"] = {"model", None};
  const CheckpointPlan q = plan(specs, first);
  EXPECT_TRUE(q.ok());
  EXPECT_EQ(q.placements[*tensor(q, "dense/kernel").placement].rule, 0u);
}

TEST_F(CheckpointPlanTest, RankMismatchIsAnError) {
  LayoutMap map(mesh_);
  map["bias"] = {None, "model"};
  const CheckpointPlan p = plan({{"dense/bias", DType::kF32, {8}}}, map);
  EXPECT_FALSE(p.ok());
  const auto mismatch = issues(p, Kind::kRankMismatch);
  ASSERT_EQ(mismatch.size(), 1u);
  EXPECT_EQ(mismatch[0]->rule, 0u);
  EXPECT_THAT(mismatch[0]->message, AllOf(HasSubstr("'dense/bias'"), HasSubstr("rule #0 'bias'")));
  EXPECT_FALSE(p.placements[*tensor(p, "dense/bias").placement].fits);
  for (uint64_t b : p.device_bytes) EXPECT_EQ(b, 0u);
}

TEST_F(CheckpointPlanTest, MapWithoutMeshIsRefused) {
  LayoutMap map;
  map["kernel"] = {None, "model"};
  EXPECT_THROW(plan({{"kernel", DType::kF32, {4, 4}}}, map), ValueError);
}

TEST_F(CheckpointPlanTest, PlanCheckpointNamesEachTensorsFile) {
  testing::ScratchDir dir;
  const std::string index = dir.write_index(
      {{"part-1.safetensors", {{"a/kernel", DType::kF32, {4, 8}}}},
       {"part-2.safetensors", {{"b/kernel", DType::kF32, {4, 8}}, {"b/bias", DType::kF32, {8}}}}});
  const Checkpoint ckpt = Checkpoint::open(index);
  LayoutMap map(mesh_);
  map["kernel"] = {None, "model"};
  const CheckpointPlan p = plan_checkpoint(ckpt, map, {}, index);
  EXPECT_EQ(p.source, index);
  EXPECT_EQ(p.num_files, 2u);
  ASSERT_EQ(p.tensors.size(), 3u);
  EXPECT_EQ(*tensor(p, "a/kernel").file, dir.path("part-1.safetensors"));
  EXPECT_EQ(*tensor(p, "b/bias").file, dir.path("part-2.safetensors"));
}

TEST_F(CheckpointPlanTest, RenderedTextAndJsonAgree) {
  LayoutMap map(mesh_);
  map["kernel"] = {None, "model"};
  map["nothing"] = {"model"};
  const CheckpointPlan p =
      plan({{"a\"b/kernel", DType::kBF16, {8, 8}}, {"é/scale", DType::kF32, {8}}}, map);
  const std::string text = render_plan_text(p);
  EXPECT_THAT(text, HasSubstr("plan: 2 tensors, 160 B (160 bytes) on mesh[data=2,model=4] (8 "
                              "devices), mode search\n"));
  // Data order: the reference writer puts larger elements first.
  EXPECT_THAT(text, HasSubstr("\ntensor      dtype  shape   bytes  rule  pattern  layout        "
                              "      shard   shard bytes  note\n"
                              "é/scale     F32    (8,)     32 B  -     -        replicated      "
                              "    (8,)           32 B\n"
                              "a\"b/kernel  BF16   (8, 8)  128 B  #0    kernel   layout[None,model]"
                              "  (8, 2)         32 B\n"));
  EXPECT_THAT(text, HasSubstr("unused_rule: rule #1 ('nothing' -> layout[model])"));
  EXPECT_THAT(text, HasSubstr("plan OK: 0 errors, 1 warning\n"));

  const nlohmann::json j = nlohmann::json::parse(render_plan_json(p));
  ASSERT_EQ(j["tensors"].size(), 2u);
  EXPECT_EQ(j["tensors"][0]["path"], "é/scale");
  EXPECT_TRUE(j["tensors"][0]["rule"].is_null());
  EXPECT_EQ(j["tensors"][1]["path"], "a\"b/kernel");
  EXPECT_EQ(j["tensors"][1]["shard_shape"], nlohmann::json::parse("[8,2]"));
  EXPECT_FALSE(j["tensors"][1].contains("file"));  // planned from headers, not a checkpoint
  EXPECT_EQ(j["totals"]["device_bytes_sum"], 8 * (32 + 32));
  EXPECT_EQ(j["warnings"][0]["kind"], "unused_rule");
  EXPECT_EQ(j["errors"].size(), 0u);
}

TEST(TextFormatTest, FormatBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes((uint64_t{1} << 20) - 1), "1.0 MiB");  // not "1024.0 KiB"
  EXPECT_EQ(format_bytes(uint64_t{16} << 20), "16.0 MiB");
  EXPECT_EQ(format_bytes(uint64_t{3} << 39), "1.5 TiB");
  EXPECT_EQ(format_bytes(UINT64_MAX), "16.0 EiB");
}

TEST(TextFormatTest, JsonStrings) {
  std::string out;
  append_json_string(out, "model/layers_0/kernel");
  append_json_string(out, "a\"b\\c\n\x01");
  append_json_string(out, "日本");
  append_json_string(out, "bad \xff utf-8");
  EXPECT_EQ(out,
            "\"model/layers_0/kernel\"\"a\\\"b\\\\c\\n\\u0001\"\"日本\"\"bad \xEF\xBF\xBD utf-8\"");
  EXPECT_EQ(json_members(Json{{"a", 1}, {"b", "x"}}), "\"a\":1,\"b\":\"x\"");
  EXPECT_EQ(plural(1, "tensor"), "1 tensor");
  EXPECT_EQ(plural(0, "tensor"), "0 tensors");
  EXPECT_EQ(text_width("é/日本"), 4u);
}

}  // namespace
}  // namespace meshlayout
