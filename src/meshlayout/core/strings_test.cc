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

// Messages were cut at an embedded NUL and carried terminal escapes and invalid UTF-8 raw.
TEST(StringsTest, QuoteEscapesEveryUnprintableByte) {
  EXPECT_EQ(quote(std::string("a\0b\x1b[2J", 7)), "'a\\x00b\\x1b[2J'");
  EXPECT_EQ(quote("\x7f\xff\xc3"), "'\\x7f\\xff\\xc3'");  // DEL, invalid, cut UTF-8
  EXPECT_EQ(quote("caf\xc3\xa9 \xe2\x80\xa6"), "'caf\xc3\xa9 \xe2\x80\xa6'");  // valid kept
  EXPECT_EQ(quote("\xc2\x9b"), "'\\x9b'");                                     // C1 control (CSI)
  EXPECT_EQ(quote("\xed\xa0\x80"), "'\\xed\\xa0\\x80'");                       // a UTF-16 surrogate
  EXPECT_EQ(quote("\xc0\xaf"), "'\\xc0\\xaf'");                                // overlong '/'
}

// A 50 MB pattern gave a 150 MB message.
TEST(StringsTest, QuoteCapsLongText) {
  const std::string big(5'000'000, 'a');
  EXPECT_EQ(quote(big), "'" + std::string(kMaxQuotedBytes, 'a') + "…' (5000000 bytes)");
  EXPECT_EQ(quote(std::string(kMaxQuotedBytes, 'b')),
            "'" + std::string(kMaxQuotedBytes, 'b') + "'");
  // Never cuts inside a character.
  std::string accents;
  while (accents.size() < 300) accents += "\xc3\xa9";
  const std::string q = quote("x" + accents);
  EXPECT_EQ(q, "'x" + accents.substr(0, 198) + "…' (301 bytes)");
}

TEST(StringsTest, EscapeControlsKeepsPrintableText) {
  EXPECT_EQ(escape_controls("dense/kernel:0 it's a\\b"), "dense/kernel:0 it's a\\b");
  EXPECT_EQ(escape_controls("evil\n\x1b]0;title\x07"), "evil\\n\\x1b]0;title\\x07");
  EXPECT_EQ(escape_controls("\xff"), "\\xff");
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

TEST(StringsTest, Fnv1aIsThePublishedFunction) {
  // Test vectors of the published FNV-1a 64-bit function.
  EXPECT_EQ(fnv1a_64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a_64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a_64("foobar"), 0x85944171f73967e8ull);
  EXPECT_NE(fnv1a_64("ab"), fnv1a_64("ba"));
}

}  // namespace
}  // namespace meshlayout
