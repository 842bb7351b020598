#include "meshlayout/tokenizers/hf_regex.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"

namespace meshlayout::tokenizers {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> regex_pieces(std::string_view pattern, std::string_view text) {
  HfRegex re(pattern, "test");
  std::vector<std::string> out;
  for (auto [s, e] : re.find_all(text)) out.emplace_back(text.substr(s, e - s));
  return out;
}

TEST(HfRegexTest, Llama3PatternWithTheLookaheadByHand) {
  EXPECT_THAT(regex_pieces(kLlama3Pattern, "Hello  world"), ElementsAre("Hello", " ", " world"));
  EXPECT_THAT(regex_pieces(kLlama3Pattern, "a   \n\n b  "),
              ElementsAre("a", "   \n\n", " b", "  "));
  EXPECT_THAT(regex_pieces(kLlama3Pattern, "I'LL 12345"),
              ElementsAre("I", "'LL", " ", "123", "45"));
  EXPECT_THAT(regex_pieces(kLlama3Pattern, "x\u3000\u3000y"),
              ElementsAre("x", "\u3000", "\u3000y"));
}

TEST(HfRegexTest, InvalidBytesMatchAsPunctuation) {
  EXPECT_THAT(regex_pieces(kLlama3Pattern, "a \xFF\xFE b"), ElementsAre("a", " \xFF\xFE", " b"));
}

TEST(HfRegexTest, OtherLookaroundIsRefusedNamingThePattern) {
  try {
    HfRegex("a(?=b)", "pre_tokenizer.pattern.Regex");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the regex 'a(?=b)' at pre_tokenizer.pattern.Regex does not "
                                    "compile on RE2"));
  }
}

TEST(HfRegexTest, AWhitespaceRunGivesItsLastCharacterToTheNextWord) {
  const HfRegex re(R"(\s+(?!\S)|\s+)", "pre_tokenizer.pattern.Regex");
  using Spans = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(re.find_all("a  b"), (Spans{{1, 2}, {2, 3}}));
  EXPECT_EQ(re.find_all("a  "), (Spans{{1, 3}}));  // at the end: the whole run
}

TEST(HfRegexTest, WhitespaceClassesAreUnicodeWhiteSpace) {
  EXPECT_THAT(regex_pieces(R"(\S+)", "a\u00A0b c"), ElementsAre("a", "b", "c"));
  EXPECT_THAT(regex_pieces(R"([\sx]+)", "ax\u2003 b"), ElementsAre("x\u2003 "));
  try {
    translate_hf_regex(R"([\S])", "normalizer.pattern.Regex");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("uses \\S inside a character class"));
  }
}

TEST(HfRegexTest, PatternObjectsAreStringsOrRegexes) {
  const auto literal = parse_pattern(nlohmann::json{{"String", "a.b"}}, "normalizer.pattern");
  EXPECT_EQ(literal->find_all("axb a.b"), (std::vector<std::pair<size_t, size_t>>{{4, 7}}));
  const auto regex = parse_pattern(nlohmann::json{{"Regex", "a.b"}}, "normalizer.pattern");
  EXPECT_EQ(regex->find_all("axb").size(), 1u);
  try {
    parse_pattern(nlohmann::json{{"Glob", "*"}}, "normalizer.pattern");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("normalizer.pattern is"));
    EXPECT_THAT(e.what(), HasSubstr("expected {\"String\": text} or {\"Regex\": pattern}"));
  }
  try {
    parse_pattern(nlohmann::json{{"String", ""}}, "normalizer.pattern");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("normalizer.pattern.String is an empty string"));
  }
}

TEST(HfRegexTest, ReplaceAllPutsTheContentForEveryMatch) {
  EXPECT_EQ(
      HfRegex(" ", "normalizer.pattern.String", /*literal=*/true).replace_all("a b  c", "\u2581"),
      "a\u2581b\u2581\u2581c");
  EXPECT_EQ(HfRegex("x+", "decoders[0].pattern.Regex").replace_all("axxbx", ""), "ab");
  EXPECT_EQ(HfRegex("z", "test").replace_all("abc", "-"), "abc");
}

}  // namespace
}  // namespace meshlayout::tokenizers
