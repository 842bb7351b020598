#include "meshlayout/plan/svg_basics.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace meshlayout {
namespace {

TEST(SvgBasics, ColoursAreDistinctAndNeverGrey) {
  std::set<std::string> seen;
  for (int64_t p = 0; p < 1024; ++p) {
    const Rgb c = device_colour(p);
    seen.insert(css_colour(c));
    EXPECT_FALSE(c.r == c.g && c.g == c.b) << p << " " << css_colour(c);
  }
  EXPECT_EQ(seen.size(), 1024u);
  EXPECT_EQ(css_colour(device_colour(0)), "#e6194b");
}

TEST(SvgBasics, BoxColoursRampAlongBothDirections) {
  // Hue along the more split direction: 8 row blocks, the first red, the last violet.
  EXPECT_EQ(box_colour(0, 8, 0, 2), box_colour(0, 8, 0, 2));
  EXPECT_NE(box_colour(0, 8, 0, 2), box_colour(7, 8, 0, 2));
  EXPECT_NE(box_colour(3, 8, 0, 2), box_colour(3, 8, 1, 2));  // lightness along the other
  const Rgb first = box_colour(0, 8, 0, 1);
  EXPECT_GT(first.r, first.g);                                // red
  EXPECT_EQ(box_colour(0, 1, 5, 8), box_colour(5, 8, 0, 1));  // the split direction takes the hue
  std::set<std::string> seen;
  for (int64_t i = 0; i < 16; ++i) {
    for (int64_t j = 0; j < 4; ++j) seen.insert(css_colour(box_colour(i, 16, j, 4)));
  }
  EXPECT_EQ(seen.size(), 64u);
}

TEST(SvgBasics, TextIsReadableOnItsFill) {
  EXPECT_STREQ(text_colour({255, 225, 25}), "#111");  // yellow
  EXPECT_STREQ(text_colour({0, 0, 117}), "#fff");     // navy
}

TEST(SvgBasics, XmlEscape) {
  EXPECT_EQ(xml_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
  EXPECT_EQ(xml_escape("plain/path_0"), "plain/path_0");
}

}  // namespace
}  // namespace meshlayout
