// sentencepiece_tokenizer.h — a SentencePiece `tokenizer.model` (Gemma, older Llama
// checkpoints) as a Tokenizer, through SentencePiece's own library (Debian's
// libsentencepiece-dev), so encode and decode are SentencePiece's exactly: its normaliser,
// its handling of invalid UTF-8 (each bad byte becomes U+FFFD) and of unknown characters.
//
// Special tokens: encode(text, true) puts the BOS first when the model has one (as the
// Hugging Face Gemma and Llama tokenizers do); the model's control symbols written in the
// text are ordinary text to SentencePiece. decode(ids, true) drops control symbols (BOS, EOS,
// PAD, …) and the unknown token.
//
// Example:
//   auto tok = SentencePieceTokenizer::load("/models/gemma-2b/tokenizer.model");
//   tok->encode("Hello");   // {2, 4521}
#pragma once

#include <memory>
#include <string>

#include "meshlayout/tokenizers/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace meshlayout::tokenizers {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  /// DataLossError naming the file and SentencePiece's reason when it cannot be loaded.
  static std::unique_ptr<SentencePieceTokenizer> load(const std::string& path);
  ~SentencePieceTokenizer() override;

  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int64_t> ids, bool skip_special_tokens) const override;
  std::optional<int64_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int64_t id) const override;
  int64_t vocab_size() const override;
  std::optional<int64_t> bos_id() const override;
  std::optional<int64_t> eos_id() const override;
  std::string describe() const override;

 private:
  SentencePieceTokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace meshlayout::tokenizers
