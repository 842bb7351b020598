#include "meshlayout/tokenizers/hf_pretokenizers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"

namespace meshlayout::tokenizers {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> texts(const std::vector<Piece>& pieces) {
  std::vector<std::string> out;
  for (const Piece& p : pieces) out.push_back(p.text);
  return out;
}

TEST(HfPreTokenizersTest, ByteLevelAlphabet) {
  EXPECT_EQ(byte_level_alphabet()[' '], "\xC4\xA0");  // Ġ
  EXPECT_EQ(byte_level_alphabet()['A'], "A");
  EXPECT_EQ(byte_level_byte(U'Ġ'), ' ');
  EXPECT_EQ(byte_level_byte(U'€'), std::nullopt);
}

TEST(HfPreTokenizersTest, SequenceOfSplitAndByteLevel) {
  auto pre = parse_pre_tokenizer(nlohmann::json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\s+(?!\\S)|\\s+"}, "behavior": "Isolated",
       "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
       "use_regex": false}]})"),
                                 "pre_tokenizer");
  ASSERT_TRUE(pre->byte_level());
  std::vector<Piece> pieces = {{"a  b", true}};
  pre->apply(pieces);
  EXPECT_THAT(texts(pieces), ElementsAre("a", "\xC4\xA0", "\xC4\xA0", "b"));
}

TEST(HfPreTokenizersTest, MetaspaceFirstPrependsOnlyAtTheStart) {
  auto pre = parse_pre_tokenizer(
      nlohmann::json::parse(
          R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false})"),
      "pre_tokenizer");
  std::vector<Piece> pieces = {{"a b", true}, {"c", false}};
  pre->apply(pieces);
  EXPECT_THAT(texts(pieces), ElementsAre("▁a▁b", "c"));
}

TEST(HfPreTokenizersTest, NormalizersPrependAndReplace) {
  auto norm = parse_normalizer(nlohmann::json::parse(R"({"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})"),
                               "normalizer");
  EXPECT_EQ(norm->apply("a b"), "▁a▁b");
  EXPECT_EQ(norm->apply(""), "");
}

TEST(HfPreTokenizersTest, UnknownTypesAreErrorsNamingTypeAndPath) {
  try {
    parse_normalizer(
        nlohmann::json::parse(R"({"type": "Sequence", "normalizers": [{"type": "Lowercase"}]})"),
        "normalizer");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("normalizer type \"Lowercase\" at normalizer.normalizers[0].type "
                          "is not supported; meshlayout reads NFC, NFD, NFKC, NFKD, "
                          "Prepend, Replace and Sequence"));
  }
  try {
    parse_pre_tokenizer(nlohmann::json::parse(R"({"type": "BertPreTokenizer"})"), "pre_tokenizer");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("\"BertPreTokenizer\" at pre_tokenizer.type"));
  }
  EXPECT_THROW(parse_pre_tokenizer(nlohmann::json::parse(R"({"type": "Split", "pattern": {"X": 1},
      "behavior": "Isolated"})"),
                                   "p"),
               ValueError);
  EXPECT_THROW(parse_pre_tokenizer(nlohmann::json::parse(R"({"type": "Split", "pattern":
      {"String": "x"}, "behavior": "Sideways"})"),
                                   "p"),
               ValueError);
  EXPECT_THROW(parse_pre_tokenizer(nlohmann::json::parse(R"({"replacement": "x"})"), "p"),
               ValueError);
  // A Sequence's steps must be a list (hf_list, hf_json.h).
  try {
    parse_normalizer(nlohmann::json::parse(R"({"type": "Sequence", "normalizers": 5})"),
                     "normalizer");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("normalizer.normalizers is 5; expected a list"));
  }
  try {
    parse_pre_tokenizer(nlohmann::json::parse(R"({"type": "Sequence", "pretokenizers": {}})"),
                        "pre_tokenizer");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("pre_tokenizer.pretokenizers is {}; expected a list"));
  }
}

}  // namespace
}  // namespace meshlayout::tokenizers
