// chat_template.h — a conversation as prompt token ids, in the chat formats of the families
// meshlayout loads, written out by hand (Jinja chat templates are not run):
//   chatml  (Qwen 2 / 2.5 / 3)
//     <|im_start|>user\n{text}<|im_end|>\n … <|im_start|>assistant\n
//   llama3  (Llama 3 / 3.1)
//     <|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n{text}<|eot_id|> …
//     <|start_header_id|>assistant<|end_header_id|>\n\n
//   mistral (Mistral; Llama 2's [INST] markers)
//     <s>[INST] {text} [/INST]{reply}</s>[INST] {text} [/INST]
//   gemma   (Gemma 1 / 2 / 3)
//     <bos><start_of_turn>user\n{text}<end_of_turn>\n … <start_of_turn>model\n
//   none    the system text and the turns, one per line, with the tokenizer's own special
//           tokens (its post-processor: a BOS for instance)
// as Hugging Face's templates for those models render them (Llama 3 and Gemma trim each
// message; Mistral and Gemma have no system role: the system text opens the first user
// message, followed by a blank line). A reply ends with the format's end-of-turn token
// (<|im_end|>, <|eot_id|>, </s>, <end_of_turn>), which generation stops on.
//
// Special tokens are resolved by name in the tokenizer (a format whose tokens the tokenizer
// lacks is an error naming them); the text between them is encoded without the
// post-processor, as `apply_chat_template` does.
//
// Example:
//   std::vector<ChatMessage> chat = {{"system", "Be brief."}, {"user", "Hi"}};
//   ChatFormat f = choose_chat_format(std::nullopt, "qwen2", *tok);     // kChatMl
//   std::vector<int64_t> ids = encode_chat(*tok, f, chat);   // ends "<|im_start|>assistant\n"
//   std::vector<int64_t> stop = chat_stop_ids(*tok, f);      // {<|im_end|>'s id}
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/tokenizers/tokenizer.h"

namespace meshlayout::tokenizers {

enum class ChatFormat { kChatMl, kLlama3, kMistral, kGemma, kNone };

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

/// A piece of a rendered conversation: text, or a special token (by its content).
struct ChatSegment {
  std::string text;
  bool special = false;
  bool operator==(const ChatSegment&) const = default;
};

/// "chatml", "llama3", "mistral", "gemma" or "none".
std::string_view chat_format_name(ChatFormat format);

/// The format of a --template name; ValueError quoting it and listing the names otherwise.
ChatFormat parse_chat_format(std::string_view name);

/// The special tokens `format` needs (none for kNone).
std::vector<std::string> chat_special_tokens(ChatFormat format);

/// The special token that ends a reply in `format` (empty for kNone).
std::string chat_end_of_turn(ChatFormat format);

/// `messages` rendered in `format`, ending with the opening of the assistant's turn.
/// ValueError for a role other than system / user / assistant, or a system message that is
/// not the first.
std::vector<ChatSegment> render_chat(ChatFormat format, const std::vector<ChatMessage>& messages);

/// ValueError naming the format and every special token of it the tokenizer does not have.
void check_chat_format(const Tokenizer& tokenizer, ChatFormat format);

/// The format to use: `name` (a --template) if given, else by the model's family
/// (config.json's model_type: qwen* → chatml; llama → llama3 when the tokenizer has Llama 3's
/// header tokens, else mistral; mistral / mixtral → mistral; gemma* → gemma), else — a family
/// none fits, or its tokens missing — the first format whose special tokens the tokenizer has
/// (chatml, llama3, gemma, mistral), else kNone. A named format is checked
/// (check_chat_format).
ChatFormat choose_chat_format(const std::optional<std::string>& name, std::string_view family,
                              const Tokenizer& tokenizer);

/// The prompt ids of `messages` in `format` (check_chat_format first).
std::vector<int64_t> encode_chat(const Tokenizer& tokenizer, ChatFormat format,
                                 const std::vector<ChatMessage>& messages);

/// The ids that end a reply: the end-of-turn token's (none for kNone).
std::vector<int64_t> chat_stop_ids(const Tokenizer& tokenizer, ChatFormat format);

}  // namespace meshlayout::tokenizers
