#include "meshlayout/tokenizers/hf_tokenizer.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"

namespace meshlayout::tokenizers {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

// A byte-level BPE in the Llama 3 layout: the 256 alphabet characters, two merges, two
// special tokens and a template adding the BOS.
json byte_level_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_alphabet()[b]] = b;
  vocab["he"] = 256;
  vocab["hel"] = 257;
  json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       {{{"id", 258}, {"content", "<|begin_of_text|>"}, {"special", true}, {"normalized", false}},
        {{"id", 259}, {"content", "<|eot_id|>"}, {"special", true}, {"normalized", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", R"( ?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens",
         {{"<|begin_of_text|>",
           {{"id", "<|begin_of_text|>"}, {"ids", {258}}, {"tokens", {"<|begin_of_text|>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", {"h e", json::array({"he", "l"})}},
        {"byte_fallback", false},
        {"ignore_merges", true}}}};
  return j;
}

std::unique_ptr<HfTokenizer> load(const json& j) {
  return HfTokenizer::from_json(j.dump(), "'m/tokenizer.json'", nullptr);
}

std::string error_of(const json& j) {
  try {
    load(j);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no error";
}

TEST(HfTokenizerTest, ByteLevelEncodeDecode) {
  auto tok = load(byte_level_json());
  EXPECT_EQ(tok->vocab_size(), 260);
  EXPECT_EQ(tok->bos_id(), 258);
  EXPECT_THAT(tok->encode("hello", true), ElementsAre(258, 257, 'l', 'o'));
  EXPECT_THAT(tok->encode("<|eot_id|>he", false), ElementsAre(259, 256));
  const std::string bytes = "hi \xFF\xFE  x\n\t\xF0\x9F\x98\x80";
  EXPECT_EQ(tok->decode(tok->encode(bytes, true), true), bytes);
  EXPECT_EQ(tok->decode(tok->encode(bytes, true), false), "<|begin_of_text|>" + bytes);
  EXPECT_EQ(tok->token_to_id("<|eot_id|>"), 259);
  EXPECT_EQ(tok->id_to_token(32), "\xC4\xA0");
  EXPECT_THROW(tok->id_to_token(260), NotFoundError);
}

TEST(HfTokenizerTest, BosAndEosFromTokenizerConfig) {
  const json config = {{"bos_token", "<|begin_of_text|>"},
                       {"eos_token", {{"content", "<|eot_id|>"}, {"__type", "AddedToken"}}}};
  auto tok = HfTokenizer::from_json(byte_level_json().dump(), "t", &config);
  EXPECT_EQ(tok->eos_id(), 259);
  const json bad = {{"eos_token", "<|nope|>"}};
  EXPECT_THROW(HfTokenizer::from_json(byte_level_json().dump(), "t", &bad), ValueError);
}

TEST(HfTokenizerTest, ByteFallbackRefusesInvalidUtf8) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"▁", 2}, {"a", 3}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 4 + b;
  json j = {{"model",
             {{"type", "BPE"},
              {"vocab", vocab},
              {"merges", json::array()},
              {"unk_token", "<unk>"},
              {"byte_fallback", true}}},
            {"normalizer",
             {{"type", "Sequence"},
              {"normalizers",
               {{{"type", "Prepend"}, {"prepend", "▁"}},
                {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
            {"decoder",
             {{"type", "Sequence"},
              {"decoders",
               {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                {{"type", "ByteFallback"}},
                {{"type", "Fuse"}},
                {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}}};
  auto tok = load(j);
  EXPECT_THAT(tok->encode("a é", false), ElementsAre(2, 3, 2, 4 + 0xC3, 4 + 0xA9));
  EXPECT_EQ(tok->decode(tok->encode(" a  é ", false), false), " a  é ");
  try {
    tok->encode("a\xFF", false);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("byte 0xFF at offset 1"));
  }
}

TEST(HfTokenizerTest, UnsupportedOrMalformedFilesNameWhatAndWhere) {
  EXPECT_THAT(error_of(json::parse(R"({"model": {"type": "WordPiece", "vocab": {}}})")),
              HasSubstr("'m/tokenizer.json': model type \"WordPiece\" at model.type is not "
                        "supported; meshlayout reads BPE"));
  json j = byte_level_json();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  EXPECT_THAT(error_of(j), HasSubstr("normalizer type \"BertNormalizer\" at normalizer.type"));
  j = byte_level_json();
  j["model"]["merges"].push_back("he zz");
  EXPECT_THAT(error_of(j), HasSubstr("BPE merge 2 ('he' 'zz') names the token 'zz'"));
  j = byte_level_json();
  j["model"]["merges"].push_back("abc");
  EXPECT_THAT(error_of(j), HasSubstr("model.merges[2] is 'abc'; expected two tokens"));
  j = byte_level_json();
  j["added_tokens"][0]["single_word"] = true;
  EXPECT_THAT(error_of(j), HasSubstr("added_tokens[0].single_word is true"));
  j = byte_level_json();
  j["model"]["dropout"] = 0.1;
  EXPECT_THAT(error_of(j), HasSubstr("model.dropout is 0.1"));
  j = byte_level_json();
  j["truncation"] = {{"max_length", 8}};
  EXPECT_THAT(error_of(j), HasSubstr("truncation is"));
  try {
    HfTokenizer::from_json("{\"model\": ", "'x.json'", nullptr);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'x.json': "));
  }
  EXPECT_THAT(error_of(json::array()), HasSubstr("expected a tokenizer.json object"));
}

}  // namespace
}  // namespace meshlayout::tokenizers
