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
  EXPECT_NE(block_colour(0), block_colour(1));
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
