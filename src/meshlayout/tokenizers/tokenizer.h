// tokenizer.h — text to token ids and back, for the models meshlayout loads:
// `load_tokenizer(model_dir)` reads a Hugging Face `tokenizer.json` (BPE: byte-level as in
// Llama 3 / Qwen 2, or with byte fallback as in Llama 2 / Mistral; hf_tokenizer.h) or, when
// there is none, a SentencePiece `tokenizer.model` (Gemma; sentencepiece_tokenizer.h).
//
// Round trips: decode(encode(s, false)) == s
//   - byte-level BPE: for any bytes, invalid UTF-8 included (the bytes come back as given;
//     with a normalizer, e.g. Qwen 2.5's NFC, what comes back is the normalised text);
//   - BPE with byte fallback (Llama 2 style, Prepend + Strip decoders): for any valid UTF-8;
//     text that is not valid UTF-8 is refused (ValueError naming the first bad byte and its
//     offset), as Hugging Face, which takes only Unicode strings, cannot encode it either;
//   - SentencePiece: as SentencePiece itself does (it normalises text and replaces each
//     invalid byte by U+FFFD; a model without byte fallback maps unknown characters to unk).
//
// Example:
//   std::unique_ptr<Tokenizer> tok = load_tokenizer("/models/Llama-3.2-1B");
//   std::vector<int64_t> ids = tok->encode("Hello world");   // {128000, 9906, 1917}
//   std::string text = tok->decode(ids, /*skip_special_tokens=*/true);   // "Hello world"
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meshlayout::tokenizers {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// The ids of `text`. Special tokens written in the text are recognised either way;
  /// `add_special_tokens` runs the post-processor (e.g. adds the BOS).
  virtual std::vector<int64_t> encode(std::string_view text,
                                      bool add_special_tokens = true) const = 0;

  /// The text of `ids`; NotFoundError naming an id outside the vocabulary.
  virtual std::string decode(std::span<const int64_t> ids,
                             bool skip_special_tokens = false) const = 0;

  /// The id of a token (as the vocabulary spells it, e.g. "Ġworld"), or nullopt.
  virtual std::optional<int64_t> token_to_id(std::string_view token) const = 0;

  /// The token of an id; NotFoundError naming the id and the vocabulary size otherwise.
  virtual std::string id_to_token(int64_t id) const = 0;

  /// One more than the largest id (added tokens included).
  virtual int64_t vocab_size() const = 0;

  virtual std::optional<int64_t> bos_id() const = 0;
  virtual std::optional<int64_t> eos_id() const = 0;

  /// What was loaded, e.g. "byte-level BPE from tokenizer.json (128256 tokens)".
  virtual std::string describe() const = 0;
};

/// The tokenizer of a model directory: `tokenizer.json` if present (with
/// `tokenizer_config.json`'s bos_token / eos_token when that file exists), else
/// `tokenizer.model`. NotFoundError naming the directory and both file names when neither is
/// there (or the directory does not exist); ValueError / DataLossError for a file that is
/// malformed or of an unsupported kind, naming the file and what is wrong.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir);

}  // namespace meshlayout::tokenizers
