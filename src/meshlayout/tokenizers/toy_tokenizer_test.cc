// The toy tokenizer: exactly vocab_size tokens (64 without every byte, 512 with), loaded by
// load_tokenizer as a byte-level BPE; encode adds <s> and uses the merges; text round-trips
// (any bytes when the alphabet is whole; other characters are <unk> in the small one); every
// id decodes; sizes out of range are refused by name.
#include "meshlayout/tokenizers/toy_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "meshlayout/core/errors.h"
#include "meshlayout/tokenizers/tokenizer.h"

namespace meshlayout::tokenizers {
namespace {

TEST(ToyTokenizerTest, LoadsEncodesAndDecodes) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("meshlayout_toy_tok_" + std::to_string(::getpid()));
  for (const int64_t vocab : {36, 64, 512}) {
    SCOPED_TRACE(vocab);
    write_toy_tokenizer(dir.string(), vocab);
    const std::unique_ptr<Tokenizer> tok = load_tokenizer(dir.string());
    EXPECT_EQ(tok->vocab_size(), vocab);
    const std::vector<int64_t> ids = tok->encode("the cat sat on the mat.\n", true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 1);  // <s>
    EXPECT_EQ(tok->decode(ids, /*skip_special_tokens=*/true), "the cat sat on the mat.\n");
    if (vocab >= 64) {
      EXPECT_EQ(tok->encode(" the", false), std::vector<int64_t>{*tok->token_to_id("Ġthe")});
    }
    for (int64_t id = 0; id < vocab; ++id) EXPECT_NO_THROW((void)tok->decode({&id, 1}));
    if (vocab == 512) {
      const std::string bytes = "Zürich 東京 \xff\x01 OK";
      EXPECT_EQ(tok->decode(tok->encode(bytes, false)), bytes);
    } else {
      EXPECT_EQ(tok->encode("Q", false), std::vector<int64_t>{0});  // <unk>
    }
  }
  std::filesystem::remove_all(dir);
  EXPECT_THROW((void)toy_tokenizer_json(35), ValueError);
  EXPECT_THROW((void)toy_tokenizer_json(5000), ValueError);
}

}  // namespace
}  // namespace meshlayout::tokenizers
