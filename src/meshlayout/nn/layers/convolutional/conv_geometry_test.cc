// conv_geometry_test.cc — Keras' (TF's) output sizes and "same" padding, by hand.
#include "meshlayout/nn/layers/convolutional/conv_geometry.h"

#include <gtest/gtest.h>

namespace meshlayout {
namespace {

TEST(ConvGeometryTest, ValidWindowsThatFitWhole) {
  EXPECT_EQ(conv_out_extent(7, 3, 1, false), 5);
  EXPECT_EQ(conv_out_extent(7, 3, 2, false), 3);
  EXPECT_EQ(conv_out_extent(2, 3, 1, false), 0);  // no window fits
  EXPECT_EQ(conv_pad_before(7, 3, 2, false), 0);
}

TEST(ConvGeometryTest, SamePaddingPutsTheSmallerHalfBefore) {
  EXPECT_EQ(conv_out_extent(7, 3, 2, true), 4);
  EXPECT_EQ(conv_pad_before(7, 3, 2, true), 1);  // total (4-1)*2+3-7 = 2
  EXPECT_EQ(conv_out_extent(6, 4, 1, true), 6);
  EXPECT_EQ(conv_pad_before(6, 4, 1, true), 1);  // total 3: 1 before, 2 after
  EXPECT_EQ(conv_pad_before(8, 1, 3, true), 0);  // total max(-1, 0)
}

}  // namespace
}  // namespace meshlayout
