#include "meshlayout/tokenizers/unicode_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"

namespace meshlayout::tokenizers {
namespace {

using ::testing::HasSubstr;

TEST(UnicodeTextTest, SequenceLengths) {
  EXPECT_EQ(utf8_sequence_length("a", 0), 1u);
  EXPECT_EQ(utf8_sequence_length("\xC3\xA9", 0), 2u);
  EXPECT_EQ(utf8_sequence_length("\xE2\x96\x81", 0), 3u);
  EXPECT_EQ(utf8_sequence_length("\xF0\x9F\x98\x80", 0), 4u);
}

TEST(UnicodeTextTest, RejectsWhatStrictDecodersReject) {
  EXPECT_EQ(utf8_sequence_length("\x80", 0), 0u);              // stray continuation
  EXPECT_EQ(utf8_sequence_length("\xC0\xAF", 0), 0u);          // overlong
  EXPECT_EQ(utf8_sequence_length("\xE0\x80\xAF", 0), 0u);      // overlong
  EXPECT_EQ(utf8_sequence_length("\xED\xA0\x80", 0), 0u);      // surrogate
  EXPECT_EQ(utf8_sequence_length("\xF4\x90\x80\x80", 0), 0u);  // past U+10FFFF
  EXPECT_EQ(utf8_sequence_length("\xE2\x96", 0), 0u);          // truncated
  EXPECT_EQ(first_invalid_utf8("ab\xFF"), 2u);
  EXPECT_EQ(first_invalid_utf8("ab\xC3\xA9"), std::string_view::npos);
}

TEST(UnicodeTextTest, CheckNamesTheByteAndOffset) {
  EXPECT_NO_THROW(check_utf8("h\xC3\xA9llo", "text"));
  try {
    check_utf8("ab\xFE", "the text to encode");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("the text to encode is not valid UTF-8: byte 0xFE at offset 2"));
  }
}

TEST(UnicodeTextTest, DecodeAndAppendRoundTrip) {
  for (char32_t cp : {U'a', U'é', U'▁', U'😀', U'\u0300', U'\U0010FFFF'}) {
    std::string s;
    append_utf8(s, cp);
    ASSERT_EQ(utf8_sequence_length(s, 0), s.size());
    EXPECT_EQ(decode_utf8(s, 0, s.size()), cp);
  }
}

TEST(UnicodeTextTest, WhiteSpace) {
  EXPECT_TRUE(is_unicode_whitespace(U' '));
  EXPECT_TRUE(is_unicode_whitespace(U'\v'));
  EXPECT_TRUE(is_unicode_whitespace(U'\u3000'));
  EXPECT_FALSE(is_unicode_whitespace(U'\x1C'));  // Python's isspace() says yes; Unicode says no
  EXPECT_FALSE(is_unicode_whitespace(U'\u200B'));
}

}  // namespace
}  // namespace meshlayout::tokenizers
