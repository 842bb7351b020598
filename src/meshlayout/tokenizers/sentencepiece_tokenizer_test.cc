#include "meshlayout/tokenizers/sentencepiece_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <fstream>

#include "meshlayout/core/errors.h"

namespace meshlayout::tokenizers {
namespace {

using ::testing::HasSubstr;

// A small BPE model with byte fallback (as Gemma's), trained once.
const std::string& model_path() {
  static const std::string path = [] {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("meshlayout_spm_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    {
      std::ofstream corpus(dir / "corpus.txt");
      for (int i = 0; i < 50; ++i) {
        corpus << "the quick brown fox jumps over the lazy dog " << i << "\n"
               << "a mesh of devices holds the shards of every tensor\n";
      }
    }
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + (dir / "corpus.txt").string() +
        " --model_prefix=" + (dir / "tokenizer").string() +
        " --vocab_size=400 --model_type=bpe --byte_fallback=true --minloglevel=2");
    if (!status.ok()) throw std::runtime_error(status.ToString());
    return (dir / "tokenizer.model").string();
  }();
  return path;
}

TEST(SentencePieceTokenizerTest, EncodeDecodeWithBos) {
  auto tok = SentencePieceTokenizer::load(model_path());
  const std::vector<int64_t> ids = tok->encode("the lazy fox ✓", true);
  ASSERT_TRUE(tok->bos_id());
  EXPECT_EQ(ids.front(), *tok->bos_id());
  EXPECT_EQ(tok->decode(ids, true), "the lazy fox ✓");  // ✓ through byte fallback
  EXPECT_EQ(tok->encode("the", false).size() + 1, tok->encode("the", true).size());
  EXPECT_EQ(tok->token_to_id(tok->id_to_token(ids[1])), ids[1]);
  EXPECT_EQ(tok->token_to_id("no such piece"), std::nullopt);
}

TEST(SentencePieceTokenizerTest, Errors) {
  auto tok = SentencePieceTokenizer::load(model_path());
  const std::vector<int64_t> bad = {tok->vocab_size()};
  EXPECT_THROW(tok->decode(bad, false), NotFoundError);
  const auto junk = std::filesystem::temp_directory_path() / "meshlayout_spm_junk.model";
  std::ofstream(junk) << "this is not a protobuf";
  try {
    SentencePieceTokenizer::load(junk.string());
    FAIL();
  } catch (const DataLossError& e) {
    EXPECT_THAT(e.what(), HasSubstr("meshlayout_spm_junk.model' cannot be loaded"));
  }
  EXPECT_THROW(SentencePieceTokenizer::load("/nonexistent/tokenizer.model"), NotFoundError);
}

}  // namespace
}  // namespace meshlayout::tokenizers
