// The picture options of the commands (issue 28 item 5): `layout --svg FILE` and
// `plan --html FILE` write their file whole, name a path they cannot write (before printing
// anything) and leave nothing behind when they fail. cli.pictures_chromium renders both in a
// browser.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "meshlayout/cli/layout_command.h"
#include "meshlayout/cli/plan_command.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/plan/checkpoint_test_util.h"
#include "meshlayout/plan/layout_svg.h"

namespace meshlayout::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Whether `text` holds `needle`; a failure names the needle only (pages are large).
::testing::AssertionResult Has(const std::string& text, const std::string& needle) {
  if (text.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "the text (" << text.size() << " bytes) lacks: " << needle;
}

size_t count_files(const std::string& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

class PictureOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(kMaxMeshDevices); }  // as the commands do
  void TearDown() override { reset_device_count(); }
  testing::ScratchDir dir_;
};

TEST_F(PictureOptionsTest, LayoutSvgWritesThePictureAndTheSameText) {
  const std::string path = dir_.path("layout.svg");
  std::ostringstream with, without;
  LayoutOptions options{.mesh = "data=2,model=4", .layout = "data,None", .shape = "8,6"};
  EXPECT_EQ(run_layout(options, without), 0);
  options.svg = path;
  EXPECT_EQ(run_layout(options, with), 0);
  EXPECT_EQ(with.str(), without.str() + "picture: " + path + "\n");
  const std::string svg = read_text(path);
  EXPECT_EQ(svg.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg", 0), 0u);
  EXPECT_TRUE(Has(svg, "tensor (8, 6) as layout[data,None]@mesh[data=2,model=4]"));
  for (int64_t p = 0; p < 8; ++p) EXPECT_TRUE(Has(svg, css_colour(device_colour(p))));
  EXPECT_TRUE(Has(svg, "cpu:7 (1, 3): box [4:8, 0:6], copy 4/4"));
}

TEST_F(PictureOptionsTest, LayoutSvgToABadPathFailsBeforePrinting) {
  std::ostringstream out;
  const std::string path = dir_.path("no/such/dir/layout.svg");
  try {
    run_layout({.mesh = "model=2", .layout = "model", .shape = "4", .svg = path}, out);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot write --svg '" + path + "': directory '" +
                                    dir_.path("no/such/dir") + "' does not exist"));
  }
  EXPECT_EQ(out.str(), "");
  EXPECT_EQ(count_files(dir_.path()), 0u);
}

class PlanHtmlCommandTest : public PictureOptionsTest {
 protected:
  void SetUp() override {
    PictureOptionsTest::SetUp();
    checkpoint_ =
        dir_.write_safetensors("model.safetensors", {{"dense_1/kernel", DType::kF32, {16, 8}},
                                                     {"dense_1/bias", DType::kF32, {8}},
                                                     {"emb/embeddings", DType::kBF16, {10, 6}}});
    rules_ = dir_.write("rules.json", R"({
      "mesh": {"shape": [2, 4], "axis_names": ["data", "model"]},
      "rules": [["dense.*kernel", [null, "model"]], ["emb", [["data", "model"], null]]]})");
  }
  PlanCommandOptions options() const { return {.path = checkpoint_, .rules_path = rules_}; }
  std::string checkpoint_, rules_;
};

TEST_F(PlanHtmlCommandTest, WritesThePageAndSaysSo) {
  std::ostringstream with, without;
  PlanCommandOptions o = options();
  o.optimizer = "adam";
  EXPECT_EQ(run_plan(o, without), 0);
  o.html = dir_.path("plan.html");
  EXPECT_EQ(run_plan(o, with), 0);
  EXPECT_EQ(with.str(), without.str() + "picture: " + *o.html + "\n");
  const std::string page = read_text(*o.html);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_TRUE(Has(page, "training with adam: weights, gradients and slots in float32"));
  EXPECT_TRUE(Has(page, "</i>optimizer slots</span>"));
  EXPECT_TRUE(Has(page, "<b>dense_1/kernel</b>"));
  for (int64_t p = 0; p < 8; ++p) EXPECT_TRUE(Has(page, css_colour(device_colour(p))));
  // JSON output is unchanged (still one object) with --html.
  std::ostringstream json_with, json_without;
  o.json = true;
  EXPECT_EQ(run_plan(o, json_with), 0);
  o.html.reset();
  EXPECT_EQ(run_plan(o, json_without), 0);
  EXPECT_EQ(json_with.str(), json_without.str());
  EXPECT_TRUE(nlohmann::json::accept(json_with.str()));
}

TEST_F(PlanHtmlCommandTest, TheMemoryPlanIsDrawn) {
  std::ostringstream out;
  PlanCommandOptions o = options();
  o.optimizer = "adam";
  o.device_memory = "512B";  // every device's peak (640 or 808 bytes) exceeds it
  o.html = dir_.path("plan.html");
  EXPECT_EQ(run_plan(o, out), kPlanDoesNotFitExitCode);
  const std::string page = read_text(*o.html);
  EXPECT_TRUE(Has(page, "The red line is the device memory, 512 B."));
  EXPECT_TRUE(Has(page, "The black tick is each device's peak"));
  EXPECT_TRUE(Has(page, " (does not fit)</text>"));
  EXPECT_TRUE(Has(page, "</i>optimizer slots</span>"));
}

TEST_F(PlanHtmlCommandTest, APlanWithErrorsIsStillDrawn) {
  const std::string rules = dir_.write("bad.json", R"({
      "mesh": {"shape": [2], "axis_names": ["model"]},
      "rules": [["dense_1/bias", ["model", null]]]})");  // rank 2 for a rank-1 tensor
  std::ostringstream out;
  PlanCommandOptions o{.path = checkpoint_, .rules_path = rules};
  o.html = dir_.path("plan.html");
  EXPECT_EQ(run_plan(o, out), kPlanHasErrorsExitCode);
  const std::string page = read_text(*o.html);
  EXPECT_TRUE(Has(page, "Errors (1)"));
  EXPECT_TRUE(Has(page, "<b>rank_mismatch</b>"));
}

TEST_F(PlanHtmlCommandTest, AnUnwritablePathIsNamedAndNothingIsLeft) {
  std::ostringstream out;
  PlanCommandOptions o = options();
  for (const std::string& path : {dir_.path("missing/plan.html"), dir_.path()}) {
    o.html = path;
    try {
      run_plan(o, out);
      FAIL() << "no error for " << path;
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr("cannot write --html '" + path + "'"));
    }
  }
  o.html = "/proc/plan.html";
  EXPECT_THROW(run_plan(o, out), ValueError);
  EXPECT_EQ(out.str(), "");                 // nothing printed
  EXPECT_EQ(count_files(dir_.path()), 2u);  // the checkpoint and the rules only
}

}  // namespace
}  // namespace meshlayout::cli
