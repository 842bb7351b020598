// hf_tokenizer.h — a Hugging Face `tokenizer.json` with a BPE model, as a Tokenizer.
//
// Encode: added tokens (special or not) are found first — those with "normalized": false in
// the raw text, the others in the normalised text, leftmost-longest, with lstrip/rstrip
// taking the whitespace beside them — then each remaining piece is normalised,
// pre-tokenised and split by the BPE model; the post-processor adds the special tokens.
// Decode: ids → tokens (special ones dropped when asked) → the decoder (tokens joined with
// spaces when there is none).
//
// Read and refused: any field this file does not understand changes results, so it is an
// error naming the JSON path and the value: another model type (WordPiece, Unigram, …), a
// normalizer, pre-tokenizer, decoder or post-processor type not listed in hf_pretokenizers.h
// and hf_decoders.h, BPE dropout, continuing_subword_prefix / end_of_word_suffix, an added
// token with single_word, truncation. `padding` is ignored: one text is encoded, never padded.
//
// Example:
//   auto tok = HfTokenizer::from_json(text, "m/tokenizer.json", nullptr);
//   tok->encode("<|begin_of_text|>Hi", false);   // {128000, 13347}
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "meshlayout/tokenizers/bpe_model.h"
#include "meshlayout/tokenizers/hf_decoders.h"
#include "meshlayout/tokenizers/hf_pretokenizers.h"
#include "meshlayout/tokenizers/tokenizer.h"

namespace meshlayout::tokenizers {

struct AddedToken {
  int64_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

class HfTokenizer final : public Tokenizer {
 public:
  /// Parses the text of a tokenizer.json; `source` (the file name) starts every message.
  /// `config` is tokenizer_config.json's content or nullptr.
  static std::unique_ptr<HfTokenizer> from_json(std::string_view text, std::string_view source,
                                                const nlohmann::json* config);

  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int64_t> ids, bool skip_special_tokens) const override;
  std::optional<int64_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int64_t id) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  std::optional<int64_t> bos_id() const override { return bos_id_; }
  std::optional<int64_t> eos_id() const override { return eos_id_; }
  std::string describe() const override;

 private:
  HfTokenizer() = default;
  void parse(const nlohmann::json& j, const nlohmann::json* config);
  // Splits `text` at the added tokens of `set`; appends (text, nullopt) and (token, id).
  void split_added(std::string_view text, const std::vector<const AddedToken*>& set,
                   std::vector<std::pair<std::string, std::optional<int64_t>>>& out) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;
  std::vector<const AddedToken*> raw_added_, normalized_added_;
  std::unordered_map<std::string, int64_t> added_ids_;
  std::vector<std::optional<std::string>> id_to_token_;
  std::vector<bool> special_;
  std::optional<int64_t> bos_id_, eos_id_;
  bool byte_level_ = false;
};

}  // namespace meshlayout::tokenizers
