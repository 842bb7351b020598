// toy_tokenizer.h — a small byte-level BPE tokenizer.json of any vocabulary size from 36, for
// the small random models of the demo and the tests (models/random_llama.h), so that
// `meshlayout generate --prompt "text"` works on them.
//
// Ids: 0 <unk>, 1 <s> (the BOS the post-processor adds), 2 </s>; then characters in GPT-2's
// byte-level alphabet (every byte when the vocabulary has room for all 256, else a-z, space,
// newline and . , ! ? '; other characters become <unk>); then merges of common English pairs
// ("Ġ t", "Ġt h", "Ġth e", "h e", "i n", …, then Ġ + letter, then letter pairs) up to exactly
// vocab_size tokens, so that every id a model of that vocabulary generates decodes.
//
// Example:
//   write_toy_tokenizer("/tmp/tiny", 64);    // /tmp/tiny/tokenizer.json
//   load_tokenizer("/tmp/tiny")->encode("the cat");   // <s> t he Ġc at
#pragma once

#include <cstdint>
#include <string>

namespace meshlayout::tokenizers {

/// The tokenizer.json text of the toy tokenizer with exactly `vocab_size` tokens. ValueError
/// naming vocab_size when it is below 36 or above 4096.
std::string toy_tokenizer_json(int64_t vocab_size);

/// The chat formats' special tokens (chat_template.h) that toy_chat_tokenizer_json adds.
inline constexpr const char* kToyChatTokens[] = {
    "<|im_start|>",      "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
    "<|end_header_id|>", "<|eot_id|>", "<start_of_turn>",   "<end_of_turn>"};

/// The toy tokenizer of vocab_size - 8 tokens plus kToyChatTokens as special added tokens,
/// ids vocab_size - 8 … vocab_size - 1 (every chat format but gemma, which needs <bos>).
std::string toy_chat_tokenizer_json(int64_t vocab_size);

/// Writes `dir`/tokenizer.json (toy_tokenizer_json, or with `chat` toy_chat_tokenizer_json),
/// creating `dir` if needed. ValueError as that; ResourceExhaustedError naming the file when it
/// cannot be written.
void write_toy_tokenizer(const std::string& dir, int64_t vocab_size, bool chat = false);

}  // namespace meshlayout::tokenizers
