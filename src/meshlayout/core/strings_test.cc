#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {
namespace {

TEST(StringsTest, QuoteEscapesLikePythonRepr) {
  EXPECT_EQ(quote("d1.kernel"), "'d1.kernel'");
  EXPECT_EQ(quote("it's"), "'it\\'s'");
  EXPECT_EQ(quote(std::string("a\0b", 3)), "'a\\x00b'");
  EXPECT_EQ(quote("a\\b\n"), "'a\\\\b\\n'");
}

TEST(StringsTest, ReprListAndInts) {
  std::vector<std::string> names{"data", "model"};
  EXPECT_EQ(repr_list(names), "['data', 'model']");
  std::vector<int64_t> v{2, 4};
  EXPECT_EQ(repr_ints(v), "[2, 4]");
}

TEST(StringsTest, SplitKeepsEmptyPieces) {
  EXPECT_EQ(split("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(split("", ','), (std::vector<std::string>{""}));
}

TEST(StringsTest, ParseInt64RejectsGarbageWithTheText) {
  EXPECT_EQ(parse_int64(" 12 ", "size"), 12);
  try {
    parse_int64("1x", "mesh axis size");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "mesh axis size must be a whole number, got '1x'");
  }
  EXPECT_THROW(parse_int64("", "n"), ValueError);
  EXPECT_THROW(parse_int64("99999999999999999999", "n"), ValueError);
}

TEST(StringsTest, IsIdentifier) {
  EXPECT_TRUE(is_identifier("data_2"));
  EXPECT_FALSE(is_identifier("2data"));
  EXPECT_FALSE(is_identifier("a-b"));
  EXPECT_FALSE(is_identifier(""));
}

}  // namespace
}  // namespace meshlayout
