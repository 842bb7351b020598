#include "meshlayout/plan/plan_html.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/train/optimizer.h"

namespace meshlayout {
namespace {

// A mesh on the first devices (the process's device count is lifted to kMaxMeshDevices, as the
// commands do, so a mesh must name its devices).
DeviceMesh mesh_of(std::vector<int64_t> shape, std::vector<std::string> names) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<std::string> devices;
  for (int64_t i = 0; i < n; ++i) devices.push_back("cpu:" + std::to_string(i));
  return DeviceMesh(std::move(shape), std::move(names), std::move(devices));
}

// Whether `page` holds `needle`; a failure names the needle only (pages are large).
::testing::AssertionResult Has(const std::string& page, const std::string& needle) {
  if (page.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "the page (" << page.size() << " bytes) lacks: " << needle;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TensorInfo info(std::string name, Shape shape, size_t element_size = 4) {
  TensorInfo t;
  t.name = std::move(name);
  t.dtype_name = element_size == 4 ? "F32" : "BF16";
  t.dtype = element_size == 4 ? DType::kF32 : DType::kBF16;
  t.element_size = element_size;
  t.shape = std::move(shape);
  t.end = static_cast<uint64_t>(num_elements(t.shape)) * element_size;
  return t;
}

std::vector<const TensorInfo*> pointers(const std::vector<TensorInfo>& infos) {
  std::vector<const TensorInfo*> out;
  for (const TensorInfo& t : infos) out.push_back(&t);
  return out;
}

class PlanHtmlTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(kMaxMeshDevices); }
  void TearDown() override { reset_device_count(); }
};

TEST_F(PlanHtmlTest, SmallPlanPage) {
  DeviceMesh mesh = mesh_of({2, 4}, {"data", "model"});
  LayoutMap map(mesh);
  map["dense.*kernel"] = {None, "model"};
  map["emb"] = {{"data", "model"}, None};
  map["typo/kernel"] = {"model", None};
  std::vector<TensorInfo> infos = {info("dense_0/kernel", {16, 8}), info("dense_1/kernel", {16, 8}),
                                   info("dense_0/bias", {8}), info("emb/embeddings", {10, 6}, 2),
                                   info("big/table", {64, 3, 5})};
  const CheckpointPlan plan = plan_tensors(pointers(infos), map, {.replicated_warn_bytes = 1024});
  std::unique_ptr<Optimizer> adam = make_optimizer("adam");
  const TrainingPlan training = plan_training(plan, map, *adam);
  const std::string page = render_plan_html(
      plan, {.memory = memory_from_training(training), .notes = {"training with adam"}});
  EXPECT_EQ(page.rfind("<!DOCTYPE html>\n<html lang=\"en\">", 0), 0u);
  EXPECT_EQ(page.substr(page.size() - 15), "</body></html>\n");
  // Self-contained: nothing is fetched.
  EXPECT_FALSE(Has(page, "<link"));
  EXPECT_FALSE(Has(page, "src="));
  EXPECT_FALSE(Has(page, "@import"));
  EXPECT_FALSE(Has(page, "url(http"));
  EXPECT_FALSE(Has(page, "href=\"http"));
  EXPECT_EQ(occurrences(page, "<script>"), 1u);
  EXPECT_TRUE(Has(page, "data-meshlayout-rendered"));
  // Every device's colour is listed and drawn.
  std::string colours;
  for (int64_t p = 0; p < 8; ++p) {
    colours += (p ? "," : "") + css_colour(device_colour(p));
    EXPECT_GE(occurrences(page, "fill=\"" + css_colour(device_colour(p)) + "\""), 4u) << p;
  }
  EXPECT_TRUE(Has(page, "<meta name=\"meshlayout-device-colours\" content=\"" + colours));
  // Warnings: the unused rule, the large replicated tensor, the uneven embedding.
  EXPECT_TRUE(Has(page, "<b>unused_rule</b>"));
  EXPECT_TRUE(Has(page, "<b>large_replicated</b>"));
  EXPECT_TRUE(Has(page, "Warnings (3)"));  // and the uneven embedding
  // Bars by kind; one per device.
  EXPECT_TRUE(Has(page, "One bar per device."));
  EXPECT_TRUE(Has(page, "</i>gradients</span>"));
  EXPECT_TRUE(Has(page, "</i>optimizer slots</span>"));
  EXPECT_FALSE(Has(page, "</i>activations</span>"));  // none planned
  EXPECT_TRUE(Has(page, "<title>cpu:0: weights"));
  // The layouts: dense kernels share one.
  EXPECT_TRUE(Has(page, "Layouts (4)"));
  EXPECT_TRUE(Has(page, "<b>dense_{0–1}/kernel</b> &mdash; 2 tensors (16, 8)"));
  EXPECT_TRUE(Has(page, "2 tensors share this layout"));
  EXPECT_TRUE(Has(page, "3-D tensor (64, 3, 5) drawn as the 2-D slice"));
  EXPECT_TRUE(Has(page, "training with adam"));
}

TEST_F(PlanHtmlTest, ErrorsAreListedAndWrongRankIsNotDrawn) {
  DeviceMesh mesh = mesh_of({2}, {"model"});
  LayoutMap map(mesh);
  map["w"] = {"model", None};
  std::vector<TensorInfo> infos = {info("w", {4}), info("<script>alert(1)</script>", {4})};
  const CheckpointPlan plan = plan_tensors(pointers(infos), map);
  ASSERT_FALSE(plan.ok());
  const std::string page = render_plan_html(plan);
  EXPECT_TRUE(Has(page, "Errors (1)"));
  EXPECT_TRUE(Has(page, "<b>rank_mismatch</b>"));
  EXPECT_TRUE(Has(page, "Not drawn: the layout&#39;s rank differs from the tensor&#39;s."));
  EXPECT_FALSE(Has(page, "<script>alert"));  // names are escaped
  EXPECT_EQ(occurrences(page, "<script>"), 1u);
}

TEST_F(PlanHtmlTest, MemoryOfTheWrongSizeIsRefused) {
  DeviceMesh mesh = mesh_of({2}, {"model"});
  LayoutMap map(mesh);
  std::vector<TensorInfo> infos = {info("w", {4})};
  const CheckpointPlan plan = plan_tensors(pointers(infos), map);
  EXPECT_THROW(render_plan_html(plan, {.memory = std::vector<DeviceMemoryPlan>(3)}), ValueError);
}

TEST_F(PlanHtmlTest, ManyLayoutsBeyondTheLimitGoToATable) {
  DeviceMesh mesh = mesh_of({2}, {"model"});
  LayoutMap map(mesh);
  std::vector<TensorInfo> infos;
  for (int64_t i = 1; i <= 30; ++i) infos.push_back(info(fmt::format("t{}", i), {i, 2}));
  const CheckpointPlan plan = plan_tensors(pointers(infos), map);
  const std::string page = render_plan_html(plan, {.max_pictures = 5, .max_table_rows = 20});
  EXPECT_EQ(occurrences(page, "<details"), 5u);
  EXPECT_TRUE(Has(page, "25 layouts are not drawn (pictures are drawn for the 5 largest"));
  EXPECT_TRUE(Has(page, "; the first 20 listed"));
  EXPECT_TRUE(Has(page, "<b>t30</b>"));  // the largest are drawn
  EXPECT_EQ(occurrences(page, "<tr><td>"), 20u);
}

// Issue 28: a 405B-shaped Llama (Llama 3.1 405B: 126 layers, hidden 16384, 128 heads, 8 KV
// heads, feed-forward 53248, vocabulary 128256) on 16,384 devices, planned from shapes alone.
TEST_F(PlanHtmlTest, Llama405BOn16384DevicesStaysUnder20MB) {
  LlamaConfig config;
  config.vocab_size = 128256;
  config.hidden_size = 16384;
  config.intermediate_size = 53248;
  config.num_hidden_layers = 126;
  config.num_attention_heads = 128;
  config.num_key_value_heads = 8;
  config.head_dim = 128;
  std::vector<TensorInfo> infos;
  for (const HfWeightMapping& m : hf_llama_weight_mappings(config)) {
    infos.push_back(info(m.keras_path, m.keras_shape, 2));
  }
  DeviceMesh mesh = mesh_of({128, 128}, {"batch", "model"});
  const LayoutMap map = llama_layout_map(mesh, "model", "batch");
  const CheckpointPlan plan = plan_tensors(pointers(infos), map);
  const auto start = std::chrono::steady_clock::now();
  const std::string page = render_plan_html(plan);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << fmt::format("405B-shaped page on 16,384 devices: {} bytes, rendered in {:.2f} s\n",
                           page.size(), seconds);  // reported, not asserted
  EXPECT_LT(page.size(), size_t{20} << 20);
  EXPECT_TRUE(Has(page, "16384 devices: each mesh is drawn as a heatmap"));
  EXPECT_TRUE(Has(page, "126 tensors share this layout"));
  // 252 uneven warnings (key and value kernels of every layer: 8 KV heads over 128) are 2 lines.
  EXPECT_TRUE(Has(page,
                  "<b>uneven</b>: tensor &#39;transformer_layer_{0–125}/self_attention/key/"
                  "kernel&#39; (BF16 (16384, 8, 128)) under layout[model,batch,None]"));
  EXPECT_TRUE(Has(page, "<i>(126 warnings)</i>"));
  EXPECT_TRUE(Has(page, "transformer_layer_{0–125}/self_attention/query/kernel"));
  // The devices of the first 8 rows of the mesh hold one more vocabulary row of each
  // embedding (128256 = 1002 x 128, split over model x batch: uneven over batch).
  EXPECT_TRUE(Has(page, "16384 devices with 2 distinct mixes of bytes"));
  EXPECT_TRUE(Has(page, "1024 devices: cpu:0…cpu:1023"));
  EXPECT_FALSE(Has(page, "layouts are not drawn"));
}

}  // namespace
}  // namespace meshlayout
