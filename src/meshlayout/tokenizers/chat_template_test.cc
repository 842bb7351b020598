// The chat formats: each rendered as Hugging Face's template for its family renders the same
// conversation (system text, a reply, trimming), encoded with special tokens by id (found in
// text, or by id when the tokenizer does not parse them from text), the stop ids, the choice by
// family and by the tokenizer's tokens, and the refusals (unknown name, missing tokens, roles).
#include "meshlayout/tokenizers/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "meshlayout/core/errors.h"
#include "meshlayout/testing/test_util.h"
#include "meshlayout/tokenizers/hf_tokenizer.h"
#include "meshlayout/tokenizers/toy_tokenizer.h"

namespace meshlayout::tokenizers {
namespace {

using ::testing::HasSubstr;
using testing::ValueErrorMessage;
using Ids = std::vector<int64_t>;

const std::vector<ChatMessage> kChat = {
    {"system", "Be brief."}, {"user", " hi "}, {"assistant", "hello"}, {"user", "bye"}};

std::string rendered(ChatFormat f, const std::vector<ChatMessage>& chat = kChat) {
  std::string out;
  for (const ChatSegment& s : render_chat(f, chat)) out += s.text;
  return out;
}

std::unique_ptr<Tokenizer> chat_toy() {
  return HfTokenizer::from_json(toy_chat_tokenizer_json(64), "toy/tokenizer.json", nullptr);
}

Ids cat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(ChatTemplateTest, RendersAsTheFamiliesTemplates) {
  EXPECT_EQ(rendered(ChatFormat::kChatMl),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n hi <|im_end|>\n"
            "<|im_start|>assistant\nhello<|im_end|>\n<|im_start|>user\nbye<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(rendered(ChatFormat::kLlama3),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nhello<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nbye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(rendered(ChatFormat::kMistral),
            "<s>[INST] Be brief.\n\n hi  [/INST]hello</s>[INST] bye [/INST]");
  EXPECT_EQ(rendered(ChatFormat::kGemma),
            "<bos><start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n<start_of_turn>model\nhello"
            "<end_of_turn>\n<start_of_turn>user\nbye<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(rendered(ChatFormat::kNone), "Be brief.\n hi \nhello\nbye\n");
  // Without a system message; the special tokens are marked as such.
  const std::vector<ChatSegment> want = {{"<|im_start|>", true}, {"user\nhi", false},
                                         {"<|im_end|>", true},   {"\n", false},
                                         {"<|im_start|>", true}, {"assistant\n", false}};
  EXPECT_EQ(render_chat(ChatFormat::kChatMl, {{"user", "hi"}}), want);
  EXPECT_EQ(rendered(ChatFormat::kMistral, {{"user", "hi"}}), "<s>[INST] hi [/INST]");
}

TEST(ChatTemplateTest, EncodesSpecialTokensById) {
  const auto tok = chat_toy();
  const auto id = [&](const char* t) { return Ids{*tok->token_to_id(t)}; };
  const auto enc = [&](std::string_view s) { return tok->encode(s, false); };
  EXPECT_EQ(id("<|im_start|>"), Ids{56});
  const std::vector<ChatMessage> chat = {{"user", "the cat"}, {"assistant", "sat"}, {"user", "on"}};
  EXPECT_EQ(encode_chat(*tok, ChatFormat::kChatMl, chat),
            cat({id("<|im_start|>"), enc("user\nthe cat"), id("<|im_end|>"), enc("\n"),
                 id("<|im_start|>"), enc("assistant\nsat"), id("<|im_end|>"), enc("\n"),
                 id("<|im_start|>"), enc("user\non"), id("<|im_end|>"), enc("\n"),
                 id("<|im_start|>"), enc("assistant\n")}));
  EXPECT_EQ(
      encode_chat(*tok, ChatFormat::kMistral, chat),
      cat({id("<s>"), enc("[INST] the cat [/INST]sat"), id("</s>"), enc("[INST] on [/INST]")}));
  // none: the lines with the tokenizer's post-processor (its BOS).
  EXPECT_EQ(encode_chat(*tok, ChatFormat::kNone, chat), tok->encode("the cat\nsat\non\n", true));
  EXPECT_EQ(chat_stop_ids(*tok, ChatFormat::kLlama3), id("<|eot_id|>"));
  EXPECT_EQ(chat_stop_ids(*tok, ChatFormat::kMistral), id("</s>"));
  EXPECT_EQ(chat_stop_ids(*tok, ChatFormat::kNone), Ids{});
}

// A tokenizer that does not parse special tokens out of text (as SentencePiece's control
// symbols): each byte is a token, the special tokens only have ids.
class BytesTokenizer final : public Tokenizer {
 public:
  Ids encode(std::string_view text, bool) const override {
    Ids ids;
    for (unsigned char c : text) ids.push_back(100 + c);
    return ids;
  }
  std::string decode(std::span<const int64_t>, bool) const override { return ""; }
  std::optional<int64_t> token_to_id(std::string_view t) const override {
    const std::map<std::string, int64_t, std::less<>> specials = {
        {"<bos>", 2}, {"<start_of_turn>", 3}, {"<end_of_turn>", 4}};
    auto it = specials.find(t);
    return it == specials.end() ? std::nullopt : std::optional<int64_t>(it->second);
  }
  std::string id_to_token(int64_t) const override { return ""; }
  int64_t vocab_size() const override { return 356; }
  std::optional<int64_t> bos_id() const override { return 2; }
  std::optional<int64_t> eos_id() const override { return std::nullopt; }
  std::string describe() const override { return "bytes"; }
};

TEST(ChatTemplateTest, SpecialTokensNotFoundInTextGoInById) {
  const BytesTokenizer tok;
  EXPECT_EQ(encode_chat(tok, ChatFormat::kGemma, {{"user", "hi"}}),
            cat({{2, 3},
                 tok.encode("user\nhi", false),
                 {4},
                 tok.encode("\n", false),
                 {3},
                 tok.encode("model\n", false)}));
  EXPECT_EQ(choose_chat_format(std::nullopt, "gemma3_text", tok), ChatFormat::kGemma);
  EXPECT_EQ(chat_stop_ids(tok, ChatFormat::kGemma), Ids{4});
}

TEST(ChatTemplateTest, ChoosesByFamilyThenByTokens) {
  const auto chat = chat_toy();  // every format's tokens but <bos> (gemma)
  const auto plain = HfTokenizer::from_json(toy_tokenizer_json(64), "t", nullptr);  // <s> </s>
  EXPECT_EQ(choose_chat_format(std::nullopt, "qwen2", *chat), ChatFormat::kChatMl);
  EXPECT_EQ(choose_chat_format(std::nullopt, "llama", *chat), ChatFormat::kLlama3);
  EXPECT_EQ(choose_chat_format(std::nullopt, "llama", *plain), ChatFormat::kMistral);  // Llama 2
  EXPECT_EQ(choose_chat_format(std::nullopt, "mistral", *chat), ChatFormat::kMistral);
  EXPECT_EQ(choose_chat_format(std::nullopt, "gemma2", *chat), ChatFormat::kChatMl);  // no <bos>
  EXPECT_EQ(choose_chat_format(std::nullopt, "qwen3", *plain), ChatFormat::kMistral);
  EXPECT_EQ(choose_chat_format(std::string("llama3"), "qwen2", *chat), ChatFormat::kLlama3);
  EXPECT_EQ(choose_chat_format(std::string("none"), "qwen2", *chat), ChatFormat::kNone);
  EXPECT_EQ(choose_chat_format(std::nullopt, "llama", BytesTokenizer()), ChatFormat::kGemma);
}

TEST(ChatTemplateTest, Refusals) {
  const auto chat = chat_toy();
  EXPECT_THAT(
      ValueErrorMessage([&] { choose_chat_format(std::string("chatgpt"), "llama", *chat); }),
      HasSubstr("--template 'chatgpt' is not a chat format; expected chatml, llama3, "
                "mistral, gemma or none"));
  EXPECT_THAT(ValueErrorMessage([&] { choose_chat_format(std::string("gemma"), "gemma", *chat); }),
              HasSubstr("--template gemma needs the special token ['<bos>'], which the tokenizer "
                        "(byte-level BPE from tokenizer.json (64 tokens, 11 added)) does not "
                        "have; formats this tokenizer has: chatml, llama3, mistral, none"));
  const auto plain = HfTokenizer::from_json(toy_tokenizer_json(64), "t", nullptr);
  EXPECT_THAT(ValueErrorMessage([&] { encode_chat(*plain, ChatFormat::kChatMl, kChat); }),
              HasSubstr("needs the special tokens ['<|im_start|>', '<|im_end|>']"));
  EXPECT_THAT(ValueErrorMessage([&] {
                render_chat(ChatFormat::kChatMl, {{"tool", "x"}});
              }),
              HasSubstr("chat message 0 has the role 'tool'; expected 'system', 'user' or "
                        "'assistant'"));
  EXPECT_THAT(ValueErrorMessage([&] {
                render_chat(ChatFormat::kChatMl, {{"user", "a"}, {"system", "b"}});
              }),
              HasSubstr("chat message 1 has the role 'system'; only the first may"));
}

}  // namespace
}  // namespace meshlayout::tokenizers
