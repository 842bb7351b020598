#include "meshlayout/tokenizers/sentencepiece_tokenizer.h"

#include <fmt/format.h>
#include <sentencepiece_processor.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/input_file.h"
#include "meshlayout/core/strings.h"

namespace meshlayout::tokenizers {

SentencePieceTokenizer::SentencePieceTokenizer()
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& path) {
  // Read it ourselves: the checks and messages of input_file.h (a FIFO never blocks).
  const std::string bytes = read_regular_file(path, uint64_t{1} << 30, "SentencePiece model file");
  std::unique_ptr<SentencePieceTokenizer> tok(new SentencePieceTokenizer());
  const auto status = tok->sp_->LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    throw DataLossError(fmt::format(
        "SentencePiece model file {} cannot be loaded: {} (expected a tokenizer.model written "
        "by SentencePiece)",
        quote(path), status.ToString()));
  }
  if (tok->sp_->GetPieceSize() <= 0) {
    throw DataLossError(fmt::format("SentencePiece model file {} has no pieces", quote(path)));
  }
  return tok;
}

std::vector<int64_t> SentencePieceTokenizer::encode(std::string_view text,
                                                    bool add_special_tokens) const {
  std::vector<int> pieces;
  const auto status = sp_->Encode(absl::string_view(text.data(), text.size()), &pieces);
  if (!status.ok()) {
    throw ValueError(fmt::format("SentencePiece cannot encode the text: {}", status.ToString()));
  }
  std::vector<int64_t> ids;
  ids.reserve(pieces.size() + 1);
  if (add_special_tokens && sp_->bos_id() >= 0) ids.push_back(sp_->bos_id());
  ids.insert(ids.end(), pieces.begin(), pieces.end());
  return ids;
}

std::string SentencePieceTokenizer::decode(std::span<const int64_t> ids,
                                           bool skip_special_tokens) const {
  std::vector<int> pieces;
  pieces.reserve(ids.size());
  for (int64_t id : ids) {
    id_to_token(id);  // NotFoundError for an id outside the vocabulary
    if (skip_special_tokens &&
        (sp_->IsControl(static_cast<int>(id)) || sp_->IsUnknown(static_cast<int>(id)))) {
      continue;
    }
    pieces.push_back(static_cast<int>(id));
  }
  std::string text;
  const auto status = sp_->Decode(pieces, &text);
  if (!status.ok()) {
    throw ValueError(fmt::format("SentencePiece cannot decode the ids: {}", status.ToString()));
  }
  return text;
}

std::optional<int64_t> SentencePieceTokenizer::token_to_id(std::string_view token) const {
  const int id = sp_->PieceToId(absl::string_view(token.data(), token.size()));
  if (id < 0 || sp_->IdToPiece(id) != token) return std::nullopt;  // PieceToId gives unk
  return id;
}

std::string SentencePieceTokenizer::id_to_token(int64_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw NotFoundError(
        fmt::format("token id {} is not in the vocabulary (ids 0 to {})", id, vocab_size() - 1));
  }
  return sp_->IdToPiece(static_cast<int>(id));
}

int64_t SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

std::optional<int64_t> SentencePieceTokenizer::bos_id() const {
  return sp_->bos_id() >= 0 ? std::optional<int64_t>(sp_->bos_id()) : std::nullopt;
}

std::optional<int64_t> SentencePieceTokenizer::eos_id() const {
  return sp_->eos_id() >= 0 ? std::optional<int64_t>(sp_->eos_id()) : std::nullopt;
}

std::string SentencePieceTokenizer::describe() const {
  return fmt::format("SentencePiece from tokenizer.model ({} pieces)", vocab_size());
}

}  // namespace meshlayout::tokenizers
