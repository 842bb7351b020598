#include "meshlayout/tokenizers/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "meshlayout/core/errors.h"

namespace meshlayout::tokenizers {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("meshlayout_tok_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(LoadTokenizerTest, NamesTheDirectoryAndTheFilesItLookedFor) {
  const fs::path dir = fresh_dir("empty");
  try {
    load_tokenizer(dir.string());
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr(dir.string() + "' has no tokenizer: looked for "
                                         "tokenizer.json (Hugging Face) and tokenizer.model"));
  }
  EXPECT_THROW(load_tokenizer("/nonexistent/model"), NotFoundError);
  std::ofstream(dir / "file") << "x";
  EXPECT_THROW(load_tokenizer((dir / "file").string()), ValueError);
}

TEST(LoadTokenizerTest, PrefersTokenizerJsonAndReportsItsErrors) {
  const fs::path dir = fresh_dir("json");
  std::ofstream(dir / "tokenizer.model") << "junk";
  std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "Unigram", "vocab": []}})";
  try {
    load_tokenizer(dir.string());
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("tokenizer.json': model type \"Unigram\" at model.type"));
  }
  std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {"a": 0},
      "merges": []}})";
  std::ofstream(dir / "tokenizer_config.json") << "{not json";
  EXPECT_THROW(load_tokenizer(dir.string()), ValueError);
  fs::remove(dir / "tokenizer_config.json");
  auto tok = load_tokenizer(dir.string());
  EXPECT_EQ(tok->encode("aa").size(), 2u);
  EXPECT_THAT(tok->describe(), HasSubstr("BPE from tokenizer.json (1 tokens"));
  fs::remove(dir / "tokenizer.json");
  EXPECT_THROW(load_tokenizer(dir.string()), DataLossError);  // the junk tokenizer.model
}

}  // namespace
}  // namespace meshlayout::tokenizers
