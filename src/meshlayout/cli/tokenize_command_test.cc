#include "meshlayout/cli/tokenize_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "meshlayout/core/errors.h"

namespace meshlayout::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(TokenizeCommandTest, ParsesIdsInEveryForm) {
  EXPECT_THAT(parse_token_ids("[1, 2, 3]\n"), ElementsAre(1, 2, 3));
  EXPECT_THAT(parse_token_ids("1,2, 3\n4\t5"), ElementsAre(1, 2, 3, 4, 5));
  EXPECT_THAT(parse_token_ids(""), ElementsAre());
  try {
    parse_token_ids("1, x");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'x' is not a token id"));
  }
  EXPECT_THROW(parse_token_ids("[1, \"a\"]"), ValueError);
  EXPECT_THROW(parse_token_ids("[1, 2"), ValueError);
}

TEST(TokenizeCommandTest, EncodesAndDecodes) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("meshlayout_tokenize_cmd_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << R"({"added_tokens": [{"id": 3, "content": "<s>",
      "special": true, "normalized": false}],
      "post_processor": {"type": "TemplateProcessing", "single": [
        {"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [3], "tokens": ["<s>"]}}},
      "decoder": {"type": "Fuse"},
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})";
  std::ostringstream out;
  std::istringstream in("abba");
  EXPECT_EQ(run_tokenize({.model_dir = dir.string()}, in, out), 0);
  EXPECT_EQ(out.str(), "{\"ids\": [3, 2, 1, 0]}\n");
  std::ostringstream plain;
  std::istringstream in2("abba");
  run_tokenize({.model_dir = dir.string(), .no_special = true}, in2, plain);
  EXPECT_EQ(plain.str(), "{\"ids\": [2, 1, 0]}\n");
  std::ostringstream text;
  std::istringstream ids("[3, 2, 1, 0]");
  run_tokenize({.model_dir = dir.string(), .decode = true, .no_special = true}, ids, text);
  EXPECT_EQ(text.str(), "abba");
  std::istringstream bad("7");
  EXPECT_THROW(run_tokenize({.model_dir = dir.string(), .decode = true}, bad, text), NotFoundError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace meshlayout::cli
