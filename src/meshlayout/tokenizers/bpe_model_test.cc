#include "meshlayout/tokenizers/bpe_model.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"

namespace meshlayout::tokenizers {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<int64_t> run(const BpeModel& bpe, std::string_view word) {
  std::vector<int64_t> ids;
  bpe.tokenize(word, ids);
  return ids;
}

TEST(BpeModelTest, MergesLowestRankFirstLeftmostAmongEquals) {
  BpeModel bpe({{"a", 0}, {"b", 1}, {"ab", 2}, {"aa", 3}, {"aab", 4}},
               {{"a", "b"}, {"a", "a"}, {"a", "ab"}}, {});
  EXPECT_THAT(run(bpe, "aab"), ElementsAre(4));      // a(ab) then a+ab
  EXPECT_THAT(run(bpe, "aaaa"), ElementsAre(3, 3));  // leftmost first
  EXPECT_THAT(run(bpe, "ba"), ElementsAre(1, 0));
}

TEST(BpeModelTest, IgnoreMergesTakesAWholeWordFromTheVocabulary) {
  // "abc" is in the vocabulary but no merge builds it.
  std::unordered_map<std::string, int64_t> vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"abc", 3}};
  EXPECT_THAT(run(BpeModel(vocab, {}, {}), "abc"), ElementsAre(0, 1, 2));
  EXPECT_THAT(run(BpeModel(vocab, {}, {.ignore_merges = true}), "abc"), ElementsAre(3));
}

TEST(BpeModelTest, ByteFallbackThenUnk) {
  std::unordered_map<std::string, int64_t> vocab = {{"<unk>", 0}, {"a", 1}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 2 + b;
  BpeModel bpe(vocab, {}, {.unk_token = "<unk>", .byte_fallback = true});
  EXPECT_THAT(run(bpe, "a\xC3\xA9"), ElementsAre(1, 2 + 0xC3, 2 + 0xA9));
  BpeModel unk({{"<unk>", 0}, {"a", 1}}, {}, {.unk_token = "<unk>", .fuse_unk = true});
  EXPECT_THAT(run(unk,
                  "a\xC3\xA9\xC3\xA9"
                  "a"),
              ElementsAre(1, 0, 1));
}

TEST(BpeModelTest, CharacterWithoutTokenIsAnError) {
  BpeModel bpe({{"a", 0}}, {}, {});
  try {
    run(bpe, "ab");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no token for the character 'b' in 'ab'"));
  }
}

TEST(BpeModelTest, MergeNamingAnUnknownTokenIsAnError) {
  try {
    BpeModel({{"a", 0}, {"b", 1}, {"ab", 2}}, {{"a", "b"}, {"a", "zz"}}, {});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("BPE merge 1 ('a' 'zz') names the token 'zz', which is not "
                                    "in the vocabulary"));
  }
  EXPECT_THROW(BpeModel({{"a", 0}, {"b", 1}}, {{"a", "b"}}, {}), ValueError);  // no "ab"
  EXPECT_THROW(BpeModel({{"a", 0}}, {}, {.unk_token = "<unk>"}), ValueError);
  EXPECT_THROW(BpeModel({{"a", -1}}, {}, {}), ValueError);
}

}  // namespace
}  // namespace meshlayout::tokenizers
