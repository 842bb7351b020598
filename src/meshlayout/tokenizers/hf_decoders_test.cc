#include "meshlayout/tokenizers/hf_decoders.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"

namespace meshlayout::tokenizers {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> decode(std::string_view json, std::vector<std::string> tokens) {
  parse_decoder(nlohmann::json::parse(json), "decoder")->apply(tokens);
  return tokens;
}

std::optional<int64_t> no_tokens(std::string_view) { return std::nullopt; }

TEST(HfDecodersTest, ByteLevelGivesTheBytesBack) {
  EXPECT_THAT(decode(R"({"type": "ByteLevel"})", {"Hello", "\xC4\xA0world", "\xC3\xBF"}),
              ElementsAre("Hello world\xFF"));  // ÿ stands for the byte 0xFF
  EXPECT_THAT(decode(R"({"type": "ByteLevel"})", {"<|x|>", "\xE2\x82\xAC"}),
              ElementsAre("<|x|>\xE2\x82\xAC"));  // € is outside the alphabet: as it is
}

TEST(HfDecodersTest, Llama2Sequence) {
  constexpr std::string_view kLlama2 = R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})";
  EXPECT_THAT(decode(kLlama2, {"▁Hello", "▁", "<0xC3>", "<0xA9>", "x", "<0xFF>"}),
              ElementsAre("Hello éx\xEF\xBF\xBD"));
  // A run of byte tokens that is not valid UTF-8 as a whole: one U+FFFD per byte.
  EXPECT_THAT(decode(kLlama2, {"<0xC3>", "<0xA9>", "<0xFF>"}),
              ElementsAre("\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"));
  EXPECT_THAT(decode(kLlama2, {"▁▁a"}), ElementsAre(" a"));
}

TEST(HfDecodersTest, Metaspace) {
  EXPECT_THAT(decode(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"})",
                     {"▁a", "▁b"}),
              ElementsAre("a", " b"));
}

TEST(HfDecodersTest, TemplateProcessingAddsTheBos) {
  auto post =
      parse_post_processor(nlohmann::json::parse(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}}],
       "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}]})"),
                           "post_processor", [](std::string_view t) -> std::optional<int64_t> {
                             if (t == "<s>") return 1;
                             return std::nullopt;
                           });
  EXPECT_THAT(post->process({5, 6}), ElementsAre(1, 5, 6));
  EXPECT_EQ(post->leading_special(), 1);
}

TEST(HfDecodersTest, ErrorsNameTypeAndPath) {
  try {
    decode(R"({"type": "Sequence", "decoders": [{"type": "WordPiece"}]})", {});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("decoder type \"WordPiece\" at decoder.decoders[0].type is "
                                    "not supported"));
  }
  try {
    parse_post_processor(nlohmann::json::parse(R"({"type": "TemplateProcessing", "single":
        [{"SpecialToken": {"id": "<s>", "type_id": 0}}], "special_tokens": {"<s>":
        {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}})"),
                         "post_processor", no_tokens);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("post_processor.special_tokens.<s> gives the token \"<s>\" "
                                    "the id 1, but the vocabulary lacks it"));
  }
  EXPECT_THROW(
      parse_post_processor(nlohmann::json::parse(R"({"type": "BertProcessing"})"), "pp", no_tokens),
      ValueError);
}

}  // namespace
}  // namespace meshlayout::tokenizers
