#include "meshlayout/cli/demo_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

#include "meshlayout/layout/devices.h"

namespace meshlayout::cli {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

TEST(DemoCommandTest, TourRunsOnTheDefaultMesh) {
  set_device_count(8);
  std::ostringstream out;
  EXPECT_EQ(run_demo(out), 0);
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("1. A 2x4 mesh: mesh[data=2,model=4]"));
  EXPECT_THAT(text, ContainsRegex("decoder_block_1/ffw_gating/kernel +\\(64, 256\\) +"
                                  "layout\\[None,model\\] +shard \\(64, 64\\)"));
  EXPECT_THAT(text, HasSubstr("final_norm/scale"));
  EXPECT_THAT(text, HasSubstr("replicated (no rule)"));
  EXPECT_THAT(text, HasSubstr("[9:10]"));
  EXPECT_THAT(text, HasSubstr("verdict: ambiguous: 2 rules match"));
  EXPECT_THAT(text, HasSubstr("rule 5 'lm_head/kernel' matches nothing"));
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
