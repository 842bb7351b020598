#include "meshlayout/cli/layout_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout::cli {
namespace {

using ::testing::HasSubstr;

class LayoutCommandTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
};

TEST_F(LayoutCommandTest, PrintsGridAndBoxes) {
  std::ostringstream out;
  EXPECT_EQ(run_layout({.mesh = "data=2,model=4", .layout = "data,None", .shape = "8,6"}, out), 0);
  EXPECT_EQ(out.str(),
            "tensor (8, 6) as layout[data,None]@mesh[data=2,model=4]\n"
            "blocks 2 x 1; 4 replicas; largest box 24 elements\n"
            "+-------------------------+\n"
            "| cpu:0,cpu:1,cpu:2,cpu:3 |\n"
            "| [0:4, 0:6]              |\n"
            "+-------------------------+\n"
            "| cpu:4,cpu:5,cpu:6,cpu:7 |\n"
            "| [4:8, 0:6]              |\n"
            "+-------------------------+\n"
            "cpu:0  coords (0, 0)  box [0:4, 0:6]  shape (4, 6)  24 elements  replica 0\n"
            "cpu:1  coords (0, 1)  box [0:4, 0:6]  shape (4, 6)  24 elements  replica 1\n"
            "cpu:2  coords (0, 2)  box [0:4, 0:6]  shape (4, 6)  24 elements  replica 2\n"
            "cpu:3  coords (0, 3)  box [0:4, 0:6]  shape (4, 6)  24 elements  replica 3\n"
            "cpu:4  coords (1, 0)  box [4:8, 0:6]  shape (4, 6)  24 elements  replica 0\n"
            "cpu:5  coords (1, 1)  box [4:8, 0:6]  shape (4, 6)  24 elements  replica 1\n"
            "cpu:6  coords (1, 2)  box [4:8, 0:6]  shape (4, 6)  24 elements  replica 2\n"
            "cpu:7  coords (1, 3)  box [4:8, 0:6]  shape (4, 6)  24 elements  replica 3\n");
}

TEST_F(LayoutCommandTest, ReportsUnevenSplitsAndStrictRefusesThem) {
  std::ostringstream out;
  EXPECT_EQ(run_layout({.mesh = "model=4", .layout = "model", .shape = "10"}, out), 0);
  EXPECT_THAT(out.str(), HasSubstr("uneven: dimension 0 (size 10) in 4 blocks of 3"));
  EXPECT_THAT(out.str(), HasSubstr("[9:10]"));
  try {
    run_layout({.mesh = "model=4", .layout = "model", .shape = "10", .strict = true}, out);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "tensor with shape (10,) does not fit layout[model]@mesh[model=4]: dimension 0 "
                 "(size 10) is split over axis 'model' of total size 4, and 10 is not divisible "
                 "by 4 (strict mode rejects uneven shards)");
  }
}

TEST_F(LayoutCommandTest, RankMismatchNamesShapeAndLayout) {
  std::ostringstream out;
  try {
    run_layout({.mesh = "data=2", .layout = "data,None", .shape = "8"}, out);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "tensor with shape (8,) does not fit layout[data,None]@mesh[data=2]: the layout "
                 "has 2 dimensions, the tensor has 1");
  }
}

}  // namespace
}  // namespace meshlayout::cli
