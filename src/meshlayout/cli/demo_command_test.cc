#include "meshlayout/cli/demo_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout::cli {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(DemoCommandTest, RunsTheModelShardedAndPassesEveryCheck) {
  set_device_count(8);
  const std::string file =
      (std::filesystem::temp_directory_path() / ("demo_test_" + std::to_string(::getpid()) + ".safetensors")).string();
  std::ostringstream out;
  EXPECT_EQ(run_demo(out, {.checkpoint = file}), 0) << out.str();
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("1. A 2x4 mesh of virtual devices: mesh[data=2,model=4]"));
  EXPECT_THAT(text, ContainsRegex("blocks\\.1\\.up\\.kernel"));
  EXPECT_THAT(text, HasSubstr("check: every variable has the layout the plan gave it: ok"));
  EXPECT_THAT(text, HasSubstr("check: 8-device logits equal the 1-device logits"));
  EXPECT_THAT(text, HasSubstr("check: its logits equal the first model's"));
  EXPECT_THAT(text, HasSubstr("check: each device holds exactly the bytes the plan predicted: ok"));
  EXPECT_THAT(text, HasSubstr("rule 5 'attention.*kernel' matches nothing"));
  EXPECT_THAT(text, HasSubstr("all checks passed"));
  EXPECT_THAT(text, Not(HasSubstr("FAILED")));
  // The checkpoint it kept is a standard file holding every variable by object path.
  Checkpoint ckpt = Checkpoint::open(file);
  EXPECT_EQ(ckpt.tensors().size(), 16u);
  ASSERT_NE(ckpt.find("blocks.0.up.kernel").second, nullptr);
  EXPECT_EQ(ckpt.find("lm_head.kernel").second->shape, (Shape{256, 8192}));
  std::filesystem::remove(file);
  reset_device_count();
}

TEST(DemoCommandTest, RefusesWithTooFewDevices) {
  set_device_count(4);
  std::ostringstream out;
  EXPECT_EQ(run_demo(out), 1);
  EXPECT_THAT(out.str(), HasSubstr("the demo needs 8 devices"));
  reset_device_count();
}

}  // namespace
}  // namespace meshlayout::cli
